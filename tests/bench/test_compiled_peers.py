"""bench/compiled_peers.py on CPU, uncompiled (peer_compile.enabled=false; one `slow` test compiles): the gpt-fast-style
decoding of our model and transformers' static-cache generation give the tokens of runtime.reference.reference_decode
(greedy, EOS and capacity stop rules, chain acceptance with a draft that agrees never / always), the static-cache
attention equals the reference attention, the benchmark's rows, decode time per token and comparison."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import bench.bench_runtime as B
from bench import compiled_peers as C
from conf.bench_schema import PeerCompileConfig, build_bench_config
from conf.presets import model_preset
from runtime.attention import AttnMeta, ReferenceAttention
from runtime.loader import build_model
from runtime.reference import reference_decode
from tests.conftest import compose
from tests.tolerances import assert_close

CLOCK = C.Clock("cpu")


@pytest.fixture(scope="module")
def tiny():
    """tiny-llama target, tiny-llama-draft draft (fp32, random weights), one random 24-token prompt."""
    target = build_model(model_preset("tiny-llama"), torch.float32, "cpu", seed=0)
    draft = build_model(model_preset("tiny-llama-draft"), torch.float32, "cpu", seed=1)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, target.shape.vocab_size, (24,), generator=gen).tolist()
    return target, draft, prompt


def test_static_cache_attention_equals_the_reference_on_a_verify_step():
    torch.manual_seed(0)
    slots, hq, hkv, d = 40, 4, 2, 16
    k, v = torch.randn(slots, hkv, d), torch.randn(slots, hkv, d)
    q = torch.randn(5, hq, d)
    positions = torch.arange(21, 26)
    causal = AttnMeta(positions=positions, write_slots=positions, prefix_len=torch.tensor([21]), tree_len=5,
                      tree_mask=torch.ones(5, 5, dtype=torch.bool).tril())
    got = C.StaticCacheAttention()(q, k, v, causal, d**-0.5)
    want = ReferenceAttention()(q, k, v, AttnMeta.causal(21, 5), d**-0.5)
    assert_close(got, want, torch.float32, reduction=d + 26, what="static-cache attention, 5 causal rows at 21")
    # the mask hides every slot past the query's own position (stale K/V of rejected tokens)
    vis = C.visible_slots(causal, slots, torch.device("cpu"))
    assert vis.sum(dim=1).tolist() == [22, 23, 24, 25, 26] and not vis[:, 26:].any()


@pytest.mark.parametrize("draft_kind", ["other", "self"])
def test_gptfast_decoding_gives_the_reference_tokens(tiny, draft_kind):
    """Autoregressive and chain (gamma 4); a draft equal to the target accepts every draft (the extra draft step),
    the other one almost none. Stop rules: max_new_tokens, EOS (kept), and the capacity."""
    target, draft, prompt = tiny
    ref = reference_decode(target, prompt, 16, 128)
    eos = ref[9]
    cases = [(16, 128, None), (16, 128, eos), (40, 24 + 13, None)]  # the last: capacity stops at 13 tokens
    slots = 24 + 40 + 4 + 1
    t = C.StaticDecoder(target, slots, None)
    d = C.StaticDecoder(target if draft_kind == "self" else draft, slots, None)
    for max_new, capacity, stop in cases:
        want = reference_decode(target, prompt, max_new, capacity, eos_token_id=stop)
        ar = C.decode_autoregressive(t, prompt, max_new, capacity, stop, CLOCK)
        chain = C.decode_chain(t, d, prompt, max_new, capacity, stop, 4, CLOCK)
        assert ar["tokens"] == want and chain["tokens"] == want, (max_new, capacity, stop)
        assert len(ar["token_stamps"]) == len(want) == len(chain["token_stamps"])
    full = C.decode_chain(t, d, prompt, 16, 128, None, 4, CLOCK)
    times = C.request_times(full, CLOCK, 4)
    assert times["n"] == 16 and len(times["iterations"]) == len(times["verify"]) == len(full["verify"])
    if draft_kind == "self":  # every iteration accepts all 4 drafts: the prefill's token, then 3 x 5
        assert len(full["verify"]) == 3
    else:  # random weights: the drafts rarely agree with the target
        assert len(full["verify"]) > 5


def test_transformers_static_cache_greedy_and_assisted_give_the_reference_tokens(tiny):
    from bench.peers import hf_from_runtime, set_greedy

    target, draft, prompt = tiny
    hf_t = hf_from_runtime(target, model_preset("tiny-llama"))
    hf_d = hf_from_runtime(draft, model_preset("tiny-llama-draft"))
    want = reference_decode(target, prompt, 16, 128)
    setup = C.static_cache_generation(hf_t, None, PeerCompileConfig(enabled=False), 128)
    assert setup["cache_implementation"] == "static" and setup["disable_compile"]
    set_greedy(hf_d, None)
    hf_d.generation_config.num_assistant_tokens = 4
    hf_d.generation_config.num_assistant_tokens_schedule = "constant"
    for assistant in (None, hf_d):
        raw = C.measure_transformers(hf_t, [prompt], 16, 128, CLOCK, repeats=1, warmup_runs=1, assistant=assistant)
        rep = raw["repeats"][0]
        assert rep["outputs"] == [want] and rep["generated_tokens"] == 16
        assert rep["decode_tpot_s"] > 0 and raw["compile_s"] > 0


def test_repeat_metrics_from_hand_built_times():
    times = [{"n": 5, "decode_s": 0.8, "iterations": [0.2, 0.2], "verify": [0.1, 0.1], "expand": [0.02] * 2,
              "prefill_s": 0.5},
             {"n": 3, "decode_s": 0.4, "iterations": [0.4], "verify": [0.2], "expand": [0.03], "prefill_s": 0.3}]
    m = C.repeat_metrics([[1] * 5, [2] * 3], 2.0, times)
    assert m["generated_tokens"] == 8 and m["tokens_per_s"] == 4.0 and m["time_per_output_token_s"] == 0.25
    assert m["decode_tpot_s"] == pytest.approx(1.2 / 6)  # (0.8 + 0.4) / ((5 - 1) + (3 - 1))
    assert m["iteration_time_s"] == pytest.approx(0.8 / 3) and m["mean_accept_len"] == pytest.approx(6 / 3)
    assert m["verify_time_s"] == pytest.approx(0.4 / 3) and m["prefill_s"] == pytest.approx(0.4)
    assert m["target_forwards"] == 3 + 2  # verifies + prefills


def test_our_decode_time_per_token_from_iteration_rows():
    rows = [{"request": 0, "end_s": 1.0}, {"request": 0, "end_s": 1.5}, {"request": 0, "end_s": 2.0},
            {"request": 1, "end_s": 3.0}, {"request": 1, "end_s": 3.6}]
    # request 0: 1.0 s for 3 tokens after its first (4 tokens); request 1: 0.6 s for 2 tokens after its first
    assert B.decode_tpot(rows, [[7] * 4, [8] * 3]) == pytest.approx(1.6 / 5)
    assert B.decode_tpot([], [[7]]) is None


def test_peer_comparison_picks_the_best_compiled_peer_and_the_target():
    def row(system, mode, **kw):
        return {"system": system, "mode": mode, "status": "ok", "outputs_check": None, "tokens_per_s": 1.0,
                "decode_tpot_s": None, "iteration_time_s": None, "byte_floor_s": 3.0, **kw}

    rows = [row(B.OURS, "autoregressive", decode_tpot_s=4.0), row(B.OURS, "chain", iteration_time_s=10.0,
                                                                   iteration_floor_s=8.0),
            row("gptfast_compiled", "autoregressive", decode_tpot_s=5.0),
            row("transformers_compiled", "greedy", decode_tpot_s=4.5),
            row("gptfast_compiled", "chain", iteration_time_s=12.0)]
    c = B.peer_comparison(rows)
    ar, ch = c["autoregressive_tpot"], c["chain_iteration"]
    assert ar["best_peer"] == "transformers_compiled/greedy" and ar["speedup"] == pytest.approx(4.5 / 4.0)
    assert ar["met"] is False and ar["floor_s"] == 3.0 and len(ar["peers_s"]) == 2
    assert ch["speedup"] == pytest.approx(1.2) and ch["met"] is True and ch["floor_s"] == 8.0
    table = B.comparison_table("a", c)
    assert "| AR time per output token | 4e+03 | 4.5e+03 (transformers_compiled/greedy) | 1.12 NOT met |" in table


def test_the_benchmark_measures_the_compiled_peers_beside_ours(tmp_path, capsys):
    bc = build_bench_config(compose("bench_runtime", [
        "preset=tiny", "device=cpu", "repeats=2", "warmup_runs=1", "warmup_new_tokens=4", f"out_dir={tmp_path}",
        "doc=null", "modes=[autoregressive,chain]", "peer_compile.enabled=false", "profile_steps=true",
        "presets.tiny.peers=[gptfast_compiled,transformers_compiled,transformers_compiled_assisted]"]))
    result = B.run_bench(bc, tmp_path / "run", "pytest")
    rows = {(r["system"], r["mode"]): r for r in result["rows"]}
    assert set(rows) == {(B.OURS, "autoregressive"), (B.OURS, "chain"), ("gptfast_compiled", "autoregressive"),
                         ("gptfast_compiled", "chain"), ("transformers_compiled", "greedy"),
                         ("transformers_compiled", "assisted")}
    for key, r in rows.items():
        assert r["status"] == "ok", (key, r.get("reason"))
        assert r["generated_tokens"] == 32 and r["decode_tpot_s"] > 0
        if key != ("transformers_compiled", "greedy"):
            assert r["outputs_check"]["status"] == "identical", (key, r["outputs_check"])
        if key[0] != B.OURS:
            assert r["compile"]["enabled"] is False and r["compile"]["mode"] == "reduce-overhead"
            assert r["compile"]["unique_graphs"] == 0 and r["compile"]["cudagraph_skips"] == 0  # eager
            assert r["compile"]["graph_breaks"] == 0 and r["compile"]["inductor"] == {}
            assert r["compile_s"] > 0
    for key in ((B.OURS, "chain"), ("gptfast_compiled", "chain")):
        assert rows[key]["spec"] == "gamma 4" and rows[key]["iteration_floor_s"] > rows[key]["byte_floor_s"]
    data = json.loads(Path(result["json"]).read_text())
    comp = data["comparison"]
    assert comp["autoregressive_tpot"]["ours_s"] == rows[(B.OURS, "autoregressive")]["decode_tpot_s"]
    assert comp["chain_iteration"]["best_peer"] == "gptfast_compiled/chain"
    assert comp["outputs"]["gptfast_compiled/chain"] == "identical"
    prof = data["kernel_profiles"]  # CPU: gptfast's eager steps profiled, ours (CUDA graphs) skipped
    assert set(prof["steps"]) == {"target rows 1", "target rows 5", "draft rows 1"}
    assert prof["ctx"] == data["prompt_tokens"][0]
    for sides in prof["steps"].values():
        assert sides["gptfast_compiled"]["kernels"] and "GPU only" in sides["swiftspec"]["skipped"]
    for r in rows.values():
        if r["system"] == "gptfast_compiled":
            assert r["compile"]["recompiles"] is None and r["compile"]["cudagraph_skip_reasons"] == []
    B.print_summary(result)
    out = capsys.readouterr().out
    assert data["comparison_table"] in out and "| transformers_compiled | greedy | 1 |" in out and "reference" in out
    assert f"#### target rows 5, context {data['prompt_tokens'][0]}" in C.summary([data])


def test_peer_compile_mode_and_budgets_are_checked():
    with pytest.raises(ValueError, match="peer_compile.mode"):
        build_bench_config(compose("bench_runtime", ["peer_compile.mode=fast"]))
    with pytest.raises(ValueError, match=r"peer_budget_s: budgets must be > 0 s, got \{'gptfast_compiled': 0.0\}"):
        build_bench_config(compose("bench_runtime", ["peer_budget_s.gptfast_compiled=0"]))
    with pytest.raises(ValueError, match=r"peer_budget_s: needs exactly the keys .* unknown \['gptfast'\]"):
        build_bench_config(compose("bench_runtime", ["+peer_budget_s.gptfast=10"]))


def test_a_compiled_job_over_its_budget_is_skipped_with_the_reason(tmp_path):
    bc = build_bench_config(compose("bench_runtime", [
        "preset=tiny", "device=cpu", "repeats=1", "warmup_runs=1", "warmup_new_tokens=4", f"out_dir={tmp_path}",
        "doc=null", "modes=[autoregressive]", "peer_compile.enabled=false", "budget_s=600",
        "peer_budget_s.transformers_compiled=100000", "presets.tiny.max_new_tokens=8",
        "presets.tiny.peers=[gptfast_compiled,transformers_compiled]"]))
    result = B.run_bench(bc, tmp_path / "run", "pytest")
    rows = {(r["system"], r["mode"]): r for r in result["rows"]}
    skipped = rows[("transformers_compiled", "greedy")]
    assert skipped["status"] == "skipped" and "its budget (peer_budget_s.transformers_compiled) is 100000 s" in \
        skipped["reason"]
    assert rows[("gptfast_compiled", "autoregressive")]["status"] == "ok"
    assert rows[("gptfast_compiled", "chain")]["status"] == "ok"


def test_compile_watch_reports_cudagraph_skips_with_their_reason():
    from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

    with C.CompileWatch() as watch:
        log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to mutated inputs (1 instances)")
    d = watch.delta(expected=0)
    assert d["cudagraph_skips"] == 1 and d["unique_graphs"] == 0 and d["recompiles"] == 0
    assert d["cudagraph_skip_reasons"] == ["skipping cudagraphs due to mutated inputs (1 instances)"]
    assert watch.delta()["recompiles"] is None
    line = C.diagnosis_line("gptfast_compiled/autoregressive", {"compile": d, "compile_s": 1.0})
    assert "CUDA-graph skips 1 (reasons: skipping cudagraphs due to mutated inputs" in line


def test_kernel_profile_ranks_the_ops_of_a_step_by_time():
    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def step():
        (a @ b).relu_()
        a.add(1.0)

    p = C.kernel_profile(step, "cpu", warmup=1, steps=4, top=2)
    names = [k["name"] for k in p["kernels"]]
    assert len(names) == 2 and names[0] == "aten::mm"  # the matmul dominates (CPU: aten ops' self time)
    assert p["kernels"][0]["calls_per_step"] == 1 and p["steps_profiled"] == 4
    assert p["kernels"][0]["time_per_step_s"] >= p["kernels"][1]["time_per_step_s"] > 0
    assert p["device_time_per_step_s"] >= sum(k["time_per_step_s"] for k in p["kernels"]) * 0.999
    assert p["graph_launches_per_step"] == 0 and p["distinct_kernels"] >= 3


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_compiled_gptfast_steps_give_the_eager_tokens(tiny):
    """torch.compile(fullgraph=True) of the one-token step and the 5-row verify traces our plain forward (AttnMeta
    built inside the graph) and decodes the eager tokens (CPU: no CUDA graphs; ~1-2 min of cold compiles)."""
    from torch._inductor.utils import run_and_get_code

    target, draft, prompt = tiny
    cfg = PeerCompileConfig(coordinate_descent_tuning=False)
    C.apply_inductor_settings(cfg)
    want = reference_decode(target, prompt, 12, 128)
    t, d = C.StaticDecoder(target, 64, cfg), C.StaticDecoder(draft, 64, cfg)
    with C.CompileWatch() as watch:
        got, code = run_and_get_code(C.decode_autoregressive, t, prompt, 12, 128, None, CLOCK)
        assert got["tokens"] == want
        assert C.decode_chain(t, d, prompt, 12, 128, None, 4, CLOCK)["tokens"] == want
    diag = watch.delta(expected=t.steps_made + d.steps_made)
    assert diag["unique_graphs"] == 3 and diag["recompiles"] == 0 and diag["graph_breaks"] == 0  # 1 + 5 rows, draft
    # K/V are written in place into the per-layer caches: no buffer of a whole layer's cache [64, Hkv, D] (or of
    # every layer's) is allocated in the step, as happens when the writes go through views of one monolithic cache
    _, heads, head_dim = target.cache_spec()
    allocs = re.findall(r"empty_strided\w*\(\(([\d, ]+)\)", code[0])
    assert allocs and not [a for a in allocs if a in (f"64, {heads}, {head_dim}", f"2, 2, 64, {heads}, {head_dim}")]


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_compiled_gptfast_on_the_gpu_replays_cuda_graphs_and_gives_the_reference_tokens():
    """On CUDA the compiled steps run as CUDA graphs (no skip: the cache is a static address), and the chain and
    autoregressive decodes give the reference tokens (tiny pair, fp32: margins far above rounding)."""
    target = build_model(model_preset("tiny-llama"), torch.float32, "cuda", seed=0)
    draft = build_model(model_preset("tiny-llama-draft"), torch.float32, "cuda", seed=1)
    prompt = torch.randint(0, target.shape.vocab_size, (24,), generator=torch.Generator().manual_seed(0)).tolist()
    want = reference_decode(target, prompt, 24, 128)
    cfg = PeerCompileConfig(coordinate_descent_tuning=False)
    C.apply_inductor_settings(cfg)
    clock = C.Clock("cuda")
    t, d = C.StaticDecoder(target, 64, cfg), C.StaticDecoder(draft, 64, cfg)
    with C.CompileWatch() as watch:
        for _ in range(3):  # warm-up, recording, replay
            assert C.decode_autoregressive(t, prompt, 24, 128, None, clock)["tokens"] == want
            assert C.decode_chain(t, d, prompt, 24, 128, None, 4, clock)["tokens"] == want
    diag = watch.delta(expected=t.steps_made + d.steps_made)
    assert diag["unique_graphs"] == 3 and diag["recompiles"] == 0  # target 1 and 5 rows, draft 1 row
    assert diag["cudagraph_skips"] == 0, diag["cudagraph_skip_reasons"]
    # a step is one CUDA-graph replay plus the position fill and the output copy, not one launch per op
    p = C.kernel_profile(lambda: t(torch.zeros(1, dtype=torch.long, device="cuda"), 30), "cuda")
    assert p["graph_launches_per_step"] == 1 and p["kernel_launches_per_step"] <= 4, p
