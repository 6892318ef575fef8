"""bench/step_replay.py: the case parser names the bad case, the table, the tree inputs; the replays need a GPU."""

from __future__ import annotations

import json

import pytest
import torch

from bench.step_replay import main, parse_cases, table, tree_inputs


@pytest.mark.parametrize("spec,match", [
    ("llama3-8b:8", r"'llama3-8b:8' is not preset:role:rows\[:tree_len\]"),
    ("llama3-8b:target:x", r"is not preset:role:rows"),
    ("llama9:target:8", r"'llama9:target:8': .*llama9"),
    ("llama3-8b:verifier:8", r"role must be one of target, draft, got 'verifier'"),
    ("llama3-8b:target:9:8", r"needs 1 <= rows <= tree_len"),
    ("llama3-8b:target:65", r"rows <= 64"),
    ("llama3.2-1b:draft:1:1100", r"--ctx 1024 \+ tree_len 1100 exceeds --cap 2048 KV slots"),
    ("llama3-8b:target:8,llama3-8b:target:8", r"the same preset, role and rows twice"),
])
def test_bad_cases_name_the_case(spec, match):
    with pytest.raises(SystemExit, match=match):
        parse_cases(spec, ctx=1024, cap=2048)


def test_cases_parse_with_tree_len_defaulting_to_rows():
    assert parse_cases("llama3-8b:target:8,llama3.2-1b:draft:1:64", 1024, 2048) == [
        ("llama3-8b", "target", 8, 8), ("llama3.2-1b", "draft", 1, 64)]


@pytest.mark.parametrize("argv,match", [(["--rounds", "0"], "--rounds: expected an integer >= 1, got 0"),
                                        (["--ctx", "-1"], "--ctx: expected an integer >= 1, got -1")])
def test_bad_counts_name_the_option(argv, match):
    with pytest.raises(SystemExit, match=match):
        main(argv)


def test_cpu_is_refused(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        main(["--cases", "tiny-llama:target:4"])


def test_tree_inputs_are_a_binary_tree_after_the_context():
    ids, pos, slots, mask = tree_inputs(7, 100, 50, torch.Generator().manual_seed(0))
    assert ids.shape == (7,) and int(ids.max()) < 50
    assert pos.tolist() == [100, 101, 101, 102, 102, 102, 102] and slots.tolist() == list(range(7))
    assert mask[6].tolist() == [True, False, True, False, False, False, True]  # node 6: parent 2, root 0


def test_table_has_a_row_per_case():
    rows = [{"preset": "llama3-8b", "role": "target", "rows": 8, "replay_s": 4.319e-3, "over_floor": 1.144,
             "floor_s": 3.775e-3}]
    assert "| llama3-8b target rows 8 | 4.319 | 1.144 | 3.775 |" in table(rows)


@pytest.mark.gpu
def test_replays_on_the_gpu(tmp_path):
    out = tmp_path / "steps.json"
    rec = main(["--cases", "tiny-llama:target:1,tiny-llama:target:4,tiny-llama:draft:2:16", "--ctx", "64",
                "--cap", "128", "--rounds", "3", "--inner", "2", "--out", str(out)])
    assert json.loads(out.read_text())["results"] == rec["results"]
    assert [(r["role"], r["rows"], r["tree_len"]) for r in rec["results"]] == [
        ("target", 1, 1), ("target", 4, 4), ("draft", 2, 16)]
    for r in rec["results"]:
        assert r["logits_finite"] and len(r["replay_s_all"]) == 3 and r["replay_s"] > 0 and r["floor_s"] > 0
        assert r["over_floor"] == pytest.approx(r["replay_s"] / r["floor_s"])
