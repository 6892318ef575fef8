"""bench/promote.py: results enter data/measured/ with a manifest entry; the shipped manifest matches its folder."""

from __future__ import annotations

import json

import pytest

from bench.promote import MANIFEST, PromoteError, check_manifest, load_manifest, main, promote
from conf.rundir import MEASURED_DIR

META = {"git_sha": "abc1234", "date": "2026-12-04T10:00:00+00:00", "device": "NVIDIA H200", "command": "x.py run"}


def _run_dir(path, **meta):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"config": {}, "meta": {**META, **meta}}))
    (path / "metrics.json").write_text("{}")
    (path / "traces.jsonl").write_text('{"name": "step.verify"}\n')
    (path / "chrome_trace.json").write_text("{}")  # the same spans again: not copied
    (path / "generate.log").write_text("")  # empty: not copied
    (path / ".hydra").mkdir()
    (path / ".hydra" / "config.yaml").write_text("a: 1\n")
    return path


def test_the_shipped_manifest_lists_every_file_and_every_listed_file_exists():
    assert (MEASURED_DIR / MANIFEST).is_file()
    assert check_manifest(MEASURED_DIR) == []
    entries = load_manifest(MEASURED_DIR)["entries"]
    assert entries and all(e["what"] and e["device"] and e["date"] and e["commit"] and e["command"] for e in entries)


def test_a_run_folder_is_copied_without_chrome_traces_hidden_or_empty_files(tmp_path):
    measured = tmp_path / "measured"
    calls = tmp_path / "runs" / "call"
    _run_dir(calls / "ar")
    _run_dir(calls / "chain_g4")
    (calls / "run_notes.json").write_text('{"wall_s": 1}')
    entry = promote(calls, what="two runs", to="runtime_runs_2026-12-04_abc1234", measured=measured)
    assert entry["files"] == ["ar/config.json", "ar/metrics.json", "ar/traces.jsonl", "chain_g4/config.json",
                              "chain_g4/metrics.json", "chain_g4/traces.jsonl", "run_notes.json"]
    assert (entry["device"], entry["date"], entry["commit"], entry["command"]) == (
        "NVIDIA H200", "2026-12-04", "abc1234", "x.py run")  # read from the first run dir's meta
    copied = [p for p in (measured / "runtime_runs_2026-12-04_abc1234").rglob("*") if p.is_file()]
    assert len(copied) == 7 and all(p.stat().st_mode & 0o777 == 0o644 for p in copied)
    assert check_manifest(measured) == [] and not [p for p in measured.iterdir() if p.name.startswith(".")]
    doc = json.loads((measured / MANIFEST).read_text())
    assert [e["path"] for e in doc["entries"]] == ["runtime_runs_2026-12-04_abc1234"]
    trimmed = promote(calls, what="two runs", to="trimmed", exclude=["*/traces.jsonl", "run_notes.json"],
                      measured=measured)
    assert trimmed["files"] == ["ar/config.json", "ar/metrics.json", "chain_g4/config.json", "chain_g4/metrics.json"]


def test_a_file_takes_its_provenance_and_its_meta_file_with_it(tmp_path):
    measured = tmp_path / "m"
    res = tmp_path / "runtime_tiny_2026-12-04_abc1234.json"
    res.write_text(json.dumps({"date": "2026-12-04", "git_sha": "abc1234", "device": "2 x NVIDIA H200",
                               "rows": [{"system": "greedy", "tokens_per_s": 1.0}]}))
    entry = promote(res, what="tiny preset", command="python bench/bench_runtime.py preset=tiny", measured=measured)
    assert entry["kind"] == "file" and entry["files"] == [res.name] and entry["device"] == "2 x NVIDIA H200"
    trace = tmp_path / "profile_traces_x.jsonl"
    trace.write_text('{"name": "op.gemm"}\n')
    trace.with_suffix(".meta.json").write_text(json.dumps(META))
    entry = promote(trace, what="operator traces", to="traces/profile_traces_x.jsonl", measured=measured)
    assert entry["files"] == ["profile_traces_x.jsonl", "profile_traces_x.meta.json"]
    assert (measured / "traces" / "profile_traces_x.meta.json").is_file() and check_manifest(measured) == []
    assert json.loads((measured / res.name).read_text())["rows"][0]["system"] == "greedy"


def test_refusals_name_the_flag_or_the_path(tmp_path):
    measured = tmp_path / "m"
    bare = tmp_path / "bare.json"
    bare.write_text("{}")
    with pytest.raises(PromoteError, match="records no device, date, commit, command; pass --device --date"):
        promote(bare, what="x", measured=measured)
    entry = promote(bare, what="x", device="cpu", date="2026-12-04", commit="abc", command="c", measured=measured)
    assert entry["commit"] == "abc"
    with pytest.raises(PromoteError, match="exists \\(pass --replace"):
        promote(bare, what="x", device="cpu", date="2026-12-04", commit="abc", command="c", measured=measured)
    bare.write_text('{"v": 2}')
    promote(bare, what="y", device="cpu", date="2026-12-04", commit="def", command="c", replace=True,
            measured=measured)
    assert json.loads((measured / "bare.json").read_text()) == {"v": 2}
    assert [e["commit"] for e in load_manifest(measured)["entries"]] == ["def"]
    folder = _run_dir(tmp_path / "runs" / "ar")
    promote(folder, what="a run", to="call/ar", measured=measured)
    with pytest.raises(PromoteError, match="overlaps the manifest entries \\['call/ar'\\]"):
        promote(folder, what="a run", to="call", measured=measured)
    with pytest.raises(PromoteError, match="--what"):
        promote(folder, what=" ", to="other", measured=measured)
    with pytest.raises(PromoteError, match="not a path inside"):
        promote(folder, what="a run", to="../out", measured=measured)


def test_check_finds_unlisted_and_missing_files(tmp_path, capsys):
    measured = tmp_path / "m"
    promote(_run_dir(tmp_path / "ar"), what="a run", measured=measured)
    (measured / "stray.json").write_text("{}")
    (measured / "ar" / "metrics.json").unlink()
    assert sorted(check_manifest(measured)) == [
        f"{MANIFEST} entry ar: listed file ar/metrics.json does not exist",
        f"stray.json: under {measured} but in no {MANIFEST} entry"]
    assert main(["--check", "--measured", str(measured)]) == 1
    assert "stray.json" in capsys.readouterr().out
    assert main([str(tmp_path / "nothing"), "--what", "x", "--measured", str(measured)]) == 2
