"""calibration/profile_ops.py on CPU: the operator sweep's code paths, and the graph-timing helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from calibration import profile_ops as P
from calibration import profiler as H
from calibration import runtime_kernels as R
from conf.presets import MODEL_PRESETS
from tests.tolerances import assert_close


def test_rotating_cycles_through_the_operands():
    seen: list[int] = []
    fn = H.rotating(seen.append, [0, 1, 2])
    for _ in range(7):
        fn()
    assert seen == [0, 1, 2, 0, 1, 2, 0]


def _profiler(device: str, op_timing: str = "graph") -> H.Profiler:
    return H.Profiler(device=torch.device(device), dtype=torch.float32, out=None, quick=True, device_name="x",
                      run_id="t", op_timing=op_timing)


def test_operand_copies_overflow_the_l2_only_under_graph_timing():
    mib = 1 << 20
    gpu = _profiler("cuda")  # a device descriptor: no GPU needed to size the copies
    assert gpu.graph_timing
    assert gpu.copies(50 * mib) == 6  # 256 MiB / 50 MiB, rounded up: 300 MiB read per cycle
    assert gpu.copies(1 * mib) == H.MAX_COPIES  # tiny KV blocks: capped
    assert gpu.copies(1 << 30) == 1  # a 1 GiB LM head never fits in L2
    assert _profiler("cuda", "eager").copies(mib) == 1  # do_bench flushes L2 itself
    assert not _profiler("cpu").graph_timing and _profiler("cpu").copies(mib) == 1


def test_quick_cpu_sweep_writes_records_and_meta(tmp_path):
    out = tmp_path / "t.jsonl"
    assert P.main(["--device", "cpu", "--quick", "--only", "gemm,attention,compaction,steps", "--out", str(out),
                   "--budget-s", "60"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    names = {r["name"] for r in records}
    assert {"op.gemm", "op.attention", "op.compaction", "op.step_overhead", "op.tree_op"} <= names
    assert all(r["duration_s"] > 0 for r in records)
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["op_timing"] == "host" and meta["steps_mode"] == "eager" and meta["errors"] == []
    assert meta["steps_kernels"] is None  # eager steps: no skinny GEMMs, no PDL


def test_quick_cpu_comm_times_both_leader_channels_and_calibrate_splits_them(tmp_path):
    """The comm section (2 gloo ranks on this host) times the leader channel over torch.distributed and over the
    Unix socket; calibrate reads the second kind as `message_unix` samples."""
    from simulator.trace_reader import read_traces

    out = tmp_path / "c.jsonl"
    assert P.main(["--device", "cpu", "--quick", "--only", "comm", "--out", str(out), "--budget-s", "60"]) == 0
    messages = [json.loads(line) for line in out.read_text().splitlines() if '"op.message"' in line]
    transports = {json.loads(r["extra"])["transport"] for r in messages}
    assert transports == {"runtime.comm.LeaderChannel", "runtime.unix_channel.UnixLeaderChannel"}
    samples = read_traces([str(out)]).samples
    assert len(samples["message"]) == len(samples["message_unix"]) == len(messages) // 2


def test_graph_steps_run_the_kernels_graphs_config():
    """Graph-mode steps stand for the kernels=graphs runtime: its skinny / pdl / ... features, as the config the
    Hydra group composes resolves them."""
    from calibration.runtime_kernels import graphs_kernels
    from conf import compose_config

    features = compose_config("generate", ["kernels=graphs"]).kernels.features
    assert graphs_kernels() == {key: getattr(features, key) for key in ("skinny", "pdl", "draft_head",
                                                                        "rope_attention", "target_qkv_rope")}
    assert all(graphs_kernels().values())


def test_gemm_operators_are_the_runtimes_kernels():
    """Graph-timed GEMMs run what the fused-path runtime runs per matrix, TP and rows; each call computes the
    product (SwiGLU: silu(gate) * up; partials: summed over the splits)."""
    choice = {(mat, tp, m, sk): R.runtime_gemm(mat, tp, m, sk)
              for mat in ("qkv", "o", "gate_up", "down", "lm_head") for tp in (1, 2) for m in (8, 256)
              for sk in (False, True)}
    assert {k: v for k, v in choice.items() if k[2] == 256} == {k: "cublas" for k in choice if k[2] == 256}
    assert all(choice[("gate_up", tp, 8, sk)] == "swiglu" for tp in (1, 2) for sk in (False, True))
    assert choice[("qkv", 2, 8, True)] == "skinny" and choice[("qkv", 1, 8, False)] == "cublas"
    assert choice[("o", 1, 8, True)] == choice[("down", 1, 8, True)] == "skinny_partials"
    assert choice[("o", 2, 8, True)] == choice[("lm_head", 2, 8, True)] == "cublas"  # all-reduced / vocab-parallel
    assert choice[("lm_head", 1, 8, True)] == "skinny_fp32"
    assert R.runtime_gemm("qkv", 1, 8, True, qkv_bias=True) == "cublas"  # a biased QKV stays on nn.Linear
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(3, 32, generator=g), torch.randn(48, 32, generator=g)
    want = x @ w.T
    for impl in ("cublas", "skinny", "skinny_fp32"):
        assert_close(R.gemm_call(impl, x)(w).float(), want, torch.float32, reduction=32, what=impl)
    assert R.gemm_call("skinny_fp32", x.half())(w.half()).dtype == torch.float32
    assert_close(R.gemm_call("skinny_partials", x)(w).sum(0), want, torch.float32, reduction=32, what="partials")
    gate, up = want[:, :24], want[:, 24:]
    assert_close(R.gemm_call("swiglu", x)(w), torch.nn.functional.silu(gate) * up, torch.float32, reduction=32,
                 what="swiglu")
    with pytest.raises(ValueError, match="unknown impl 'tensorcore'"):
        R.gemm_call("tensorcore", x)


def test_fp8_gemm_operators_stream_what_the_runtime_and_the_cost_model_stream():
    """At weight_bits 8 the skinny kernels take `_fp8` impls exactly where simulator.cost_model.streams_fp8 says the
    runtime streams fp8 copies (the LM head and cuBLAS calls stay 16-bit); each fp8 call computes the product of its
    fp16 input with the dequantized weights."""
    from kernels.skinny_linear import quantize_rows_fp8
    from simulator.cost_model import streams_fp8

    for mat in ("qkv", "o", "gate_up", "down"):
        for tp in (1, 2):
            for m in (1, 8, 64, 65):
                for bias in (False, True):
                    impl = R.runtime_gemm(mat, tp, m, True, qkv_bias=bias, weight_bits=8)
                    assert impl.endswith("_fp8") == streams_fp8(mat, tp, m, bias), (mat, tp, m, bias, impl)
                    if not impl.endswith("_fp8"):
                        assert impl == R.runtime_gemm(mat, tp, m, True, qkv_bias=bias)
    assert R.runtime_gemm("lm_head", 1, 8, True, weight_bits=8) == "skinny_fp32"
    assert R.runtime_gemm("qkv", 1, 8, False, weight_bits=8) == "cublas"  # no skinny: no fp8 path
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(3, 64, generator=g).half(), torch.randn(96, 64, generator=g) / 8
    q8 = quantize_rows_fp8(w)
    want = x.float() @ (q8[0].float() * q8[1][:, None]).T
    assert_close(R.gemm_call("skinny_fp8", x)(q8).float(), want, torch.float16, reduction=64, what="skinny_fp8")
    assert_close(R.gemm_call("skinny_partials_fp8", x)(q8).sum(0), want, torch.float32, reduction=64,
                 what="skinny_partials_fp8")
    gate, up = want[:, :48], want[:, 48:]
    assert_close(R.gemm_call("swiglu_fp8", x)(q8).float(), torch.nn.functional.silu(gate) * up, torch.float16,
                 reduction=64, what="swiglu_fp8")
    with pytest.raises(ValueError, match="unknown impl 'cublas_fp8'"):
        R.gemm_call("cublas_fp8", x)


def test_quick_cpu_fp8_section_records_the_fp8_copies_and_calibrate_fits_them_apart(tmp_path, monkeypatch):
    """The gemm_fp8 section (Triton's interpreter on CPU) times the planned matrices at TP 1 and 2 (no o / down at
    TP 2: those stay on cuBLAS under TP) with the fp8 copy's bytes; calibrate reads them as gemm_fp8 samples, apart
    from the 16-bit gemm ones."""
    from simulator.cost_model import fp8_matrix_bytes
    from simulator.trace_reader import read_traces

    out = tmp_path / "f.jsonl"
    assert P.main(["--device", "cpu", "--quick", "--only", "gemm,gemm_fp8", "--out", str(out), "--budget-s", "60"]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    fp8 = [json.loads(r["extra"]) | {"tp": r["tp"]} for r in recs if '"weight_bits": 8' in r["extra"]]
    assert fp8 and all(e["impl"].endswith("_fp8") and e["weight_bytes"] == fp8_matrix_bytes(e["k"], e["n"])
                       for e in fp8)
    assert {e["matrix"] for e in fp8 if e["tp"] == 1} == {"qkv", "o", "gate_up", "down"}
    assert {e["matrix"] for e in fp8 if e["tp"] == 2} == {"qkv", "gate_up"}
    assert json.loads(out.with_suffix(".meta.json").read_text())["errors"] == []
    samples = read_traces([str(out)]).samples
    assert len(samples["gemm_fp8"]) == len(fp8) and len(samples["gemm"]) == len(recs) - len(fp8)


def test_gemm_plan_keeps_each_kernel_of_a_shape(monkeypatch):
    """Under graph timing a (k, n, M) is timed once per kernel the runtime runs on it (two presets sharing a
    shape with different kernels both keep it); a biased QKV is planned on cuBLAS."""
    p = H.Profiler(device=torch.device("cpu"), dtype=torch.float32, out=Path("/dev/null"), quick=False,
                   device_name="cpu", run_id="t")
    monkeypatch.setattr(H.Profiler, "graph_timing", property(lambda self: True))
    plan = P.gemm_plan(p)
    runs = {(k, n, m, impl) for _, _, _, k, n, rs in plan for m, impl in rs}
    assert len(runs) == sum(len(rs) for *_, rs in plan)  # deduplicated on (k, n, M, impl)
    by_shape: dict = {}
    for _, _, _, k, n, rs in plan:
        for m, impl in rs:
            by_shape.setdefault((k, n, m), set()).add(impl)
    assert any(len(impls) > 1 for impls in by_shape.values())  # e.g. 1B TP 2 gate_up vs 70B TP 4 o
    qwen = [rs for preset, _, mat, *_, rs in plan if preset == "qwen2-72b" and mat == "qkv"]
    assert qwen and all(impl == "cublas" for rs in qwen for _, impl in rs)


def test_graph_steps_give_each_role_its_kernels(monkeypatch):
    """A verify step is timed with the target's kernels (kernels.target_qkv_rope: the QKV GEMM does RoPE + the KV
    write), an expansion with the draft's (the fused RoPE attention, the fused head), as the Engine builds them."""
    import runtime.fused_decode
    from calibration import profile_steps as S

    class FakeModel:
        shape = MODEL_PRESETS["tiny-llama"]

    class FakeDecoder:
        def __init__(self, model, plan):
            assert plan.weight_bits == 16  # the profiled steps are the bf16 models'
            self.kernels = (True, plan.skinny, plan.qkv_rope, plan.rope_attention)

    monkeypatch.setattr(runtime.fused_decode, "FusedDecoder", FakeDecoder)

    class FakeProfiler:
        def opt(self, key, full):
            return (64,)

        def time_left(self):
            return True

    seen = []
    monkeypatch.setattr(S, "_verify_steps", lambda p, model, *a, graph_reps=0: seen.append(("verify", model.kernels)))
    monkeypatch.setattr(S, "_expand_steps", lambda p, model, *a, fused_head, graph_reps=0: seen.append(
        ("expand", model.kernels, fused_head)))
    switches = {"skinny": True, "pdl": True, "draft_head": True, "rope_attention": True, "target_qkv_rope": True}
    S._preset_steps(FakeProfiler(), FakeModel(), None, "triton", "tiny-llama", (8,), (4,), None, switches)
    assert seen == [("verify", (True, True, True, False)), ("expand", (True, True, False, True), True)]
    seen.clear()
    S._preset_steps(FakeProfiler(), FakeModel(), None, "triton", "tiny-llama", (8,), (4,), None,
                    {**switches, "target_qkv_rope": False})
    assert seen == [("verify", (True, True, False, True)), ("expand", (True, True, False, True), True)]
