"""bench/kernel_resources.py: the tree-attention kernel compiled offline for sm_90a (no GPU), its ptxas report read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import kernel_resources


def run_tool(tmp_path: Path, *args: str) -> tuple[str, dict]:
    """The tool in a subprocess with the interpreter off (this test session imported the kernels interpreted):
    (stdout, the one results file it wrote under tmp_path)."""
    try:
        kernel_resources.ptxas_path()
    except SystemExit as e:
        pytest.skip(str(e))
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    proc = subprocess.run([sys.executable, str(Path(kernel_resources.__file__)), *args, "--out", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (path,) = tmp_path.glob("kernel_resources_*.json")
    return proc.stdout, json.loads(path.read_text())


def test_offline_compile_reports_registers_and_spills(tmp_path):
    """The 8B rows-1 attention, specialised as a launch: the device's figures (ncu on the H200: 240-242 registers)."""
    out, saved = run_tool(tmp_path, "--quick")
    assert saved["git_sha"] and saved["ptxas"].startswith("Build cuda") and "| llama3-8b | 1 |" in out
    (rec,) = saved["rows"]
    assert (rec["shape"], rec["rows"], rec["rope"], rec["tile"]) == ("llama3-8b", 1, False, "heuristic")
    assert (rec["block_m"], rec["block_n"], rec["num_warps"], rec["wide"]) == (16, 256, 8, True)
    assert 128 <= rec["registers"] <= 255 and rec["stack_bytes"] >= 0 and rec["shared_bytes"] > 0


def test_ptxas_report_is_parsed_or_refused():
    report = ("ptxas info    : Function properties for k\n    24 bytes stack frame, 8 bytes spill stores, 12 bytes "
              "spill loads\nptxas info    : Used 96 registers, used 1 barriers\n")
    m = kernel_resources._PTXAS_REPORT.search(report)
    assert m is not None and tuple(map(int, m.groups())) == (24, 8, 12, 96)
    with pytest.raises(RuntimeError, match="ptxas failed"):
        kernel_resources.ptxas_report(".version 8.7\n.target sm_90a\nnot ptx", 90)


def test_interpreted_kernels_are_refused_with_a_clear_error():
    """Under TRITON_INTERPRET=1 (this test session) the kernel is an interpreted function: the tool says so."""
    import triton

    from kernels.tree_attention import _tree_attention_kernel

    if isinstance(_tree_attention_kernel, triton.runtime.jit.JITFunction):
        pytest.skip("the kernels were imported compiled, not interpreted")
    with pytest.raises(SystemExit, match="TRITON_INTERPRET=0"):
        kernel_resources.compile_case("llama3-8b", 1, False, {}, 90)


def test_offline_compile_of_a_gemm_tile(tmp_path):
    """--gemms --quick: the tuned 8B QKV skinny tile at one row; its shared memory is what ncu read on the H200."""
    out, saved = run_tool(tmp_path, "--gemms", "--quick")
    (rec,) = saved["rows"]
    assert (rec["case"], rec["kernel"], rec["block_n"], rec["block_k"]) == ("qkv_8b", "skinny", 64, 256)
    assert 16 <= rec["registers"] <= 255 and rec["spill_store_bytes"] >= 0 and rec["shared_bytes"] == 122880
    assert "| Llama-3-8B QKV, tuned |" in out


def test_gemm_cases_are_chosen_by_name(tmp_path):
    """--gemms --case NAME (repeatable): only those GEMM_TILES cases; an unknown one is named."""
    out, saved = run_tool(tmp_path, "--gemms", "--case", "o_8b", "--case", "down_8b")
    assert [r["case"] for r in saved["rows"]] == ["o_8b", "down_8b"] and saved["rows"][0]["shared_bytes"] == 73728
    with pytest.raises(SystemExit, match="--case: 'qkv' is not one of qkv_8b"):
        kernel_resources.main(["--gemms", "--case", "qkv", "--out", str(tmp_path)])


def test_jit_specialization_marks_what_a_launch_specialises():
    """Pointers and ints divisible by 16 get tt.divisibility 16, ints equal to 1 become constants, other ints stay;
    an int without a launch value is named (the offline compile must see what the JIT would)."""
    from types import SimpleNamespace

    fn = SimpleNamespace(__name__="k", arg_names=["X", "M", "N", "stride", "BLOCK"])
    sig = {"X": "*bf16", "M": "i32", "N": "i32", "stride": "i32", "BLOCK": "constexpr"}
    consts, attrs = kernel_resources.jit_specialization(fn, sig, {"M": 1, "N": 8, "stride": 4096})
    assert consts == {"M": 1}
    assert attrs == {(0,): [["tt.divisibility", 16]], (3,): [["tt.divisibility", 16]]}
    with pytest.raises(KeyError, match="k's integer argument 'N'"):
        kernel_resources.jit_specialization(fn, sig, {"M": 1, "stride": 16})


def test_attention_variants_side_by_side_with_static_sass(tmp_path):
    """--attention-variants --quick: the 8B single-token launch as the runtime runs it (prefix_ready), without the
    prefetch, through TMA descriptors, at 16 warps: resources and static SASS per variant."""
    out, saved = run_tool(tmp_path, "--attention-variants", "--quick")
    by = {r["variant"]: r for r in saved["rows"]}
    assert set(by) == set(kernel_resources.ATTENTION_VARIANTS)
    assert by["runtime"]["prefetch"] and not by["no_prefetch"]["prefetch"] and by["runtime"]["rope"]
    assert by["w16"]["num_warps"] == 16 and by["w16"]["registers"] <= 128 and by["runtime"]["num_warps"] == 8
    assert by["tma"]["sass_opcodes"]["UTMALDG"] > 0 and by["runtime"]["sass_opcodes"]["UTMALDG"] == 0
    assert by["tma"]["sass_opcodes"]["IMAD"] < by["runtime"]["sass_opcodes"]["IMAD"]
    assert all(r["sass_lines"] > 1000 and r["sass_opcodes"]["HMMA"] > 0 for r in by.values())
    assert "| llama3-8b | 1 | tma | 8 |" in out
    # the prefetch's loads precede the PDL wait, and so does their shared-memory staging
    assert by["runtime"]["before_pdl_wait"]["LDG"] > 0 and by["runtime"]["before_pdl_wait"]["STS"] > 0
    assert by["no_prefetch"]["before_pdl_wait"]["LDG"] == 0
