"""bench/bench_attention_splits.py on CPU (interpreter): every min-blocks variant is right, and written."""

from __future__ import annotations

import json

from bench.bench_attention_splits import main


def test_attention_split_sweep_checks_every_variant_on_cpu(tmp_path):
    result = main(["--device", "cpu", "--out", str(tmp_path)])
    saved = json.loads(next(tmp_path.glob("attention_splits_cpu_*.json")).read_text())
    assert saved == result and saved["git_sha"] and saved["date"]
    assert [r["tile"] for r in saved["rows"]] == [{"min_blocks": mb} for mb in (1, 2, 4, 8)]
    assert all(r["rel_err"] < 1e-4 for r in saved["rows"])
