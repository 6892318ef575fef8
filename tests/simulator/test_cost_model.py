"""Cost model: analytic prior terms, precision, links and all-reduce algorithms, affine fast path."""

from __future__ import annotations

import math

import pytest

from conf.presets import GPU_PRESETS, LINK_PRESETS, model_preset
from conf.rundir import MEASURED_DIR
from simulator.cost_model import (
    BYTES_PER_PARAM,
    EAGER_PREFILL_LAUNCH_S,
    GroupCost,
    Operators,
    StepDesc,
    forward_breakdown,
    forward_time_s,
    fp8_matrix_bytes,
    gemm_calls,
    kernels_per_step,
    layer_matrices,
    matrix_bytes,
    streams_fp8,
    weight_bytes_per_rank,
)
from simulator.interconnect import allreduce_time_s, message_bytes, message_time_s

H200 = GPU_PRESETS["h200"]
NVLINK = LINK_PRESETS["nvlink4"]


def _ops(allreduce: str = "oneshot", graphs: bool = True) -> Operators:
    return Operators(H200, NVLINK, allreduce, NVLINK, 2e-5, 3e-5, graphs, None, "nvlink4", "nvlink4")


def test_int4_weights_cost_half_a_byte_plus_group_scales():
    assert BYTES_PER_PARAM[4] == pytest.approx(0.5 + 2.5 / 128)
    shape = model_preset("llama3-70b")
    w16, w4 = weight_bytes_per_rank(shape, 4, 16), weight_bytes_per_rank(shape, 4, 4)
    assert 0.25 < w4 / w16 < 0.3  # layers shrink ~3.85x; the bf16 embedding and LM head do not


def test_fp8_weights_follow_the_runtimes_layout():
    """weight_bits 8 as the runtime runs it: decode steps of <= 64 rows stream fp8 copies (1 B per weight + a float32
    scale per row) except a biased QKV and, under TP, o / down; prefills stream the 16-bit weights; a rank holds both
    copies."""
    assert [streams_fp8(m, 1, 1) for m in ("qkv", "o", "gate_up", "down")] == [True] * 4
    assert [streams_fp8(m, 2, 8) for m in ("qkv", "o", "gate_up", "down")] == [True, False, True, False]
    assert not streams_fp8("qkv", 1, 1, qkv_bias=True) and not streams_fp8("gate_up", 1, 65)
    assert matrix_bytes("o", 2048, 512, 8, 1) == fp8_matrix_bytes(2048, 512) == 2048 * 512 + 4 * 512
    assert matrix_bytes("o", 2048, 512, 8, 2) == matrix_bytes("qkv", 2048, 512, 8, 1, tokens=256) == 2 * 2048 * 512
    one_b, qwen = model_preset("llama3.2-1b"), model_preset("qwen2-72b")
    calls = gemm_calls(one_b, 8, StepDesc(4, 1024, 1))
    assert [c.fp8 for c in calls] == [True] * 4 + [False]  # the LM head stays bf16
    assert not any(c.fp8 for c in gemm_calls(one_b, 8, StepDesc(1024, 1024, 1)))  # a prefill
    assert gemm_calls(qwen, 8, StepDesc(1, 1, 8))[0].fp8 is False  # Qwen2's biased QKV
    extra = one_b.num_layers * sum(fp8_matrix_bytes(k, n) for _, k, n in layer_matrices(one_b, 1))
    assert weight_bytes_per_rank(one_b, 1, 8) == pytest.approx(weight_bytes_per_rank(one_b, 1, 16) + extra)


def test_fp8_calls_take_the_gemm_fp8_fit_and_the_rest_the_16_bit_one():
    """A profile's gemm_fp8 prices exactly the calls that stream fp8; without it they take the 16-bit fit at their
    fp8 bytes (the source says `as gemm`)."""
    from simulator.profile import OperatorFit, Profile

    def profile(*ops):
        fits = {"gemm": OperatorFit("gemm", (2e-6, 3e-13, 0.0), {"mape": 0.1}),
                "gemm_fp8": OperatorFit("gemm_fp8", (5e-6, 4e-13, 0.0), {"mape": 0.1})}
        return Profile("p", {"gpu": "h200"}, {}, {op: fits[op] for op in ops})

    shape, step = model_preset("llama3.2-1b"), StepDesc(1, 1024, 1)
    with_fp8 = Operators(H200, NVLINK, "oneshot", NVLINK, 0.0, 0.0, True, profile("gemm", "gemm_fp8"))
    without = Operators(H200, NVLINK, "oneshot", NVLINK, 0.0, 0.0, True, profile("gemm"))
    assert (with_fp8.sources["gemm_fp8"], without.sources["gemm_fp8"]) == ("profile", "as gemm")
    want = sum(c.calls * ((5e-6 + 4e-13 * c.weight_bytes) if c.fp8 else (2e-6 + 3e-13 * c.weight_bytes))
               for c in gemm_calls(shape, 8, step))
    assert forward_breakdown(with_fp8, shape, 8, step)["gemm"] == pytest.approx(want)
    assert forward_breakdown(without, shape, 8, step)["gemm"] == pytest.approx(
        sum(c.calls * (2e-6 + 3e-13 * c.weight_bytes) for c in gemm_calls(shape, 8, step)))
    assert forward_breakdown(with_fp8, shape, 16, step) == forward_breakdown(without, shape, 16, step)
    # measured shapes of gemm_fp8 take the place of its fit for those shapes only
    calls = gemm_calls(shape, 8, step)
    qkv = calls[0]
    fits = dict(with_fp8.fits)
    fits["gemm_fp8"] = OperatorFit("gemm_fp8", (5e-6, 4e-13, 0.0), {"mape": 0.1},
                                   measured={("qkv", qkv.k, qkv.n): ((1, 9e-6), (8, 1e-5))})
    measured = Operators(H200, NVLINK, "oneshot", NVLINK, 0.0, 0.0, True, Profile("p", {"gpu": "h200"}, {}, fits))
    got = forward_breakdown(measured, shape, 8, step)["gemm"] - forward_breakdown(with_fp8, shape, 8, step)["gemm"]
    assert got == pytest.approx(qkv.calls * (9e-6 - (5e-6 + 4e-13 * qkv.weight_bytes)))


def test_llama3_8b_single_token_gemms_match_the_measured_weight_stream():
    """reference/device-h200.md: the 8B GEMM chain (13.96 GB) takes 4.04 ms at 1 token on one H200.

    The prior's GEMM term plus launch gaps of its 4 x 32 GEMM calls should be within 10% of that.
    """
    shape = model_preset("llama3-8b")
    ops = _ops()
    gemm = forward_breakdown(ops, shape, 16, StepDesc(1, 1, 1))["gemm"]
    lm_head = ops.gemm_s(shape.hidden_size * shape.vocab_size * 2, 0.0, 1)
    layers = gemm - lm_head + 4 * 32 * H200.kernel_launch_s
    assert layers == pytest.approx(4.04e-3, rel=0.1)


def test_step_time_is_monotone_in_tokens_context_and_shrinks_with_tp():
    shape = model_preset("llama3-70b")
    ops = _ops()
    t = [forward_time_s(ops, shape, 16, StepDesc(n, 1024, 4)) for n in (1, 8, 64, 512)]
    assert t == sorted(t) and t[-1] > t[0]
    c = [forward_time_s(ops, shape, 16, StepDesc(8, n, 4)) for n in (0, 1024, 8192)]
    assert c == sorted(c) and c[-1] > c[0]
    assert forward_time_s(ops, shape, 16, StepDesc(8, 1024, 8)) < forward_time_s(ops, shape, 16, StepDesc(8, 1024, 2))


def test_tp_adds_two_allreduces_per_layer_and_launches():
    shape = model_preset("llama3.2-1b")
    ops = _ops()
    assert forward_breakdown(ops, shape, 16, StepDesc(8, 100, 1))["allreduce"] == 0.0
    ar = forward_breakdown(ops, shape, 16, StepDesc(8, 100, 2))["allreduce"]
    one = allreduce_time_s(NVLINK, "oneshot", 2, 8 * shape.hidden_size * 2)
    assert ar == pytest.approx(2 * shape.num_layers * one, rel=0.05)  # + the small logits gather
    assert kernels_per_step(shape, 2, True) - kernels_per_step(shape, 1, True) == 2 * shape.num_layers + 1
    assert kernels_per_step(shape, 1, False) > kernels_per_step(shape, 1, True)


@pytest.mark.parametrize("p,nbytes", [(2, 8192), (4, 65536), (8, 1 << 20)], ids=str)
def test_allreduce_algorithms_follow_alpha_beta_forms(p, nbytes):
    a, b = NVLINK.latency_s, NVLINK.bytes_per_s
    assert allreduce_time_s(NVLINK, "oneshot", p, nbytes) == pytest.approx(a + (p - 1) * nbytes / b)
    assert allreduce_time_s(NVLINK, "ring", p, nbytes) == pytest.approx(2 * (p - 1) * (a + nbytes / p / b))
    assert allreduce_time_s(NVLINK, "tree", p, nbytes) == pytest.approx(
        2 * math.ceil(math.log2(p)) * a + 2 * nbytes / b)
    assert allreduce_time_s(NVLINK, "ring", 1, nbytes) == 0.0


def test_ring_wins_for_large_messages_oneshot_for_small():
    small, large = 8192, 64 << 20
    assert allreduce_time_s(NVLINK, "oneshot", 8, small) < allreduce_time_s(NVLINK, "ring", 8, small)
    assert allreduce_time_s(NVLINK, "ring", 8, large) < allreduce_time_s(NVLINK, "oneshot", 8, large)


def test_cross_node_message_is_slower_than_nvlink():
    nbytes = message_bytes(8)
    assert nbytes == (4 + 2 * 8 + 2) * 8
    nv = message_time_s(NVLINK, NVLINK, 4, nbytes, 2e-5)
    ib = message_time_s(LINK_PRESETS["ib-ndr"], NVLINK, 4, nbytes, 2e-5)
    pcie = message_time_s(LINK_PRESETS["pcie4"], LINK_PRESETS["pcie4"], 4, nbytes, 2e-5)
    assert nv < ib and nv < pcie
    assert nv == pytest.approx(2e-5 + 2 * (NVLINK.latency_s + nbytes / NVLINK.bytes_per_s))


def test_group_cost_fast_path_equals_the_full_sum():
    shape = model_preset("llama3-70b")
    ops = _ops()
    gc = GroupCost(ops, shape, 4, 6)
    for tokens, kv in [(1, 0), (8, 1031), (16, 4000), (8, 17)]:
        assert gc.forward_s(tokens, kv) == pytest.approx(forward_time_s(ops, shape, 4, StepDesc(tokens, kv, 6)),
                                                         rel=1e-12)


def test_eager_launches_cost_more_than_cuda_graphs():
    shape = model_preset("llama3.2-1b")
    step = StepDesc(8, 512, 2)
    assert forward_time_s(_ops(graphs=False), shape, 16, step) > forward_time_s(_ops(graphs=True), shape, 16, step)


@pytest.mark.parametrize("software,graph_cfg_uses,eager_cfg_uses", [
    ({"runtime": "pytorch eager (no CUDA graphs)"}, False, True),  # the profiles of 2026-11-29
    ({"steps_mode": "eager", "op_timing": "graph"}, False, True),
    ({"steps_mode": "graphs", "op_timing": "graph"}, True, False),  # steps measured as CUDA-graph replays
    ({}, True, True),  # no record of how steps ran: the fit serves both
])
def test_fitted_step_overhead_serves_configs_whose_steps_ran_the_same_way(software, graph_cfg_uses,
                                                                          eager_cfg_uses):
    from simulator.profile import parse_profile

    err = {"mape": 0.1, "max_abs_rel_error": 0.2, "num_samples": 10}
    profile = parse_profile({"version": 1, "hardware": {"gpu": "h200"}, "software": software, "operators": {
        "step_overhead": {"coefficients": {"a": 1e-3, "b": 1e-6}, "fit_error": err},
        "gemm": {"coefficients": {"a": 1e-6, "b": 2e-13, "c": 1e-15}, "fit_error": err}}})
    for graphs, uses in ((True, graph_cfg_uses), (False, eager_cfg_uses)):
        ops = Operators(H200, NVLINK, "oneshot", NVLINK, 2e-5, 3e-5, graphs, profile, "nvlink4", "nvlink4")
        assert (ops.sources["step_overhead"] == "profile") is uses, (software, graphs)
        assert ops.sources["gemm"] == "profile"


def test_an_eager_prefill_costs_at_least_its_launches_host_time():
    """GroupCost(prefill_launch_s=...): an eager prefill is host-bound below its device time (SmolLM2-135M, 37 tokens:
    ~20 ms of host, ~1 ms of kernels on the H200); a long 8B one stays device-bound."""
    small, big = model_preset("smollm2-135m"), model_preset("llama3-8b")
    for shape, tokens in ((small, 37), (big, 4096)):
        graphed = GroupCost(_ops(), shape, 16, 1)
        eager = GroupCost(_ops(), shape, 16, 1, prefill_launch_s=9e-5)
        floor = 9e-5 * kernels_per_step(shape, 1, True)
        assert eager.prefill_s(tokens) == pytest.approx(max(graphed.prefill_s(tokens), floor))
    assert GroupCost(_ops(), small, 16, 1, prefill_launch_s=9e-5).prefill_s(37) == pytest.approx(9e-5 * 214)
    assert GroupCost(_ops(), big, 16, 1, prefill_launch_s=9e-5).prefill_s(4096) > 9e-5 * 228
    assert GroupCost(_ops(), small, 16, 1, prefill_launch_s=9e-5).prefill_s(0) == 0.0


@pytest.mark.parametrize("overrides, target_floor, draft_floor", [
    ([], False, False),  # the prefill_graph feature (kernels=graphs): captured prefills cost their operators
    (["kernels.ablate=[prefill_graph]"], True, True),
    (["parallel=2x1"], True, False),  # a TP 2 target prefills eagerly (as the runtime does), its one-GPU draft not
])
def test_build_costs_price_eager_prefills_where_the_runtime_runs_them(overrides, target_floor, draft_floor):
    from conf import compose_config
    from simulator.simulation import build_costs

    cfg = compose_config("simulate", ["model=smollm2", "kernels=graphs", "parallel=1x1", "sim=analytic",
                                      "spec=async_tree", *overrides])
    costs = build_costs(cfg)
    for group, floor in ((costs.target, target_floor), (costs.draft, draft_floor)):
        launches = kernels_per_step(group.shape, group.tp, True)
        assert group.prefill_host_s == pytest.approx(EAGER_PREFILL_LAUNCH_S * launches if floor else 0.0)


def _graph_profile():
    from simulator.profile import OperatorFit, Profile

    fits = {"gemm": OperatorFit("gemm", (4e-6, 2.2e-13, 1e-15), {"mape": 0.1}),
            "attention": OperatorFit("attention", (9e-6, 5e-13, 1e-10), {"mape": 0.1}),
            "gemm_graph": OperatorFit("gemm_graph", (2e-6, 2.3e-13, 6e-16), {"mape": 0.05}),
            "attention_graph": OperatorFit("attention_graph", (5e-6, 7e-13, 1.5e-10), {"mape": 0.1})}
    return Profile("<test>", {"gpu": "h200"}, {"steps_mode": "graphs"}, fits)


def test_captured_decode_steps_take_the_in_graph_fits_and_prefills_the_standalone_ones():
    """gemm_graph / attention_graph price a decode step of a CUDA-graph config; its prompt prefill and every step of
    an eager config keep gemm / attention."""
    shape = model_preset("llama3.2-1b")
    graphs = Operators(H200, NVLINK, "oneshot", NVLINK, 0.0, 3e-5, True, _graph_profile(), "nvlink4", "nvlink4")
    eager = Operators(H200, NVLINK, "oneshot", NVLINK, 0.0, 3e-5, False, _graph_profile(), "nvlink4", "nvlink4")
    assert graphs.graph_fits and not eager.graph_fits
    assert eager.sources["gemm_graph"] == "as gemm" and graphs.sources["gemm_graph"] == "profile"
    step = StepDesc(8, 1000, 1)
    in_graph = forward_breakdown(graphs, shape, 16, step, graph=True)
    standalone = forward_breakdown(graphs, shape, 16, step, graph=False)
    calls = 4 * shape.num_layers + 1
    wb = weight_bytes_per_rank(shape, 1, 16)
    flops = 2.0 * step.tokens * wb / 2
    assert in_graph["gemm"] == pytest.approx(calls * 2e-6 + wb * 2.3e-13 + flops * 6e-16, rel=1e-9)
    assert standalone["gemm"] == pytest.approx(calls * 4e-6 + wb * 2.2e-13 + flops * 1e-15, rel=1e-9)
    assert in_graph["attention"] != pytest.approx(standalone["attention"])
    cost = GroupCost(graphs, shape, 16, 1)
    assert cost.forward_s(8, 1000) == pytest.approx(sum(in_graph.values()), rel=1e-9)
    prefill = sum(forward_breakdown(graphs, shape, 16, StepDesc(64, 32, 1)).values())
    assert cost.prefill_s(64) == pytest.approx(prefill, rel=1e-9)
    eager_cost = GroupCost(eager, shape, 16, 1)
    assert eager_cost.forward_s(8, 1000) == pytest.approx(
        sum(forward_breakdown(eager, shape, 16, step).values()), rel=1e-9)


STEPS_TRACE = MEASURED_DIR / "profile_traces_2026-12-01_f7aec85_steps.jsonl"


def test_graph_kernel_counts_equal_the_recorded_captured_steps():
    """GraphKernels.counts (small + RoPE kernels) equals the `other_calls` of every captured step the runtime's
    step_graphs section profiled (46 steps of five presets, targets' verifies and drafts' expansions, 1-32 rows), and
    the cost model's skinny row limit is the runtime's."""
    import json

    from runtime.fused_decode import SKINNY_MAX_ROWS as RUNTIME_SKINNY_MAX_ROWS
    from simulator.calibrate import GRAPH_ROLES
    from simulator.cost_model import SKINNY_MAX_ROWS, GraphKernels

    assert SKINNY_MAX_ROWS == RUNTIME_SKINNY_MAX_ROWS
    seen = 0
    for line in STEPS_TRACE.read_text().splitlines():
        rec = json.loads(line)
        if rec["name"] != "op.step_graph":
            continue
        extra = json.loads(rec["extra"])
        role = GRAPH_ROLES[extra["kind"]]
        small, rope = GraphKernels(role).counts(model_preset(extra["preset"]), rec["tokens"])
        assert small + rope == extra["other_calls"], (extra["preset"], extra["kind"], rec["tokens"])
        seen += 1
    assert seen == 46


def test_graph_kernels_follow_the_kernel_switches():
    """A draft's multi-row expansion launches a RoPE kernel per layer; a one-row step fuses it into the attention
    (kernels.rope_attention); a target fuses it into its QKV GEMM (kernels.target_qkv_rope) unless the QKV has a bias
    or the step exceeds the skinny rows."""
    from simulator.cost_model import SKINNY_MAX_ROWS, GraphKernels

    llama, qwen = model_preset("llama3.2-1b"), model_preset("qwen2-1.5b")
    layers = llama.num_layers
    assert GraphKernels("draft").counts(llama, 8) == (2 * layers + 6, layers)
    assert GraphKernels("draft").counts(llama, 1) == (2 * layers + 6, 0)
    assert GraphKernels("draft", rope_attention=False).counts(llama, 1) == (2 * layers + 6, layers)
    assert GraphKernels("target").counts(llama, 8) == (2 * layers + 4, 0)
    assert GraphKernels("target").counts(llama, 1) == (2 * layers + 5, 0)
    assert GraphKernels("target").counts(llama, SKINNY_MAX_ROWS + 1)[1] == layers
    assert GraphKernels("target", qkv_rope=False).counts(llama, 8)[1] == layers
    assert GraphKernels("target").counts(qwen, 8)[1] == qwen.num_layers  # QKV bias: no fused QKV + RoPE
    with pytest.raises(ValueError, match=r"GraphKernels.role: must be one of \('target', 'draft'\), got 'verify'"):
        GraphKernels("verify")


def test_captured_steps_price_their_small_kernels_by_role_with_step_overhead_graph():
    """step_overhead_graph prices a captured decode step's small kernels from their counts: a draft's 8-row expansion
    pays its per-layer RoPE launches where a target's 8-row verify does not; prefills, eager configs and profiles
    without the fit keep step_overhead."""
    from simulator.cost_model import GraphKernels
    from simulator.profile import OperatorFit, Profile

    coef = (1e-6, 2e-6, 3.5e-6, 3e-10)
    base = _graph_profile()
    fits = {**base.operators, "step_overhead": OperatorFit("step_overhead", (2e-5, 1e-6), {"mape": 0.2}),
            "step_overhead_graph": OperatorFit("step_overhead_graph", coef, {"mape": 0.05})}
    prof = Profile("<test>", base.hardware, base.software, fits)
    shape, layers = model_preset("llama3.2-1b"), model_preset("llama3.2-1b").num_layers
    graphs = Operators(H200, NVLINK, "oneshot", NVLINK, 0.0, 3e-5, True, prof, "nvlink4", "nvlink4")
    eager = Operators(H200, NVLINK, "oneshot", NVLINK, 0.0, 3e-5, False, prof, "nvlink4", "nvlink4")
    assert graphs.sources["step_overhead_graph"] == "profile"
    assert eager.sources["step_overhead_graph"] == "as step_overhead"
    step = StepDesc(8, 1000, 1)
    small = 2 * layers + 6
    want = coef[0] + coef[1] * small + coef[2] * layers + coef[3] * small * shape.hidden_size
    draft = forward_breakdown(graphs, shape, 16, step, graph=True, kernels=GraphKernels("draft"))
    target = forward_breakdown(graphs, shape, 16, step, graph=True, kernels=GraphKernels("target"))
    assert draft["overhead"] == pytest.approx(want, rel=1e-12)
    assert draft["overhead"] - target["overhead"] == pytest.approx(
        2 * coef[1] + coef[2] * layers + 2 * coef[3] * shape.hidden_size, rel=1e-9)
    old = 2e-5 + 1e-6 * kernels_per_step(shape, 1, True)
    assert forward_breakdown(graphs, shape, 16, step, graph=False)["overhead"] == pytest.approx(old)
    assert forward_breakdown(graphs, shape, 16, step, fused=False, graph=True)["overhead"] == pytest.approx(
        2e-5 + 1e-6 * kernels_per_step(shape, 1, False))
    # an eager config: the graph-mode profile's step overheads do not apply (the prior's launches)
    assert forward_breakdown(eager, shape, 16, step, graph=True)["overhead"] == pytest.approx(
        3e-5 + kernels_per_step(shape, 1, True) * eager.launch_s)
    draft_cost = GroupCost(graphs, shape, 16, 1, kernels=GraphKernels("draft"))
    assert draft_cost.forward_s(8, 1000) == pytest.approx(sum(draft.values()), rel=1e-9)
    assert draft_cost.forward_s(8, 1000) > GroupCost(graphs, shape, 16, 1).forward_s(8, 1000)
    assert draft_cost.prefill_s(64) == pytest.approx(GroupCost(graphs, shape, 16, 1).prefill_s(64), rel=1e-12)


def test_build_costs_gives_each_group_its_role_and_kernel_switches():
    """simulate's groups: the target counts its fused QKV + RoPE (kernels.target_qkv_rope with skinny), the draft
    never does; both take kernels.rope_attention."""
    from conf import compose_config
    from simulator.cost_model import GraphKernels
    from simulator.simulation import build_costs

    config = compose_config("simulate", ["model=smollm2", "kernels=graphs", "parallel=1x1", "sim=analytic",
                                         "spec=async_tree"])
    costs = build_costs(config)
    assert costs.target.kernels == GraphKernels("target", True, True)
    assert costs.draft.kernels == GraphKernels("draft", False, True)
    config = compose_config("simulate", ["model=smollm2", "kernels=graphs", "parallel=1x1", "sim=analytic",
                                         "spec=async_tree", "kernels.ablate=[target_qkv_rope,rope_attention]"])
    costs = build_costs(config)
    assert costs.target.kernels == GraphKernels("target", False, False)
    assert costs.draft.kernels == GraphKernels("draft", False, False)


def test_fused_allreduce_what_if_hides_each_allreduce_behind_its_gemm():
    """sim.whatif.fused_allreduce: a TP > 1 step's two per-layer all-reduces (after o and down) cost only what outlasts
    their GEMM; the GEMMs, attention and the logits gather are unchanged; TP 1 has nothing to fuse."""
    shape = model_preset("llama3-70b")
    plain = Operators(H200, NVLINK, "oneshot", NVLINK, 2e-5, 3e-5, True, None, "nvlink4", "nvlink4")
    fused = Operators(H200, NVLINK, "oneshot", NVLINK, 2e-5, 3e-5, True, None, "nvlink4", "nvlink4",
                      fused_allreduce=True)
    for tokens in (1, 8, 512):
        step = StepDesc(tokens, 1000 + tokens, 4)
        a, b = forward_breakdown(plain, shape, 16, step), forward_breakdown(fused, shape, 16, step)
        same = ("gemm", "attention", "overhead")
        assert {k: b[k] for k in same} == {k: a[k] for k in same}
        gather = plain.allreduce_s(tokens * 16, 4)
        assert gather <= b["allreduce"] < a["allreduce"]
    one = StepDesc(8, 1008, 1)
    assert forward_breakdown(fused, shape, 16, one) == forward_breakdown(plain, shape, 16, one)


def test_fused_allreduce_what_if_is_off_by_default_and_prices_tp_targets_faster():
    from conf import compose_config
    from simulator.simulation import build_costs

    base = ["workload.num_requests=1"]
    plain, fused = (build_costs(compose_config("simulate", base + extra))
                    for extra in ([], ["sim.whatif.fused_allreduce=true"]))
    assert not compose_config("simulate", base).sim.whatif.fused_allreduce
    assert fused.target.forward_s(8, 1000) < plain.target.forward_s(8, 1000)
