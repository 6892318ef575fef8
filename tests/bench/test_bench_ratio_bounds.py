"""bench/bench_ratio_bounds.py: the best configurations per acceptance table and draft host scale, recorded."""

from __future__ import annotations

import json

import pytest

from bench import bench_ratio_bounds


def test_ratio_bounds_record_each_cell_and_cheaper_draft_hosts_never_lose(tmp_path):
    record = bench_ratio_bounds.main(["--quick", "--top1", "0.85", "--host", "1,0", "--out", str(tmp_path)])
    saved = json.loads(next(tmp_path.glob("ratio_bounds_*.json")).read_text())
    assert saved == json.loads(json.dumps(record)) and {"git_sha", "date", "device", "config"} <= set(saved)
    cells = {(c["acceptance"], c["host_scale"]): c for c in saved["cells"]}
    assert set(cells) == {(a, h) for a in ("smollm2 (measured)", "top-1 0.85") for h in (1.0, 0.0)}
    for c in cells.values():
        s, a = c["serial_best"], c["async_best"]
        assert (s["bs"], s["w"], a["bs"], a["w"]) == (8, 8, 8, 8) and s["d"] in ("auto", "3")
        assert c["async_over_serial"] == pytest.approx(a["tokens_per_s"] / s["tokens_per_s"])
        assert c["async_over_ar"] == pytest.approx(a["tokens_per_s"] / c["autoregressive_tokens_per_s"])
        for run in (a, c["async_pick"]):  # iteration / verify: the draft is never free
            assert run["iteration_over_verify"] > 1.0
        assert (c["async_pick"]["bs"], c["async_pick"]["w"], c["async_pick"]["d"]) == bench_ratio_bounds.PICK
    for acc in ("smollm2 (measured)", "top-1 0.85"):  # no draft host time: both tree modes at least as fast
        for mode in ("serial_best", "async_best"):
            assert cells[(acc, 0.0)][mode]["tokens_per_s"] >= cells[(acc, 1.0)][mode]["tokens_per_s"]
    # a higher top-1 acceptance: longer accepted paths for both tree modes (same draft host costs)
    for mode in ("serial_best", "async_best"):
        assert cells[("top-1 0.85", 1.0)][mode]["accept_len"] > cells[("smollm2 (measured)", 1.0)][mode]["accept_len"]


def test_one_row_table_keeps_the_measured_tail_shape():
    row = [0.6, 0.2, 0.1, 0.05]
    (table,) = bench_ratio_bounds.one_row_table(0.8, row)
    assert table[0] == 0.8 and table[1:] == pytest.approx([0.1, 0.05, 0.025])
    with pytest.raises(SystemExit, match=r"--top1: each value must be in \(0, 1\), got 1.0"):
        bench_ratio_bounds.one_row_table(1.0, row)


def test_ratio_bounds_refuse_bad_arguments(tmp_path):
    with pytest.raises(SystemExit, match="--profile: .*missing.json is not a file"):
        bench_ratio_bounds.main(["--profile", str(tmp_path / "missing.json"), "--out", str(tmp_path)])
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"runtime": {"expand_extra_s": 0.0}}))
    with pytest.raises(SystemExit, match="has no runtime.draft_round_s, runtime.expand_extra_per_row_s or "
                                         "runtime.expand_extra_per_real_row_s"):
        bench_ratio_bounds.main(["--profile", str(bare), "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--host: scales must be >= 0"):
        bench_ratio_bounds.main(["--host", "-1", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--top1 / --host / --device: comma-separated numbers expected"):
        bench_ratio_bounds.main(["--top1", "x", "--out", str(tmp_path)])
    for bad in ("0", "-0.5", "inf"):
        with pytest.raises(SystemExit, match="--device: scales must be finite and > 0"):
            bench_ratio_bounds.main(["--device", bad, "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"--draft-bits: 16 and / or 8 .*got '4'"):
        bench_ratio_bounds.main(["--draft-bits", "4", "--out", str(tmp_path)])


def test_faster_draft_kernels_shorten_the_picks_iteration(tmp_path):
    """--device: the draft's kernel time scaled; at workload a's pick (a fixed configuration) a faster draft can only
    shorten the target's wait for a proposal, so the iteration over the verify falls and tokens/s do not drop;
    autoregressive decoding (the target alone) is unchanged."""
    record = bench_ratio_bounds.main(["--quick", "--top1", "", "--host", "1", "--device", "1,0.6",
                                      "--out", str(tmp_path)])
    by_scale = {c["device_scale"]: c for c in record["cells"]}
    assert set(by_scale) == {1.0, 0.6}
    slow, fast = by_scale[1.0]["async_pick"], by_scale[0.6]["async_pick"]
    assert fast["iteration_over_verify"] < slow["iteration_over_verify"]
    assert fast["tokens_per_s"] >= slow["tokens_per_s"]
    assert by_scale[0.6]["autoregressive_tokens_per_s"] == by_scale[1.0]["autoregressive_tokens_per_s"]


def test_an_fp8_draft_shortens_the_picks_iteration(tmp_path):
    """--draft-bits 8: the draft's layer GEMMs stream fp8 copies (cheaper in the shipped profile's pricing); the pick's
    iteration over the verify falls; autoregressive decoding (the target alone) is unchanged."""
    record = bench_ratio_bounds.main(["--quick", "--top1", "", "--host", "1", "--draft-bits", "16,8",
                                      "--out", str(tmp_path)])
    by_bits = {c["draft_bits"]: c for c in record["cells"]}
    assert set(by_bits) == {16, 8}
    assert by_bits[8]["async_pick"]["iteration_over_verify"] < by_bits[16]["async_pick"]["iteration_over_verify"]
    assert by_bits[8]["autoregressive_tokens_per_s"] == by_bits[16]["autoregressive_tokens_per_s"]
