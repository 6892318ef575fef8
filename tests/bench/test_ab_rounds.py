"""bench/ab_rounds.py: the off / on A/B summary over interleaved rounds (synthetic bench_runtime results)."""

import json

import pytest

from bench import ab_rounds


def _run(tmp_path, name, tps, iteration, wall, accept=2.0, modes=("autoregressive", "chain")):
    rows = [{"system": "swiftspec", "mode": m, "tokens_per_s": tps + i, "iteration_time_s": iteration,
             "mean_accept_len": 1.0 if m == "autoregressive" else accept, "generated_tokens": 512, "wall_s": wall}
            for i, m in enumerate(modes)]
    rows.append({"system": "transformers", "mode": "autoregressive", "tokens_per_s": 1.0})
    data = {"git_sha": "abcdef0123", "date": "2026-12-01", "device": "1 x test", "prompt_tokens": [38] * 4,
            "rows": rows}
    (tmp_path / name).write_text(json.dumps(data))


def test_medians_ratio_and_time_outside_decode(tmp_path):
    for r, (off, on) in enumerate([(1000.0, 1100.0), (900.0, 1200.0), (1100.0, 1150.0)], start=1):
        _run(tmp_path, f"r{r}_pgfalse.json", off, 1e-3, 0.6)
        _run(tmp_path, f"r{r}_pgtrue.json", on, 1e-3, 0.55)
    (tmp_path / "notes.txt").write_text("ignored")
    rec = ab_rounds.main([str(tmp_path), "--off", "pgfalse", "--on", "pgtrue", "--name", "x_ab",
                          "--out", str(tmp_path / "out")])
    ar = rec["summary"]["autoregressive"]
    assert ar["tokens_per_s_off"] == 1000.0 and ar["tokens_per_s_on"] == 1150.0
    assert ar["ratio_on_off"] == pytest.approx(1.15)
    # 512 tokens / accept 1 x 1 ms = 0.512 s of iterations; the rest of 0.6 s over 4 requests
    assert ar["non_decode_per_request_s_off"] == pytest.approx((0.6 - 0.512) / 4)
    chain = rec["summary"]["chain"]
    assert chain["non_decode_per_request_s_on"] == pytest.approx((0.55 - 0.256) / 4)
    assert [r["round"] for r in rec["rounds"]["chain"]["on"]] == ["r1_pgtrue", "r2_pgtrue", "r3_pgtrue"]
    written = json.loads((tmp_path / "out" / "x_ab_2026-12-01_abcdef0.json").read_text())
    assert written["summary"] == json.loads(json.dumps(rec["summary"])) and len(written["results"]) == 6


def test_errors_name_the_label_or_file(tmp_path):
    _run(tmp_path, "r1_a.json", 1.0, 1e-3, 1.0)
    with pytest.raises(SystemExit, match="label 'b'.*labels found: \\['a'\\]"):
        ab_rounds.main([str(tmp_path), "--off", "a", "--on", "b", "--name", "n", "--out", ""])
    (tmp_path / "r1_b.json").write_text(json.dumps({"rows": [{"mode": "autoregressive", "tokens_per_s": 1.0}]}))
    with pytest.raises(SystemExit, match="r1_b.json: mode 'autoregressive' lacks numeric"):
        ab_rounds.main([str(tmp_path), "--off", "a", "--on", "b", "--name", "n", "--out", ""])
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="empty: no r<round>_<label>.json files"):
        ab_rounds.main([str(tmp_path / "empty"), "--off", "a", "--on", "b", "--name", "n", "--out", ""])
