"""bench/ncu_step.py on CPU: ncu's CSV (--page details) read into one row per kernel; bad input is named."""

from __future__ import annotations

import pytest

from bench.ncu_step import STALL_METRIC, main, summarize, table

HEADER = '"ID","Process ID","Kernel Name","Grid Size","Section Name","Metric Name","Metric Unit","Metric Value"\n'


def _rows(kid, name, grid, metrics):
    return "".join(f'"{kid}","1","{name}","{grid}","S","{m}","{u}","{v}"\n' for m, u, v in metrics)


CSV = ("==PROF== Connected to process 1\n" + HEADER
       + _rows(0, "_skinny_kernel(...)", "(96, 1, 1)", [
           ("Duration", "usecond", "15.52"), ("Compute (SM) Throughput", "%", "12.3"),
           ("Memory Throughput", "%", "71.0"),
           ("DRAM Throughput", "%", "70.2"), ("Registers Per Thread", "register/thread", "255"),
           ("Achieved Occupancy", "%", "6.1"), ("Issued Ipc Active", "inst/cycle", "0.41"),
           ("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "", "30.5"),
           ("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "", "1.5"),
           ("smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", "", "40")])
       + _rows(1, "_tree_attention_kernel(...)", "(1, 8, 8)", [("Duration", "nsecond", "9,800")])
       + "==PROF== Disconnected from process 1\n")


def test_summarize_reads_durations_throughputs_and_stalls():
    k0, k1 = summarize(CSV)
    assert (k0["kernel"], k0["grid"], k0["duration_us"]) == ("_skinny_kernel", "(96, 1, 1)", 15.52)
    assert k0["registers"] == 255
    assert (k0["memory_pct"], k0["dram_pct"], k0["achieved_occupancy_pct"]) == (71.0, 70.2, 6.1)
    assert k0["stalls"] == [("wait", 40.0), ("long_scoreboard", 30.5), ("barrier", 1.5)]  # most cycles first
    assert k1["duration_us"] == pytest.approx(9.8) and k1["stalls"] == []
    out = table([k0, k1])
    assert "| 0 | _skinny_kernel (96, 1, 1) | 15.52 | 12.3 | 71.0 | 70.2 | 255 | 6.1 | wait 40.0, " in out
    assert "| 1 | _tree_attention_kernel (1, 8, 8) | 9.80 | - |" in out
    assert STALL_METRIC.match("smsp__average_warp_issue_stalled_membar_per_issue_active.ratio").group(1) == "membar"


def test_bad_input_is_named(tmp_path):
    with pytest.raises(ValueError, match="no header row"):
        summarize("==PROF== nothing profiled\n")
    bad = tmp_path / "x.csv"
    bad.write_text('"ID","Name"\n"0","k"\n')
    with pytest.raises(SystemExit, match=r"--summarize .*x.csv: ncu csv: expected the columns"):
        main(["--summarize", str(bad)])
    with pytest.raises(SystemExit, match="--summarize: no file"):
        main(["--summarize", str(tmp_path / "missing.csv")])
    with pytest.raises(SystemExit, match="--rows: expected 1..64"):
        main(["--rows", "0"])
    with pytest.raises(SystemExit, match="--ctx: expected >= 1"):
        main(["--ctx", "0"])
    with pytest.raises(SystemExit, match="--cap: expected >= ctx"):
        main(["--ctx", "2040", "--rows", "16"])
    with pytest.raises(SystemExit, match="--preset: unknown model preset 'llama9'"):
        main(["--preset", "llama9"])


def test_the_driver_runs_a_step_on_cpu():
    """The profiled step's code path (model with the runtime's kernels, prefill, a tree step) on a tiny model, CPU."""
    pytest.importorskip("kernels")
    from bench.ncu_step import run_step

    run_step("tiny-llama", 4, 20, 32, device="cpu")
