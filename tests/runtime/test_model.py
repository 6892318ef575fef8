"""The decoder against Hugging Face transformers, the tree mask against chains, and the KV cache."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conf.presets import MODEL_PRESETS
from runtime.attention import AttnMeta, ReferenceAttention, make_attention_backend
from runtime.kv_cache import KVCache
from runtime.loader import build_model
from runtime.model import rope_inv_freq
from runtime.worker_spec import WorkerSpec
from tests.runtime import hf_config, hf_logits, new_cache, prefill_and_steps, save_hf_checkpoint
from tests.tolerances import assert_bitwise, assert_close, forward_terms

TOL = 1e-5  # fp32 logits against transformers, max abs error (the acceptance bound)

HF_PRESETS = ["tiny-llama", "tiny-llama31", "tiny-qwen2", "tiny-llama-draft"]  # draft: tied embeddings


@pytest.mark.parametrize("preset", HF_PRESETS)
def test_logits_match_transformers(preset, tmp_path):
    """Prefill of 40 tokens then 24 single-token steps equal transformers' logits of the whole sequence."""
    shape = MODEL_PRESETS[preset]
    hf = save_hf_checkpoint(shape, tmp_path, seed=7)
    model = build_model(shape, torch.float32, "cpu", checkpoint=tmp_path)
    # 64 tokens reach past tiny-llama31's original_max_position (64 - 1): the scaled band is exercised.
    ids = torch.randint(0, shape.vocab_size, (64,), generator=torch.Generator().manual_seed(1))
    ref = hf_logits(hf, ids)
    ours = prefill_and_steps(model, ids, n_prefill=40)
    assert ours.dtype == torch.float32 and ours.shape == (64, shape.vocab_size)
    err = (ours - ref).abs().max().item()
    assert err <= TOL, f"{preset}: max abs logit error {err:.3g} > {TOL}"


@pytest.mark.parametrize("preset", ["tiny-llama31", "llama3.1-8b", "llama3.2-1b", "smollm2-135m"])
def test_rope_frequencies_equal_transformers(preset):
    """Our inverse frequencies (Llama 3.1 scaling included) are bit-identical to transformers'."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    shape = MODEL_PRESETS[preset]
    hf = LlamaRotaryEmbedding(hf_config(shape)).inv_freq
    assert torch.equal(rope_inv_freq(shape), hf)
    if shape.rope_scaling is not None:  # the scaling does change them
        assert not torch.equal(hf, rope_inv_freq(dataclasses.replace(shape, rope_scaling=None)))


def _tree():
    """Ancestor mask [6, 6] of a 6-node tree: 0 -> (1, 2), 1 -> (3, 4), 4 -> 5 (parents listed below)."""
    parents = [-1, 0, 0, 1, 1, 4]
    mask = torch.zeros(6, 6, dtype=torch.bool)
    for i, p in enumerate(parents):
        mask[i, i] = True
        while p >= 0:
            mask[i, p], p = True, parents[p]
    return mask


def test_tree_step_equals_chains():
    """Branch-as-chain oracle: every tree node's logits equal causal decoding of its root-to-node path."""
    shape = MODEL_PRESETS["tiny-qwen2"]
    model, attn = build_model(shape, seed=3), ReferenceAttention()
    prefix = torch.randint(0, 256, (7,), generator=torch.Generator().manual_seed(2))
    nodes = torch.tensor([11, 22, 33, 44, 55, 66])
    mask = _tree()
    depth = mask.sum(1) - 1
    cache = new_cache(model, 32)
    with torch.inference_mode():
        model(prefix, AttnMeta.causal(0, 7), cache, attn)
        meta = AttnMeta.tree(7, 6, torch.arange(7, 13), 7 + depth, mask)
        tree_logits = model(nodes, meta, cache, attn)
        for i in range(6):
            path = nodes[mask[i]]  # ancestors in index order = root-to-node order
            chain = model(torch.cat([prefix, path]), AttnMeta.causal(0, 7 + len(path)),
                          new_cache(model, 32), attn)
            assert_close(tree_logits[i], chain[-1], torch.float32, reduction=forward_terms(shape, 13),
                         what=f"node {i}")


def test_draft_expansion_nonsquare_mask():
    """Expanding 2 leaves of an existing 4-slot tree region (T=2 queries over tree_len=6) equals chains."""
    shape = MODEL_PRESETS["tiny-llama"]
    model, attn = build_model(shape, seed=5), ReferenceAttention()
    full = _tree()
    prefix, nodes = torch.tensor([5, 6, 7]), torch.tensor([11, 22, 33, 44, 55, 66])
    cache = new_cache(model, 16)
    with torch.inference_mode():
        model(prefix, AttnMeta.causal(0, 3), cache, attn)
        depth = full.sum(1) - 1
        model(nodes[:4], AttnMeta.tree(3, 4, torch.arange(3, 7), 3 + depth[:4], full[:4, :4]), cache, attn)
        out = model(nodes[4:], AttnMeta.tree(3, 6, torch.arange(7, 9), 3 + depth[4:], full[4:]), cache, attn)
        for row, i in enumerate((4, 5)):
            chain = model(torch.cat([prefix, nodes[full[i]]]), AttnMeta.causal(0, 3 + int(full[i].sum())),
                          new_cache(model, 16), attn)
            assert_close(out[row], chain[-1], torch.float32, reduction=forward_terms(shape, 9), what=f"node {i}")


def test_keep_compacts_to_plain_decode_cache():
    """After a tree step, keeping the accepted path's slots gives the cache of plain decoding of that path."""
    shape = MODEL_PRESETS["tiny-llama"]
    model, attn = build_model(shape, seed=9), ReferenceAttention()
    mask = _tree()
    prefix, nodes = torch.tensor([1, 2, 3, 4]), torch.tensor([10, 20, 30, 40, 50, 60])
    layers, heads, dim = model.cache_spec()
    cache, plain = KVCache(layers, 16, heads, dim), KVCache(layers, 16, heads, dim)
    accepted = [0, 1, 4, 5]  # root -> 1 -> 4 -> 5, stored at slots 4, 5, 8, 9
    with torch.inference_mode():
        model(prefix, AttnMeta.causal(0, 4), cache, attn)
        model(nodes, AttnMeta.tree(4, 6, torch.arange(4, 10), 4 + mask.sum(1) - 1, mask), cache, attn)
        cache.keep(torch.tensor(accepted) + 4, dst_start=4)
        model(torch.cat([prefix, nodes[accepted]]), AttnMeta.causal(0, 8), plain, attn)
    # K / V of a token: its QKV GEMM after the layers below it (the last layer's values carry the longest chain)
    assert_close(cache.kv[:, :, :8], plain.kv[:, :, :8], torch.float32, reduction=forward_terms(shape, 10),
                 what="kept cache vs plain decode")


def test_keep_is_safe_for_overlapping_ranges():
    """keep() gathers before writing: moving slots [2, 6) to [1, 5) and a reversed order both work."""
    cache = KVCache(2, 8, 1, 2)
    cache.kv.copy_(torch.arange(cache.kv.numel(), dtype=torch.float32).view_as(cache.kv))
    before = cache.kv.clone()
    cache.keep(torch.tensor([2, 3, 4, 5]), dst_start=1)
    move = "keep() gathers and copies slots: data movement"
    assert_bitwise(cache.kv[:, :, 1:5], before[:, :, 2:6], reason=move)
    assert_bitwise(cache.kv[:, :, [0, 5, 6, 7]], before[:, :, [0, 5, 6, 7]], reason="slots keep() does not write")
    cache.keep(torch.tensor([3, 2, 1]), dst_start=1)
    assert_bitwise(cache.kv[:, :, 1:4], before[:, :, [4, 3, 2]], reason=move)
    with pytest.raises(ValueError, match="outside capacity"):
        cache.keep(torch.tensor([0, 1]), dst_start=7)


def test_cache_layout_and_meta_checks():
    """One monolithic kv tensor with contiguous per-layer views; bad metadata and backends are named."""
    cache = KVCache(3, 10, 2, 4, torch.float32, "cpu")
    assert cache.kv.shape == (3, 2, 10, 2, 4) and cache.capacity == 10
    k, v = cache.layer(1)
    assert k.is_contiguous() and k.data_ptr() == cache.kv[1, 0].data_ptr() and v.shape == (10, 2, 4)
    causal = AttnMeta.causal(5, 3)
    assert causal.positions.tolist() == [5, 6, 7] and causal.prefix_len == 5 and causal.visible_len == 8
    assert causal.tree_mask.tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    with pytest.raises(ValueError, match="tree_mask"):
        AttnMeta.tree(4, 3, torch.tensor([4, 5]), torch.tensor([4, 5]), torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="kernels.backend"):
        make_attention_backend("flash")
    assert isinstance(make_attention_backend("reference"), ReferenceAttention)


def test_random_init_is_seeded_and_bf16_runs():
    """Same seed -> same weights, other seed -> other weights; a bf16 model produces finite fp32 logits."""
    shape = MODEL_PRESETS["tiny-llama"]
    a, b, c = build_model(shape, seed=1), build_model(shape, seed=1), build_model(shape, seed=2)
    assert_bitwise(a.layers[1].mlp.w2.weight, b.layers[1].mlp.w2.weight,
                   reason="the same seeded elementwise hash builds both: determinism")
    assert not torch.equal(a.layers[1].mlp.w2.weight, c.layers[1].mlp.w2.weight)
    std = a.layers[0].attn.wqkv.weight.std().item()
    assert abs(std - shape.hidden_size**-0.5) < 0.01  # documented scale: 1/sqrt(fan_in)
    half = build_model(shape, "bfloat16", seed=1)
    logits = prefill_and_steps(half, torch.arange(12), n_prefill=8)
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()


@pytest.mark.parametrize("preset,skinny,hooked", [("tiny-llama", False, False), ("tiny-qwen2", False, False),
                                                  ("tiny-llama-draft", False, False), ("tiny-llama", True, False),
                                                  ("tiny-qwen2", True, False), ("tiny-llama", True, True)])
def test_fused_kernel_path_matches_torch_path(preset, skinny, hooked, monkeypatch):
    """`use_fused_kernels` (add + RMSNorm, RoPE + KV write, SwiGLU; Triton's interpreter on CPU) computes the
    torch path's logits and cache in fp32: a prefill, then a tree step, then a single-token step.

    `skinny`: every step (<= 64 rows) projects by the skinny GEMM, o and down as split-K partials summed in the
    norms; qwen2's QKV bias keeps its QKV on torch. `hooked`:
    forward hooks on the attention and MLP (as the TP transform's all-reduce) make o and down torch GEMMs."""
    pytest.importorskip("kernels")
    shape = MODEL_PRESETS[preset]
    models = [build_model(shape, torch.float32, "cpu", seed=9).use_fused_kernels(f, skinny=f and skinny)
              for f in (False, True)]
    calls = {"partials": 0, "hooks": 0, "skinny_linear": 0}
    if skinny:
        import kernels

        def counting(name):
            real = getattr(kernels, name)

            def counted(*args, **kw):
                calls[name if name != "add_rmsnorm_partials" else "partials"] += 1
                return real(*args, **kw)
            return counted

        for name in ("add_rmsnorm_partials", "skinny_linear"):
            monkeypatch.setattr(kernels, name, counting(name))
    if hooked:
        def hook(_module, _args, output):
            calls["hooks"] += 1
            return output

        for layer in models[1].layers:
            layer.attn.register_forward_hook(hook)
            layer.mlp.register_forward_hook(hook)
    attn = make_attention_backend("triton")
    ids = torch.randint(0, shape.vocab_size, (30,), generator=torch.Generator().manual_seed(2))
    # tree: parents [-1, 0, 0, 1, 2]
    mask = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]],
                        dtype=torch.bool)
    depth = torch.tensor([0, 1, 1, 2, 2])
    steps = [(ids[:24], AttnMeta.causal(0, 24)),
             (ids[24:29], AttnMeta.tree(24, 5, torch.arange(24, 29), 24 + depth, mask)),
             (ids[29:], AttnMeta.causal(26, 1))]
    caches = [new_cache(m, 40) for m in models]
    for tokens, meta in steps:
        plain, fused = (m(tokens, meta, c, attn) for m, c in zip(models, caches))
        assert_close(fused, plain, torch.float32, reduction=forward_terms(shape, 29),
                     what=f"{preset}: fused path at {len(tokens)} rows")
    assert_close(caches[1].kv[:, :, :29], caches[0].kv[:, :, :29], torch.float32, reduction=forward_terms(shape, 29),
                 what=f"{preset}: caches")
    assert calls["partials"] == (2 * 3 * shape.num_layers if skinny and not hooked else 0)
    # per step: every layer's QKV (not with qwen2's bias) and the LM head
    qkv = 0 if shape.qkv_bias else shape.num_layers
    assert calls["skinny_linear"] == (3 * (qkv + 1) if skinny else 0)
    assert calls["hooks"] == (2 * 3 * shape.num_layers if hooked else 0)


def test_a_chained_one_row_graph_gives_the_verdict_from_its_own_argmax():
    """A greedy one-row target (TP > 1 autoregressive decoding replays its chain=True graph without chaining): the
    verdict is the argmax the graph already wrote (`next_ids`), the same as the greedy verify of its logits."""
    from types import SimpleNamespace

    from conf.messages import DraftProposal
    from runtime.target_worker import TargetWorker
    from runtime.verify import verify_proposal

    model = build_model(MODEL_PRESETS["tiny-llama"], torch.float32, "cpu", seed=1)
    worker = TargetWorker(model, make_attention_backend("reference"), WorkerSpec(rows=1, max_seq_len=32))
    worker.start([1, 2, 3])
    worker.forward(DraftProposal(0, 0, (4,), (-1,)))
    logits = worker._logits
    want = verify_proposal(logits, torch.tensor([4]), torch.tensor([-1]), 1, 0.0, None)
    worker.graph = SimpleNamespace(chained=True, readback=False,  # what the chain graph writes (no readback)
                                   next_ids=logits.argmax(dim=-1))
    assert worker.decide(None) == want and want.path == (0,)


def test_graph_events_need_graphs():
    """Without CUDA graphs (CPU) `trace.graph_events` records nothing: last_device_s stays None."""
    from conf.messages import DraftProposal
    from runtime.target_worker import TargetWorker

    model = build_model(MODEL_PRESETS["tiny-llama"], torch.float32, "cpu", seed=1)
    worker = TargetWorker(model, make_attention_backend("reference"),
                          WorkerSpec(rows=2, max_seq_len=32, graph_events=True))
    worker.start([1, 2, 3])
    worker.forward(DraftProposal(0, 0, (4, 5), (-1, 0)))
    worker.decide(None)
    assert worker.last_device_s() is None and worker.last_device_split() is None and worker.host_marks == {}
    from runtime.draft_worker import DraftWorker

    draft = DraftWorker(model, make_attention_backend("reference"),
                        WorkerSpec(rows=2, max_seq_len=32, topk=2, max_tree_nodes=8, graph_events=True))
    draft.start([1, 2, 3])
    assert draft.expand() and draft.last_device_split() is None and draft.host_marks == {}
    # and the engine refuses the option without graphs, naming it
    import dataclasses

    from conf.schema import TraceConfig
    from runtime.engine import check_runtime_support
    from tests.runtime.test_engine import make_cfg

    cfg = make_cfg("serial_tree")
    check_runtime_support(cfg)
    with pytest.raises(ValueError, match="trace.graph_events: .*kernels.cuda_graphs"):
        check_runtime_support(dataclasses.replace(cfg, trace=TraceConfig(graph_events=True)))


def test_skinny_path_leaves_long_prefills_to_torch_gemms(monkeypatch):
    """kernels.skinny serves steps of <= SKINNY_MAX_ROWS rows: a 70-row prefill takes the fused path's torch
    GEMMs (no skinny launch) and equals the torch path."""
    pytest.importorskip("kernels")
    import kernels
    from runtime.model import SKINNY_MAX_ROWS

    shape = MODEL_PRESETS["tiny-llama"]
    plain = build_model(shape, torch.float32, "cpu", seed=4)
    skinny = build_model(shape, torch.float32, "cpu", seed=4).use_fused_kernels(skinny=True)
    launches = []
    for name in ("skinny_linear", "skinny_linear_partials"):
        monkeypatch.setattr(kernels, name, lambda *a, _n=name, **k: launches.append(_n))
    n = SKINNY_MAX_ROWS + 6
    ids = torch.randint(0, shape.vocab_size, (n,), generator=torch.Generator().manual_seed(1))
    attn = make_attention_backend("triton")
    want = plain(ids, AttnMeta.causal(0, n), new_cache(plain, n + 4), attn)
    got = skinny(ids, AttnMeta.causal(0, n), new_cache(skinny, n + 4), attn)
    assert launches == []
    assert_close(got, want, torch.float32, reduction=forward_terms(shape, n), what="70-row prefill")


def fused_variant_matches_the_torch_path(monkeypatch, kernel: str, steps, cache_slots: int,
                                         rope_max_tokens: int | None = None, **fused_kw) -> list:
    """tiny-llama fp32, the torch path against `use_fused_kernels(skinny=True, **fused_kw)` over `steps` ((token ids,
    AttnMeta) pairs, one shared cache each) with the Triton attention backend (its `rope_max_tokens` overridden when
    given): logits and the caches' first `cache_slots` slots to float32 rounding (tests/tolerances.py). Returns the
    first dimension of the first argument of every `kernels.<kernel>` call."""
    import kernels

    shape = MODEL_PRESETS["tiny-llama"]
    plain = build_model(shape, torch.float32, "cpu", seed=6)
    fused = build_model(shape, torch.float32, "cpu", seed=6).use_fused_kernels(skinny=True, **fused_kw)
    calls = []
    real = getattr(kernels, kernel)
    monkeypatch.setattr(kernels, kernel, lambda *a, **k: calls.append(a[0].shape[0]) or real(*a, **k))
    attn = make_attention_backend("triton")  # after the patch: the backend binds its kernels when built
    if rope_max_tokens is not None:
        attn.rope_max_tokens = rope_max_tokens
    caches = [new_cache(plain, cache_slots + 4), new_cache(fused, cache_slots + 4)]
    for tokens, meta in steps:
        want, got = (m(tokens, meta, c, attn) for m, c in zip((plain, fused), caches))
        assert_close(got, want, torch.float32, reduction=forward_terms(shape, cache_slots), what="logits")
    assert_close(caches[1].kv[:, :, :cache_slots], caches[0].kv[:, :, :cache_slots], torch.float32,
                 reduction=forward_terms(shape, cache_slots), what="caches")
    return calls


def test_qkv_rope_experiment_matches_the_torch_path(monkeypatch):
    """use_fused_kernels(skinny=True, qkv_rope=True): every step's QKV GEMM does RoPE + the KV write itself
    (kernels.qkv_rope_kv_write, one launch per layer) and the logits and cache equal the torch path."""
    pytest.importorskip("kernels")
    shape = MODEL_PRESETS["tiny-llama"]
    ids = torch.randint(0, shape.vocab_size, (20,), generator=torch.Generator().manual_seed(3))
    steps = ((ids[:16], AttnMeta.causal(0, 16)), (ids[16:], AttnMeta.causal(16, 4)))
    calls = fused_variant_matches_the_torch_path(monkeypatch, "qkv_rope_kv_write", steps, 20, qkv_rope=True)
    assert calls == [16] * shape.num_layers + [4] * shape.num_layers
    plain = build_model(shape, torch.float32, "cpu", seed=6)
    with pytest.raises(ValueError, match="qkv_rope needs skinny"):
        plain.use_fused_kernels(qkv_rope=True)


@pytest.mark.parametrize("max_tokens", [None, 64], ids=["runtime-limit", "kernel-limit"])
def test_rope_attention_matches_the_torch_path(max_tokens, monkeypatch):
    """use_fused_kernels(skinny=True, rope_attention=True): a decode step of up to the backend's rope_max_tokens
    tokens (the runtime's: single-token steps; kernel-limit: up to ROPE_MAX_TOKENS) rotates q and writes the new K/V
    inside its attention launch (kernels.rope_tree_attention, one launch fewer per layer); longer steps and a prefill
    keep the separate RoPE kernel; the logits and cache equal the torch path. The reference attention backend
    (rope_max_tokens 0) keeps the separate kernel too."""
    pytest.importorskip("kernels")
    from kernels.tree_attention import ROPE_MAX_TOKENS

    shape = MODEL_PRESETS["tiny-llama"]
    n = ROPE_MAX_TOKENS + 4
    ids = torch.randint(0, shape.vocab_size, (n + 10,), generator=torch.Generator().manual_seed(3))
    assert make_attention_backend("triton").rope_max_tokens == 1
    parents = [-1, 0, 0, 1, 2]
    tree = AttnMeta.tree(n + 5, 5, torch.arange(n + 5, n + 10), torch.tensor([n + 5 + (p >= 0) + (p > 0)
                                                                              for p in parents]),
                         torch.tensor([[j == i or j in (parents[i], 0) for j in range(5)] for i in range(5)]))
    steps = ((ids[:n], AttnMeta.causal(0, n)), (ids[n:n + 1], AttnMeta.causal(n, 1)),
             (ids[n + 1:n + 5], AttnMeta.causal(n + 1, 4)), (ids[n + 5:], tree))
    calls = fused_variant_matches_the_torch_path(monkeypatch, "rope_tree_attention", steps, n + 10, max_tokens,
                                                 rope_attention=True)
    fused_steps = [1] if max_tokens is None else [1, 4, 5]  # never the prefill (T > ROPE_MAX_TOKENS)
    assert calls == [t for t in fused_steps for _ in range(shape.num_layers)]
    calls.clear()  # kernels.rope_tree_attention is still the counting stand-in
    fused = build_model(shape, torch.float32, "cpu", seed=6).use_fused_kernels(skinny=True, rope_attention=True)
    fused(ids[:1], AttnMeta.causal(0, 1), new_cache(fused, 8), make_attention_backend("reference"))
    assert calls == []
    with pytest.raises(ValueError, match="rope_attention: needs the fused Triton path"):
        fused.use_fused_kernels(False, rope_attention=True)
    with pytest.raises(ValueError, match="pick one"):
        fused.use_fused_kernels(skinny=True, qkv_rope=True, rope_attention=True)


def test_role_kernels_give_the_fused_qkv_rope_gemm_to_an_unbiased_target_only():
    """kernels.target_qkv_rope: the target's QKV GEMM does RoPE + the KV write in place of the fused RoPE attention;
    a draft, a target with a QKV bias (Qwen2: the fused GEMM has no bias term) or one without skinny GEMMs keeps
    rope_attention."""
    from runtime.model import role_kernels

    llama, qwen = MODEL_PRESETS["tiny-llama"], MODEL_PRESETS["tiny-qwen2"]
    assert qwen.qkv_bias and not llama.qkv_bias
    on = dict(skinny=True, rope_attention=True, target_qkv_rope=True)
    assert role_kernels(llama, **on, target=True) == {"skinny": True, "qkv_rope": True, "rope_attention": False,
                                                      "weight_bits": 16}
    keep = {"skinny": True, "qkv_rope": False, "rope_attention": True, "weight_bits": 16}
    assert role_kernels(llama, **on, target=False) == keep
    assert role_kernels(qwen, **on, target=True) == keep
    assert role_kernels(llama, **{**on, "target_qkv_rope": False}, target=True) == keep
    assert role_kernels(llama, **{**on, "skinny": False}, target=True) == {**keep, "skinny": False}
    # fp8 weights: the fused QKV + RoPE GEMM has no fp8 path, so an fp8 target keeps the fused RoPE attention
    assert role_kernels(llama, **on, target=True, weight_bits=8) == {**keep, "weight_bits": 8}


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen2"])
def test_fp8_weights_compute_the_dequantized_models_decode_steps(preset):
    """use_fused_kernels(skinny=True, weight_bits=8): every step of <= 64 rows streams the fp8 copies (one scale per
    output row) of QKV (not Qwen2's biased one), o, gate / up and down, so its logits and cache equal those of the same
    model with those weights replaced by their dequantized values (16 bits), and differ from the unquantized model's;
    the LM head and embedding stay. Back at 16 bits the copies are dropped."""
    pytest.importorskip("kernels")
    from runtime.model import Fp8Weight

    shape = MODEL_PRESETS[preset]
    fp8, plain, deq = (build_model(shape, torch.float32, "cpu", seed=9) for _ in range(3))
    fp8.use_fused_kernels(skinny=True, weight_bits=8)
    plain.use_fused_kernels(skinny=True)
    deq.use_fused_kernels(skinny=True)
    for lq, ld in zip(fp8.layers, deq.layers):
        for copy, linear in ((lq.attn.wqkv_q8, ld.attn.wqkv), (lq.attn.wo_q8, ld.attn.wo), (lq.mlp.w13_q8, ld.mlp.w13),
                             (lq.mlp.w2_q8, ld.mlp.w2)):
            if linear is ld.attn.wqkv and shape.qkv_bias:
                assert copy is None  # a biased QKV stays on torch at 16 bits
                continue
            assert isinstance(copy, Fp8Weight) and copy.q.dtype == torch.float8_e4m3fn
            linear.weight.data.copy_(copy.q.float() * copy.scale[:, None])
    attn = make_attention_backend("triton")
    ids = torch.randint(0, shape.vocab_size, (30,), generator=torch.Generator().manual_seed(2))
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    steps = [(ids[:24], AttnMeta.causal(0, 24)),
             (ids[24:27], AttnMeta.tree(24, 3, torch.arange(24, 27), torch.tensor([24, 25, 25]), mask)),
             (ids[27:28], AttnMeta.causal(25, 1))]
    caches = [new_cache(m, 40) for m in (fp8, plain, deq)]
    for tokens, meta in steps:
        q8, full, want = (m(tokens, meta, c, attn) for m, c in zip((fp8, plain, deq), caches))
        assert_close(q8, want, torch.float32, reduction=forward_terms(shape, 28),
                     what=f"{preset}: fp8 step of {len(tokens)} rows")
        assert (q8 - full).abs().max().item() > 1e-3  # the fp8 weights were used: not the unquantized model
    k8, _ = caches[0].layer(1)
    kd, _ = caches[2].layer(1)
    assert_close(k8[:26], kd[:26], torch.float32, reduction=forward_terms(shape, 28), what="layer 1 keys")
    fp8.use_fused_kernels(skinny=True)
    assert fp8.weight_bits == 16 and all(layer.attn.wo_q8 is None and layer.mlp.w13_q8 is None for layer in fp8.layers)


def test_fp8_weights_in_a_bf16_model_feed_their_gemms_fp16(monkeypatch):
    """In a bf16 model the norms before the fp8 QKV and SwiGLU GEMMs write fp16, the attention its output (the o
    projection's input) and the SwiGLU its output (the down projection's input); the QKV output, the residual and the
    LM head's input stay bf16. The logits stay those of the dequantized bf16 model up to the inputs' rounding."""
    pytest.importorskip("kernels")
    import kernels

    shape = MODEL_PRESETS["tiny-llama"]
    fp8, deq = (build_model(shape, torch.bfloat16, "cpu", seed=9) for _ in range(2))
    fp8.use_fused_kernels(skinny=True, weight_bits=8)
    deq.use_fused_kernels(skinny=True)
    for lq, ld in zip(fp8.layers, deq.layers):
        for copy, linear in ((lq.attn.wqkv_q8, ld.attn.wqkv), (lq.attn.wo_q8, ld.attn.wo), (lq.mlp.w13_q8, ld.mlp.w13),
                             (lq.mlp.w2_q8, ld.mlp.w2)):
            linear.weight.data.copy_(copy.q.float() * copy.scale[:, None])
    seen: dict[str, list] = {"skinny_linear": [], "skinny_linear_partials": [], "swiglu": []}
    for name in seen:
        real = getattr(kernels, name)

        def spy(x, *args, _real=real, _name=name, **kw):
            out = _real(x, *args, **kw)
            seen[_name].append((x.dtype, out.dtype))
            return out
        monkeypatch.setattr(kernels, name, spy)
    attn = make_attention_backend("triton")
    ids = torch.randint(0, shape.vocab_size, (8,), generator=torch.Generator().manual_seed(2))
    q8 = fp8(ids, AttnMeta.causal(0, 8), new_cache(fp8, 16), attn)
    n = shape.num_layers
    assert seen["skinny_linear"] == [(torch.float16, torch.bfloat16)] * n + [(torch.bfloat16, torch.float32)]
    assert seen["swiglu"] == [(torch.float16, torch.float16)] * n
    assert [x for x, _ in seen["skinny_linear_partials"]] == [torch.float16, torch.float16] * n  # o, down
    want = deq(ids, AttnMeta.causal(0, 8), new_cache(deq, 16), attn)
    assert (q8 - want).abs().max().item() <= 0.05 * want.abs().max().item()


def test_fp8_weights_under_tp_hooks_keep_o_and_down_at_16_bits():
    """With forward hooks on the attention and MLP (the TP transform's all-reduces) the o and down projections run on
    torch with the 16-bit weights; QKV and gate / up still stream their fp8 copies (what simulator.cost_model's
    matrix_bytes prices for a TP shard)."""
    pytest.importorskip("kernels")
    shape = MODEL_PRESETS["tiny-llama"]
    fp8, deq = (build_model(shape, torch.float32, "cpu", seed=9) for _ in range(2))
    fp8.use_fused_kernels(skinny=True, weight_bits=8)
    deq.use_fused_kernels(skinny=True)
    for lq, ld in zip(fp8.layers, deq.layers):  # only the column-parallel projections dequantized
        ld.attn.wqkv.weight.data.copy_(lq.attn.wqkv_q8.q.float() * lq.attn.wqkv_q8.scale[:, None])
        ld.mlp.w13.weight.data.copy_(lq.mlp.w13_q8.q.float() * lq.mlp.w13_q8.scale[:, None])
    for model in (fp8, deq):
        for layer in model.layers:
            layer.attn.register_forward_hook(lambda _m, _a, out: out)
            layer.mlp.register_forward_hook(lambda _m, _a, out: out)
    attn = make_attention_backend("triton")
    ids = torch.randint(0, shape.vocab_size, (6,), generator=torch.Generator().manual_seed(4))
    q8 = fp8(ids, AttnMeta.causal(0, 6), new_cache(fp8, 8), attn)
    want = deq(ids, AttnMeta.causal(0, 6), new_cache(deq, 8), attn)
    assert_close(q8, want, torch.float32, reduction=forward_terms(shape, 6), what="fp8 under hooks")


def test_fp8_weights_need_the_skinny_kernels_and_refuse_other_widths():
    plain = build_model(MODEL_PRESETS["tiny-llama"], torch.float32, "cpu", seed=6)
    with pytest.raises(ValueError, match="weight_bits=8 needs skinny"):
        plain.use_fused_kernels(weight_bits=8)
    with pytest.raises(ValueError, match=r"weight_bits must be one of \(16, 8\) \(4: simulator only\), got 4"):
        plain.use_fused_kernels(skinny=True, weight_bits=4)
    with pytest.raises(ValueError, match="the fused QKV \\+ RoPE GEMM has no fp8 path"):
        plain.use_fused_kernels(skinny=True, qkv_rope=True, weight_bits=8)
