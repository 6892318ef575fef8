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
    """The profiled step's code path (model with the runtime's kernels, prefill, a tree step) on a tiny model, CPU:
    finite logits of one row per token, the same with the fused RoPE attention at every row count."""
    pytest.importorskip("kernels")
    import torch

    from bench.ncu_step import run_step

    logits = run_step("tiny-llama", 4, 20, 32, device="cpu")
    assert logits.shape[0] == 4 and torch.isfinite(logits).all()
    fused = run_step("tiny-llama", 4, 20, 32, device="cpu", rope_attention_all=True)
    from conf.presets import MODEL_PRESETS
    from tests.tolerances import assert_close, forward_terms

    assert_close(fused, logits, torch.float32, reduction=forward_terms(MODEL_PRESETS["tiny-llama"], 32),
                 what="fused RoPE attention vs the plain step")


SASS_HEADER = ('"Kernel Name","_tree_attention_kernel",\n'
               '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
               '"# Samples","Instructions Executed"\n')


def _sass(lines):
    return SASS_HEADER + "".join(f'"0x{i:x}","{src}","{smp}","0","0","{n}"\n' for i, (src, smp, n) in enumerate(lines))


def test_sass_summary_splits_set_up_from_the_tensor_core_part(tmp_path, capsys):
    """--sass: totals, the share before the first HMMA / HGMMA, the opcode mix (predicates and modifiers dropped) and
    the hottest lines by stall samples; a file without the source page's header is named."""
    from bench.ncu_step import summarize_sass

    text = _sass([("LDC R1, c[0x0][0x28]", 2, 256), ("IMAD.WIDE R2, R3, 0x2, R4", 0, "1,024"),
                  ("@!P1 LDG.E.128 R4, desc[UR4][R2.64]", 6, 512), ("HMMA.16816.F32.BF16 R8, R4, R6, RZ", 1, 256),
                  ("LDS R11, [UR4]", 9, 256), ("EXIT", 0, 0)])
    s = summarize_sass(text, top=3)
    assert s["sass_lines"] == 6 and s["executed"] == 2304 and s["stall_samples"] == 18
    assert s["first_mma_line"] == 3 and s["executed_before_mma"] == 1792 and s["samples_before_mma"] == 8
    assert s["opcodes"][0] == ("IMAD", 1024) and ("LDG", 512) in s["opcodes"]
    assert [h["line"] for h in s["hot_lines"]] == [0, 2, 4]
    path = tmp_path / "sass.csv"
    path.write_text(text)
    assert main(["--sass", str(path), "--warps", "256"]) == 0
    out = capsys.readouterr().out
    assert "2,304 warp instructions executed, 9 per warp" in out and "78% of the instructions" in out
    path.write_text('"ID","Kernel Name"\n"0","x"\n')
    with pytest.raises(SystemExit, match=r"--sass .*sass.csv: ncu sass csv: no header row starting with \"Address\""):
        main(["--sass", str(path)])
    with pytest.raises(SystemExit, match="--sass: no file"):
        main(["--sass", str(tmp_path / "missing.csv")])
