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
    """Our inverse frequencies (Llama 3.1 scaling included) equal transformers' (to float32 rounding: another
    implementation of the same formula)."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    shape = MODEL_PRESETS[preset]
    hf = LlamaRotaryEmbedding(hf_config(shape)).inv_freq
    assert_close(rope_inv_freq(shape), hf, torch.float32, reduction=1, what=preset)
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
    with pytest.raises(ValueError, match="attention backend: unknown"):
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
    with pytest.raises(ValueError, match=r"trace.graph_events: .*kernels=graphs \(without cuda_graphs in"):
        check_runtime_support(dataclasses.replace(cfg, trace=TraceConfig(graph_events=True)))
