"""bench/bench_fp8_tiles.py on CPU: the tables it derives from its rows and its argument errors (the sweep: GPU)."""

from __future__ import annotations

import pytest

from bench import bench_fp8_tiles as B


def _row(shape, kernel, n, k, m, tile, config, us):
    return dict(shape=shape, kernel=kernel, n=n, k=k, m=m, floor_us=1.0, tile=tile, config=config, us=us,
                pct_floor=100.0 / us, max_err=0.0)


def test_tables_take_the_least_summed_swept_tile_per_bucket_and_never_the_default():
    a, b = {"block_n": 32, "split_k": 1}, {"block_n": 64, "split_k": 8}
    rows = [_row("1b_o", "partials", 2048, 2048, m, "default", None, 1.0) for m in (1, 8)]  # fastest, not a tile
    rows += [_row("1b_o", "partials", 2048, 2048, m, "swept", cfg, us)
             for m, cfg, us in ((1, a, 5.0), (8, a, 5.0), (1, b, 4.0), (8, b, 7.0), (32, a, 9.0))]  # 32: its own bucket
    rows += [_row("1b_gate_up", "swiglu", 8192, 2048, 1, "swept", {"block_i": 64, "block_k": 256}, 12.0)]
    assert B.best_tiles(rows, ("skinny", "partials")) == [
        {"n": 2048, "k": 2048, "m_bucket": 16, "config": a}, {"n": 2048, "k": 2048, "m_bucket": 32, "config": a}]
    fused = B.best_tiles(rows, ("swiglu",))
    assert B.table_literal(fused) == "{\n    (8192, 2048, 16): {'block_i': 64, 'block_k': 256},\n}"
    summary = {(s["shape"], s["m"]): s for s in B.summary(rows)}
    assert summary[("1b_o", 8)]["best_config"] == a and summary[("1b_o", 8)]["speedup"] == pytest.approx(1 / 5)
    assert summary[("1b_gate_up", 1)]["default_us"] is None and "| 1b_gate_up | 1 |" in B.markdown(
        {"summary": list(summary.values())})


def test_bad_arguments_are_refused_before_any_gpu_work():
    with pytest.raises(SystemExit, match=r"--shapes: unknown \['2b_qkv'\]"):
        B.main(["--shapes", "2b_qkv"])
    with pytest.raises(SystemExit, match="--ms: row counts in 1..64"):
        B.main(["--ms", "0,65"])
