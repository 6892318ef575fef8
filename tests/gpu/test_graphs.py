"""GPU tests (marker `gpu`, `multi_gpu`): CUDA-graph steps and losslessness of every mode in bf16 and fp32.

Run on a GPU machine with the interpreter off (tests/conftest.py turns it on by default for CPU machines):

    TRITON_INTERPRET=0 pytest -m "gpu or multi_gpu" tests/gpu -p no:cacheprovider

Losslessness: the engine with `kernels=graphs` (Triton kernels, CUDA graphs) must emit the tokens of plain
greedy decoding of the target (`runtime.reference.reference_decode`: torch path, eager, same dtype). The two
compute the same logits up to rounding (different kernels and batch shapes), so they may part only at a
numerical tie: the first divergence must sit where the reference's top-1 / top-2 logit margin is at most
`TIE_EPSILON[dtype]` (bench/peers.py). Random-weight models (seeded) and, when `.cache/models` holds it, the
real SmolLM2-135M-Instruct GGUF (`python -m runtime.fetch_smollm2`).
"""

from __future__ import annotations

import functools

import pytest
import torch

from bench.peers import TIE_EPSILON, first_divergence
from conf.kernels_config import KernelFeatures
from conf.presets import MODEL_PRESETS
from conf.schema import ExperimentConfig
from runtime.attention import AttnMeta, ReferenceAttention, make_attention_backend
from runtime.engine import run_rank
from runtime.fetch_smollm2 import DEFAULT_DEST as GGUF_PATH
from runtime.fused_decode import FusedDecoder, KernelPlan
from runtime.graphs import StepGraph, StepSpec
from runtime.kv_cache import KVCache
from runtime.launch import launch
from runtime.loader import build_model
from runtime.reference import reference_decode
from runtime.tree import ancestor_mask
from runtime.worker_spec import WorkerSpec
from tests.runtime.test_engine import make_cfg
from tests.runtime.test_tree_cache import path_to_unexpanded_leaf
from tests.tolerances import assert_bitwise, assert_close

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MAX_NEW, CAPACITY = 48, 256
MODES = {
    "autoregressive": {},
    "chain": dict(gamma=4),
    "serial_tree": dict(bs=8, w=4, topk=4),
    "async_tree": dict(bs=8, w=4, topk=4, d="2"),
}


def prompts(vocab: int, n: int = 3, seed: int = 0) -> list[list[int]]:
    """Seeded random prompts of 5..40 tokens."""
    g = torch.Generator().manual_seed(seed)
    lengths = [5, 17, 40][:n]
    return [torch.randint(0, vocab, (k,), generator=g).tolist() for k in lengths]


def cfg_for(mode: str, target: str, draft: str, dtype: str, *, target_gpus: int = 1, draft_gpus: int = 0,
            checkpoint: str | None = None, ablate: tuple[str, ...] = (),
            **spec) -> ExperimentConfig:
    """kernels=graphs on CUDA (skinny GEMMs, PDL, RoPE in the single-token attention, the one-row refill graph, the
    target's QKV GEMM with RoPE + the KV write, prefills replayed per length bucket) with the torch draft head
    (draft_head ablated, as these tests ran before the presets) and the `ablate` features off too; the draft is
    `draft` (the target itself when it is the target's preset: self-speculation)."""
    return make_cfg(mode, target, draft, target_gpus=target_gpus, draft_gpus=draft_gpus,
                    max_new=MAX_NEW, capacity=CAPACITY, kernels="graphs", ablate=("draft_head", *ablate),
                    device="cuda", dtype=dtype, checkpoint=checkpoint, timeout_s=120, **{**MODES[mode], **spec})


@functools.cache
def reference(target: str, dtype: str, checkpoint: str | None, prompt_seed: int) -> tuple:
    model = build_model(MODEL_PRESETS[target], dtype, "cuda", seed=1, checkpoint=checkpoint)
    ps = prompts(MODEL_PRESETS[target].vocab_size, seed=prompt_seed)
    refs = []
    for p in ps:  # plain greedy decoding (torch path, eager) and the top-1 / top-2 margin before every token
        margins: list[float] = []
        refs.append((reference_decode(model, p, MAX_NEW, CAPACITY, margins=margins), margins))
    return ps, refs


def assert_lossless(cfg: ExperimentConfig, prompt_seed: int = 0) -> dict:
    """Run the engine on the reference prompts and check every request, tie-aware; returns the result."""
    target, dtype = cfg.model.target.preset, cfg.model.target.dtype
    ps, refs = reference(target, dtype, cfg.model.target.checkpoint, prompt_seed)
    res = launch(functools.partial(run_rank, prompts=ps, eos_token_id=None), cfg)
    eps = TIE_EPSILON[dtype]
    for rid, ((ref, margins), out) in enumerate(zip(refs, res["outputs"])):
        assert len(out) == len(ref), f"request {rid}: {len(out)} tokens, reference {len(ref)}"
        k = first_divergence(ref, out)
        if k is not None:
            assert margins[k] <= eps, (f"{cfg.spec.mode} request {rid}: diverges at token {k} ({out[k]} vs "
                                       f"{ref[k]}) where the reference margin is {margins[k]:.4f} > {eps}")
    return res


# ---- the graph itself ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,tol,skinny,use_pdl,rope_attention", [
    ("float32", 2e-4, False, False, False), ("bfloat16", 0.15, False, False, False),
    ("float32", 2e-4, True, True, False), ("bfloat16", 0.15, True, True, False), ("bfloat16", 0.15, False, True, False),
    ("float32", 2e-4, True, True, True), ("bfloat16", 0.15, True, True, True)])
def test_step_graph_replays_match_eager_forwards(dtype, tol, skinny, use_pdl, rope_attention):
    """Verify-shaped graph (8 rows, a tree mask) at three prefix lengths = the eager fused forward (cuBLAS
    projections, no PDL), also when the graph was captured with the skinny GEMMs and/or PDL launches and/or the
    RoPE + KV write inside the attention (kernels.rope_attention)."""
    from kernels.pdl import launch_pdl, pdl

    shape = MODEL_PRESETS["tiny-llama"]
    model = FusedDecoder(build_model(shape, dtype, "cuda", seed=3),
                         KernelPlan(skinny=skinny, rope_attention=rope_attention))
    attn = make_attention_backend("triton")
    attn.rope_max_tokens = 64  # the 8-row step through rope_tree_attention (the runtime fuses 1-token steps only)
    layers, heads, head_dim = model.cache_spec()
    cache = KVCache(layers, 200, heads, head_dim, model.dtype, "cuda")
    with pdl(use_pdl):
        assert launch_pdl(torch.device("cuda")) == (use_pdl and torch.cuda.get_device_capability()[0] >= 9)
        graph = StepGraph(model, cache, attn, StepSpec(8, 8))
    model = FusedDecoder(model.model)  # the eager reference: the base fused path
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, shape.vocab_size, (150,), generator=g)
    model(prompt.cuda(), AttnMeta.causal(0, 150, "cuda"), cache, attn)
    parents = [-1, 0, 0, 1, 1, 2, 3, 3]
    mask = ancestor_mask(parents, 8)
    depth = [0, 1, 1, 2, 2, 2, 3, 3]
    for prefix in (20, 77, 141):
        ids = torch.randint(0, shape.vocab_size, (8,), generator=g)
        pos = torch.tensor([prefix + d for d in depth])
        slots = torch.arange(8)
        got = graph.replay(ids, pos, slots, prefix, mask).clone()
        meta = AttnMeta.tree(prefix, 8, (prefix + slots).cuda(), pos.cuda(), mask.cuda())
        want = model(ids.cuda(), meta, cache, attn)
        err = (got - want).abs().max().item() / want.abs().max().item()
        assert err <= tol, f"prefix {prefix}: relative error {err:.2e}"


def _cuda_draft(graphs: bool, fused_head: bool = False):
    """The tiny fp32 draft on CUDA (w 4, top-k 3, 32 tree slots), eager or with its two expansion graphs;
    `fused_head`: kernels.draft_head."""
    from runtime.draft_worker import DraftWorker

    model = FusedDecoder(build_model(MODEL_PRESETS["tiny-llama-draft"], "float32", "cuda", seed=2))
    return DraftWorker(model, make_attention_backend("triton"), WorkerSpec(4, 128, topk=3, max_tree_nodes=32),
                       KernelFeatures(backend="triton", cuda_graphs=graphs, draft_head=fused_head))


@pytest.mark.parametrize("fused_head", [False, True], ids=["torch_head", "fused_head"])
@torch.no_grad()
def test_draft_pending_expansion_graph_matches_eager(fused_head):
    """After a miss on a never-expanded leaf, the expansion carrying the pending token replays the w + 1-row
    graph: same tree (tokens, parents) and the same cache, up to fp32 rounding, as the eager worker (torch's
    head; with `fused_head` the graphs run kernels.topk_logprobs)."""

    shape = MODEL_PRESETS["tiny-llama-draft"]
    prompt = torch.randint(0, shape.vocab_size, (30,), generator=torch.Generator().manual_seed(5)).tolist()
    runs = []
    for graphs in (False, True):
        worker = _cuda_draft(graphs, fused_head=graphs and fused_head)
        replays: list[int] = []
        if graphs:  # count the pending graph's replays: an eager fallback must not pass this test
            def counted(_launch=worker.pending_graph.launch, _calls=replays):
                _calls.append(1)
                return _launch()

            worker.pending_graph.launch = counted
        worker.start(prompt)
        assert worker.expand() and worker.expand()
        proposal = worker.propose(0, 0, bs=len(worker.tree))
        _, path = path_to_unexpanded_leaf(worker, proposal)
        bonus = next(t for t in range(shape.vocab_size) if t not in proposal.token_ids)
        assert worker.advance(tuple(path), bonus).pending
        assert worker.expand() and worker.expand()
        assert replays == ([1] if graphs else [])
        runs.append(worker)
    eager, graphed = runs
    assert graphed.prefix_len == eager.prefix_len
    assert [(n.token, n.parent) for n in graphed.tree.nodes] == [(n.token, n.parent) for n in eager.tree.nodes]
    used = graphed.prefix_len + graphed.tree.num_slots
    a, b = graphed.cache.kv[:, :, :used], eager.cache.kv[:, :, :used]
    assert (a - b).abs().max().item() <= 2e-4 * b.abs().max().item()


@torch.no_grad()
def test_draft_graph_applies_the_owed_compaction_like_eager():
    """A re-root's KV compaction rides in the next expansion's replay (the graph's first kernel, sources staged
    with the inputs): over hit re-roots whose subtrees move, and two re-roots in a row, tree and cache match
    the eager worker's up to fp32 rounding."""
    from tests.runtime.test_tree_cache import _hit_at_root

    shape = MODEL_PRESETS["tiny-llama-draft"]
    prompt = torch.randint(0, shape.vocab_size, (30,), generator=torch.Generator().manual_seed(7)).tolist()
    runs = []
    for graphs in (False, True):
        w = _cuda_draft(graphs)
        w.start(prompt)
        assert w.expand() and w.expand() and w.expand()
        for rnd in range(4):
            w.propose(0, rnd, bs=min(8, len(w.tree)))
            assert w.advance((0,), _hit_at_root(w)).hit
            assert w.compact() != graphs  # graphs: left to the replay
            if rnd != 2:
                assert w.expand()
        runs.append(w)
    eager, graphed = runs
    assert graphed.prefix_len == eager.prefix_len
    assert [(n.token, n.parent, n.slot) for n in graphed.tree.nodes] == [(n.token, n.parent, n.slot)
                                                                         for n in eager.tree.nodes]
    used = graphed.prefix_len + graphed.tree.num_slots
    a, b = graphed.cache.kv[:, :, :used], eager.cache.kv[:, :, :used]
    assert (a - b).abs().max().item() <= 2e-4 * b.abs().max().item()


@torch.no_grad()
def test_step_graph_applies_a_staged_compaction_before_its_forward():
    """A verify-shaped graph captured with keep_rows = 128 (two of kv_compact's 64-row chunks): a staged forward
    compaction of 100 slots (destination in the buffer, sources -1-padded) runs before the forward, which attends
    to the compacted region: cache and logits equal an eager compaction + eager forward; the next load without a
    keep moves nothing again."""
    from kernels.reference import kv_compact_ref
    from runtime.tree import proposal_inputs
    from runtime.tree_cache import step_meta

    shape = MODEL_PRESETS["tiny-llama"]
    model = FusedDecoder(build_model(shape, "float32", "cuda", seed=3))
    attn = make_attention_backend("triton")
    layers, heads, head_dim = model.cache_spec()
    caches = [KVCache(layers, 400, heads, head_dim, model.dtype, "cuda") for _ in range(2)]
    graph = StepGraph(model, caches[1], attn, StepSpec(8, 8, keep_rows=128))
    g = torch.Generator().manual_seed(4)
    prompt = torch.randint(0, shape.vocab_size, (300,), generator=g).cuda()
    for cache in caches:
        model(prompt, AttnMeta.causal(0, 300, "cuda"), cache, attn)
    dst, src = 20, list(range(40, 240, 2))  # 100 ascending sources, src[i] >= dst + i: a forward compaction
    prefix = dst + len(src)
    for step, keep in enumerate([(dst, src), None]):
        ids = torch.randint(0, shape.vocab_size, (5,), generator=g).tolist()
        inp = proposal_inputs(ids, [-1, 0, 0, 1, 2], prefix, 8)
        if keep is not None:
            kv_compact_ref(caches[0].kv, torch.tensor(src, device="cuda"), dst)
        want = model(inp.token_ids.cuda(), step_meta(inp, prefix, "cuda"), caches[0], attn)
        graph.load_inputs(inp, prefix, keep)
        got = graph.launch().clone()
        assert graph.inputs.keep_src[len(src) if keep else 0:].eq(-1).all()
        assert (got - want).abs().max().item() <= 2e-4 * want.abs().max().item(), f"step {step}: logits differ"
        a, b = caches[1].kv[:, :, :prefix + 8], caches[0].kv[:, :, :prefix + 8]
        assert (a - b).abs().max().item() <= 2e-4 * b.abs().max().item(), f"step {step}: caches differ"
        prefix += 3


def test_step_graph_refuses_other_shapes_and_backends():
    model = build_model(MODEL_PRESETS["tiny-llama"], "float32", "cuda", seed=3)
    layers, heads, head_dim = model.cache_spec()
    cache = KVCache(layers, 64, heads, head_dim, model.dtype, "cuda")
    with pytest.raises(ValueError, match=r"needs the Triton backend \(kernels=graphs\)"):
        StepGraph(model, cache, ReferenceAttention(), StepSpec(4, 4))
    graph = StepGraph(model, cache, make_attention_backend("triton"), StepSpec(4, 4))
    with pytest.raises(ValueError, match="captured for 4 rows"):
        graph.replay(torch.zeros(5, dtype=torch.long), torch.arange(5), torch.arange(5), 0,
                     torch.ones(5, 5, dtype=torch.bool))


# ---- every mode, colocated on one GPU ----------------------------------------------------------------------
COLOCATED = ["autoregressive", "chain", "serial_tree"]  # async_tree needs a draft group of its own (below)
TWO_GPUS = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
SHARED = torch.cuda.device_count() < 2
"""One GPU: the 1 + 1 splits (async_tree, the two-group tests) run with `parallel.share_gpus`, both groups' processes
on that GPU over the unix leader channel; the TP-2 tests still need 2 GPUs."""
SHARE = dict(share_gpus=True, leader_channel="unix") if SHARED else {}
"""The overrides of a 1 + 1 split that names no leader channel: both groups on the GPU where only one is there."""
ONE_PLUS_ONE = dict(target_gpus=1, draft_gpus=1, share_gpus=SHARED)
"""A 1 + 1 split, its two groups on one GPU where only one is there (the test names the leader channel)."""


def split_of(mode: str) -> dict:
    """async_tree on 1 + 1 GPUs (both groups on one GPU if only one is there), every other mode colocated on one."""
    return dict(draft_gpus=1, **SHARE) if mode == "async_tree" else {}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("mode", COLOCATED)
def test_modes_lossless_with_graphs_self_speculation(mode, dtype):
    """Draft = the target (high acceptance: re-root hits, long accepted paths)."""
    assert_lossless(cfg_for(mode, "tiny-llama", "tiny-llama", dtype))


@pytest.mark.parametrize("mode", COLOCATED)
def test_modes_lossless_without_skinny_gemms_or_pdl(mode):
    """kernels.ablate=[skinny,pdl,rope_attention,target_qkv_rope]: cuBLAS projections, ordinary launches, the
    separate RoPE kernel in single-token steps too (the other tests run all of them)."""
    assert_lossless(cfg_for(mode, "tiny-llama", "tiny-llama", "bfloat16",
                            ablate=("skinny", "pdl", "rope_attention", "target_qkv_rope")))


@pytest.mark.multi_gpu
@TWO_GPUS
@pytest.mark.parametrize("mode", ["serial_tree", "autoregressive"])
def test_tp2_target_lossless_with_in_graph_staging_and_spin_readback(mode):
    """A TP-2 target's graphs: the peer never reads its verdict back, so its next load waits on the ticket alone;
    the TP-2 autoregressive step (a chained graph, replayed with a load each step) copies at each load instead."""
    assert_lossless(cfg_for(mode, "tiny-llama", "tiny-llama", "bfloat16", target_gpus=2))


@pytest.mark.parametrize("mode", ["chain", "serial_tree"])
def test_modes_lossless_with_graphs_small_draft(mode):
    """A different random draft (misses: lone-root re-roots, expanded by the one-row refill graph; pending tokens on
    the eager path)."""
    assert_lossless(cfg_for(mode, "tiny-llama", "tiny-llama-draft", "bfloat16"))


@pytest.mark.parametrize("mode", ["serial_tree", "async_tree"])
def test_many_row_expansions_lossless_with_graphs(mode):
    """w 63 expansions on tiny-llama (GQA 2: 126 query rows, the wide attention tile under
    kernels.tree_attention.WIDE_MAX_ROWS 256, as the 1B draft's w 32 at GQA 4), self-speculation and a small draft."""
    assert_lossless(cfg_for(mode, "tiny-llama", "tiny-llama", "bfloat16", w=63, **split_of(mode)))
    assert_lossless(cfg_for(mode, "tiny-llama", "tiny-llama-draft", "bfloat16", w=63,
                                    **split_of(mode)))


@pytest.mark.parametrize("mode", ["chain", "serial_tree", "async_tree"])
def test_modes_lossless_with_an_fp8_draft(mode):
    """model.draft.weight_bits=8: the draft's captured steps stream fp8 copies of its projections (the H200's fp8 ->
    bf16 converts in the skinny GEMMs and the SwiGLU); self-speculation with the fp8 target as draft (near-hits) and a
    small random draft (misses, refills, pending rows)."""
    import dataclasses

    for draft in ("tiny-llama", "tiny-llama-draft"):
        cfg = cfg_for(mode, "tiny-llama", draft, "bfloat16", **split_of(mode))
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(
            cfg.model, draft=dataclasses.replace(cfg.model.draft, weight_bits=8)))
        res = assert_lossless(cfg)
        if draft == "tiny-llama":  # the fp8 copy of the target still proposes what the target accepts
            assert res["metrics"]["mean_accept_len"] > 2.0


@pytest.mark.parametrize("mode", ["autoregressive", "serial_tree"])
def test_target_qkv_rope_lossless_at_the_real_pairs_shapes(mode):
    """kernels.target_qkv_rope at SmolLM2-135M's shapes (head dim 64, 9 query / 3 KV heads: two programs per head of
    16 rotation pairs; the tiny models' heads are 16 wide) with random weights, the shipped draft's shape as draft."""
    cfg = cfg_for(mode, "smollm2-135m", "smollm2-draft", "bfloat16")
    assert cfg.kernels.target_qkv_rope
    assert_lossless(cfg)


@pytest.mark.skipif(not GGUF_PATH.exists(), reason=f"{GGUF_PATH} not present (python -m runtime.fetch_smollm2)")
@pytest.mark.parametrize("mode", [*COLOCATED, "async_tree"])
def test_real_smollm2_lossless_bf16(mode):
    """SmolLM2-135M-Instruct weights (real logit margins), self-speculation, bf16."""
    cfg = cfg_for(mode, "smollm2-135m", "smollm2-135m", "bfloat16", checkpoint=str(GGUF_PATH), **split_of(mode))
    res = assert_lossless(cfg)
    if mode != "autoregressive":
        assert res["metrics"]["mean_accept_len"] > 2.0  # the draft is the target: most proposals are accepted


# ---- 2 GPUs: a draft group, and a TP-2 target with NCCL all-reduces inside the graph -------------------
TP2 = [pytest.mark.multi_gpu, TWO_GPUS]


@pytest.mark.parametrize("mode,split,draft", [("async_tree", (1, 1), "tiny-llama"),
                                              ("async_tree", (1, 1), "tiny-llama-draft"),
                                              ("serial_tree", (1, 1), "tiny-llama"),
                                              pytest.param("autoregressive", (2, 0), "tiny-llama", marks=TP2),
                                              pytest.param("chain", (2, 0), "tiny-llama", marks=TP2)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_split_lossless_with_graphs(mode, split, draft, dtype):
    """1 + 1 (a draft group of its own; on one GPU both groups share it) and a TP-2 target (2 GPUs)."""
    assert_lossless(cfg_for(mode, "tiny-llama", draft, dtype, target_gpus=split[0], draft_gpus=split[1],
                            **(SHARE if split == (1, 1) else {})))


@pytest.mark.parametrize("mode", ["async_tree", "serial_tree", "chain"])
def test_unix_leader_channel_lossless_on_gpus(mode):
    """parallel.leader_channel=unix on 1 + 1 GPUs (the leaders talk over a Unix-domain socket, no NCCL hop)."""
    assert_lossless(cfg_for(mode, "tiny-llama", "tiny-llama", "bfloat16", **ONE_PLUS_ONE,
                            leader_channel="unix"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_cache_keep_on_cuda_matches_the_indexing_path(dtype):
    """KVCache.keep on CUDA runs kernels.kv_compact (one launch); it must move exactly what the advanced-indexing
    path (CPU) moves, for the re-root pattern (promoted path slots, then survivors, overlapping the destination)
    and for a target keep."""
    g = torch.Generator().manual_seed(3)
    for src, dst in (([40, 41, 44, 46, 47, 52], 40), ([100, 103], 100), (list(range(8, 72)), 5)):
        cpu = KVCache(3, 128, 2, 64, dtype=dtype)
        cpu.kv.copy_(torch.randn(cpu.kv.shape, generator=g).to(dtype))
        gpu = KVCache(3, 128, 2, 64, dtype=dtype, device="cuda")
        gpu.kv.copy_(cpu.kv)
        cpu.keep(torch.tensor(src), dst)
        gpu.keep(torch.tensor(src), dst)
        assert_bitwise(gpu.kv.cpu(), cpu.kv, reason="keep() moves slots on both devices: data movement",
                       what=f"{src} -> {dst}")


def test_graph_events_time_the_verify_replay():
    """trace.graph_events: the verify's device time (input copies + replay) is read after the verdict, and lies
    inside the host-timed verify."""
    import time

    from conf.messages import DraftProposal
    from runtime.target_worker import TargetWorker

    model = FusedDecoder(build_model(MODEL_PRESETS["tiny-llama"], "bfloat16", "cuda", seed=3),
                         KernelPlan(skinny=True))
    worker = TargetWorker(model, make_attention_backend("triton"), WorkerSpec(4, 64, graph_events=True),
                          KernelFeatures(backend="triton", cuda_graphs=True))
    worker.start(list(range(10, 30)))
    assert worker.last_device_s() is None  # no verify yet
    t0 = time.perf_counter()
    worker.forward(DraftProposal(0, 0, (5, 6, 7, 8), (-1, 0, 0, 1)))
    worker.decide(None)
    wall = time.perf_counter() - t0
    device_s = worker.last_device_s()
    assert device_s is not None and 0 < device_s <= wall
    marks = worker.host_marks  # the host's marks, in order: inputs built, copied, replay queued
    assert t0 < marks["inputs"] <= marks["copied"] <= marks["launched"] < t0 + wall
    split = worker.last_device_split()
    assert set(split) == {"inputs_s", "copies_s", "replay_s"} and all(v >= 0 for v in split.values())
    assert split["copies_s"] + split["replay_s"] == pytest.approx(device_s)


def test_graph_events_time_the_draft_expansion():
    """trace.graph_events on the draft: a replayed expansion's device time (input copies + replay) and the
    host's marks lie inside the host-timed expansion, in order."""
    import time

    from runtime.draft_worker import DraftWorker

    model = FusedDecoder(build_model(MODEL_PRESETS["tiny-llama"], "bfloat16", "cuda", seed=4),
                         KernelPlan(skinny=True))
    draft = DraftWorker(model, make_attention_backend("triton"),
                        WorkerSpec(4, 64, topk=4, max_tree_nodes=16, graph_events=True),
                        KernelFeatures(backend="triton", cuda_graphs=True))
    draft.start(list(range(10, 30)))
    assert draft.last_device_split() is None  # no expansion yet
    t0 = time.perf_counter()
    assert draft.expand()
    wall = time.perf_counter() - t0
    split = draft.last_device_split()
    assert split is not None and set(split) == {"inputs_s", "copies_s", "replay_s", "planned_s", "copied_s",
                                                "launched_s"}
    assert 0 < split["copies_s"] + split["replay_s"] <= wall
    assert 0 <= split["planned_s"] <= split["copied_s"] <= split["launched_s"] < wall


@pytest.mark.parametrize("rows", [1, 8, 17])
def test_topk_logprobs_on_the_draft_vocabulary(rows):
    """kernels.topk_logprobs at Llama-3.2-1B's vocabulary on the GPU, eager and captured in a CUDA graph: the ids of
    torch's topk(log_softmax) and its values to fp32 rounding."""
    from kernels import topk_logprobs
    from kernels.reference import topk_logprobs_ref

    x = torch.randn(rows, 128256, device="cuda", generator=torch.Generator("cuda").manual_seed(rows)) * 3
    ref_values, ref_ids = topk_logprobs_ref(x, 8)
    values, ids = topk_logprobs(x, 8)
    assert torch.equal(ids, ref_ids)
    assert_close(values, ref_values, torch.float32, reduction=128256, what="eager log-probs", relative=False)
    topk_logprobs(x, 8)  # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_values, g_ids = topk_logprobs(x, 8)
    x.copy_(torch.randn(rows, 128256, device="cuda", generator=torch.Generator("cuda").manual_seed(99)) * 3)
    graph.replay()
    ref_values, ref_ids = topk_logprobs_ref(x, 8)
    assert torch.equal(g_ids, ref_ids)
    assert_close(g_values, ref_values, torch.float32, reduction=128256, what="graph log-probs", relative=False)


@pytest.mark.parametrize("rows", [4, 8])
def test_verdict_in_the_verify_graph_matches_the_verdict_after_it(rows):
    """A greedy tree verify's graph computes its verdict itself (`StepGraph` verdict="greedy": the rows' argmax and
    `kernels.greedy_verify` over the loaded ids and parent rows, padding rows never accepted) and copies it to the
    host; an oracle run's graph only the rows' argmax. Both equal `verify_proposal` / the argmax on the graph's own
    logits, for proposals that fill the rows or leave padding, over several verifies of one request (tiny-llama,
    bf16). The root's first child is the target's own next token (from a probe forward of the same root), so verdicts
    accept nodes too."""
    from conf.messages import DraftProposal
    from runtime.oracle import NO_RANK, OracleOutcome
    from runtime.target_worker import TargetWorker
    from runtime.verify import verify_proposal

    class FirstChild:  # an oracle outcome: the root's first child accepted, where the proposal has one
        def walk(self, parents):
            return OracleOutcome((0, 1) if len(parents) > 1 else (0,), NO_RANK)

    model = FusedDecoder(build_model(MODEL_PRESETS["tiny-llama"], "bfloat16", "cuda", seed=3),
                         KernelPlan(skinny=True))
    vocab = MODEL_PRESETS["tiny-llama"].vocab_size
    gen = torch.Generator().manual_seed(5)
    proposals = [(-1, 0, 0, 1), (-1, 0, 1), (-1,), (-1, 0, 0, 0, 1, 2, 3, 4)[:rows]]
    accepted = 0
    for kind in ("greedy", "oracle"):
        worker = TargetWorker(model, make_attention_backend("triton"), WorkerSpec(rows, 96, oracle=kind == "oracle"),
                              KernelFeatures(backend="triton", cuda_graphs=True))
        worker.start(list(range(10, 40)))
        for it, parents in enumerate(proposals):
            ids = [int(t) for t in torch.randint(1, vocab, (len(parents),), generator=gen)]
            worker.forward(DraftProposal(0, it, tuple(ids), parents))  # probe: the target's token after the root
            if len(ids) > 1:
                ids[1] = int(worker._logits[0].argmax())
            worker.forward(DraftProposal(0, it, tuple(ids), parents))
            logits = worker._logits.clone()
            if kind == "greedy":
                inp = worker._inputs
                want = verify_proposal(logits, inp.token_ids.cuda(), inp.parents.cuda(), inp.num_real, 0.0, None,
                                       "triton")
                got = worker.decide(None)
                assert got == want, (it, got, want)
                accepted += got.num_accepted
            else:
                got = worker.decide(None, FirstChild())
                assert got.bonus == int(logits[got.path[-1]].argmax())
            worker.keep(got.path)
    assert accepted >= 2  # the target's own tokens were accepted (one per proposal with a child)


@pytest.mark.parametrize("mode", ["autoregressive", "serial_tree"])
def test_modes_lossless_with_eager_prefills(mode):
    """kernels.ablate=[prefill_graph] (the other tests replay their prefills per length bucket)."""
    assert_lossless(cfg_for(mode, "tiny-llama", "tiny-llama-draft", "bfloat16",
                            ablate=("prefill_graph",)))


@pytest.mark.parametrize("preset", ["tiny-llama", "smollm2-135m"])
@torch.no_grad()
def test_prefill_graph_writes_the_kv_of_an_eager_prefill(preset):
    """kernels.prefill_graph on the GPU (bf16, the fused kernels): each prompt's K/V from its bucket's replay equal an
    eager prefill's up to bf16 rounding (another row count picks other GEMM tiles); two prompts of one bucket capture
    it once; the K/V of the next step's row, after the replayed prefill, equal those after the eager one; the stream is
    idle when a replayed prefill returns (`PrefillGraphs.drain`)."""
    from runtime.graphs import PrefillGraphs
    from runtime.tree_cache import prefill

    shape = MODEL_PRESETS[preset]
    model = FusedDecoder(build_model(shape, "bfloat16", "cuda", seed=1),
                         KernelPlan(skinny=True, rope_attention=True))
    attn = make_attention_backend("triton")
    layers, heads, dim = model.cache_spec()
    eager_cache, graph_cache = (KVCache(layers, CAPACITY, heads, dim, torch.bfloat16, "cuda") for _ in range(2))
    graphs = PrefillGraphs(model, graph_cache, attn)
    g = torch.Generator().manual_seed(3)
    for n in (40, 50, 20, 100):
        prompt = torch.randint(0, shape.vocab_size, (n,), generator=g).tolist()
        assert prefill(model, eager_cache, attn, prompt, "cuda") == prefill(model, graph_cache, attn, prompt, "cuda",
                                                                             graphs) == n - 1
        assert torch.cuda.current_stream().query(), "PrefillGraphs.drain: the replay is done when run returns"
        step = torch.tensor(prompt[-1:], device="cuda")
        for cache in (eager_cache, graph_cache):
            model(step, AttnMeta.causal(n - 1, 1, "cuda"), cache, attn)
        torch.cuda.synchronize()
        got, want = graph_cache.kv[:, :, :n].float(), eager_cache.kv[:, :, :n].float()
        assert (got - want).abs().max().item() <= 0.05 * want.abs().max().item(), f"{preset} n={n}"
    assert (graphs.captures, graphs.replays) == (3, 4)  # buckets 64 (n 40, 50), 32, 128
