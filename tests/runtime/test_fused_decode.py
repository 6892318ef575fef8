"""The fused Triton decode path (runtime/fused_decode.py) against the plain forward (Triton's interpreter on CPU):
every kernel plan, fp8 weights, the sharded path (on a one-rank gloo group; tests/runtime/test_tp.py runs it on real
TP groups), and how a role's plan is chosen."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from conf.presets import MODEL_PRESETS
from runtime.attention import AttnMeta, make_attention_backend
from runtime.fused_decode import FusedDecoder, KernelPlan, decode_model
from runtime.loader import build_model
from tests.runtime import new_cache
from tests.tolerances import assert_close, forward_terms

pytest.importorskip("kernels")

TREE_MASK = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]],
                         dtype=torch.bool)
"""A 5-node tree, parents [-1, 0, 0, 1, 2]: its ancestor mask (depths 0, 1, 1, 2, 2)."""


@pytest.fixture
def one_rank_group() -> dist.ProcessGroup:
    """A gloo group of this process alone: the sharded path's kernels and all-reduces on a whole model."""
    return dist.ProcessGroupGloo(dist.HashStore(), 0, 1)


def _count(monkeypatch, calls: dict[str, int], names: tuple[str, ...]) -> None:
    """Wrap the kernels package's entry points `names` so each call counts in `calls[name]`."""
    import kernels

    for name in names:
        real = getattr(kernels, name)

        def counted(*args, _name=name, _real=real, **kw):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args, **kw)

        monkeypatch.setattr(kernels, name, counted)


@pytest.mark.parametrize("preset,skinny,sharded", [("tiny-llama", False, False), ("tiny-qwen2", False, False),
                                                   ("tiny-llama-draft", False, False), ("tiny-llama", True, False),
                                                   ("tiny-qwen2", True, False), ("tiny-llama", True, True)])
def test_fused_path_matches_the_plain_forward(preset, skinny, sharded, monkeypatch, one_rank_group):
    """The fused path (add + RMSNorm, RoPE + KV write, SwiGLU) computes the plain forward's logits and cache in fp32:
    a prefill, then a tree step, then a single-token step.

    `skinny`: every step (<= 64 rows) projects by the skinny GEMM, o and down as split-K partials summed in the
    norms; qwen2's QKV bias keeps its QKV on torch. `sharded` (a TP group given): o and down are torch GEMMs whose
    outputs are all-reduced, and the LM head is torch."""
    import runtime.fused_decode

    shape = MODEL_PRESETS[preset]
    plain = build_model(shape, torch.float32, "cpu", seed=9)
    fused = FusedDecoder(build_model(shape, torch.float32, "cpu", seed=9), KernelPlan(skinny=skinny),
                         tp_group=one_rank_group if sharded else None)
    calls: dict[str, int] = {}
    _count(monkeypatch, calls, ("add_rmsnorm_partials", "skinny_linear"))
    real_reduce = runtime.fused_decode.all_reduce_partial
    monkeypatch.setattr(runtime.fused_decode, "all_reduce_partial",
                        lambda x, group: calls.update(reduce=calls.get("reduce", 0) + 1) or real_reduce(x, group))
    attn = make_attention_backend("triton")
    ids = torch.randint(0, shape.vocab_size, (30,), generator=torch.Generator().manual_seed(2))
    depth = torch.tensor([0, 1, 1, 2, 2])
    steps = [(ids[:24], AttnMeta.causal(0, 24)),
             (ids[24:29], AttnMeta.tree(24, 5, torch.arange(24, 29), 24 + depth, TREE_MASK)),
             (ids[29:], AttnMeta.causal(26, 1))]
    caches = [new_cache(m, 40) for m in (plain, fused)]
    for tokens, meta in steps:
        want, got = (m(tokens, meta, c, attn) for m, c in zip((plain, fused), caches))
        assert_close(got, want, torch.float32, reduction=forward_terms(shape, 29),
                     what=f"{preset}: fused path at {len(tokens)} rows")
    assert_close(caches[1].kv[:, :, :29], caches[0].kv[:, :, :29], torch.float32, reduction=forward_terms(shape, 29),
                 what=f"{preset}: caches")
    assert calls.get("add_rmsnorm_partials", 0) == (2 * 3 * shape.num_layers if skinny and not sharded else 0)
    # per step: every layer's QKV (not with qwen2's bias) and, whole, the LM head
    qkv = 0 if shape.qkv_bias else shape.num_layers
    assert calls.get("skinny_linear", 0) == (3 * (qkv + (not sharded)) if skinny else 0)
    assert calls.get("reduce", 0) == (2 * 3 * shape.num_layers if sharded else 0)


def test_skinny_path_leaves_long_prefills_to_torch_gemms(monkeypatch):
    """kernels.skinny serves steps of <= SKINNY_MAX_ROWS rows: a 70-row prefill takes the fused path's torch
    GEMMs (no skinny launch) and equals the plain forward."""
    import kernels
    from runtime.fused_decode import SKINNY_MAX_ROWS

    shape = MODEL_PRESETS["tiny-llama"]
    plain = build_model(shape, torch.float32, "cpu", seed=4)
    skinny = FusedDecoder(build_model(shape, torch.float32, "cpu", seed=4), KernelPlan(skinny=True))
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


def fused_plan_matches_the_plain_forward(monkeypatch, kernel: str, steps, cache_slots: int,
                                         rope_max_tokens: int | None = None, **plan) -> list:
    """tiny-llama fp32, the plain forward against `FusedDecoder(KernelPlan(skinny=True, **plan))` over `steps` ((token
    ids, AttnMeta) pairs, one shared cache each) with the Triton attention backend (its `rope_max_tokens` overridden
    when given): logits and the caches' first `cache_slots` slots to float32 rounding (tests/tolerances.py). Returns
    the first dimension of the first argument of every `kernels.<kernel>` call."""
    import kernels

    shape = MODEL_PRESETS["tiny-llama"]
    plain = build_model(shape, torch.float32, "cpu", seed=6)
    fused = FusedDecoder(build_model(shape, torch.float32, "cpu", seed=6), KernelPlan(skinny=True, **plan))
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


def test_qkv_rope_matches_the_plain_forward(monkeypatch):
    """KernelPlan(skinny=True, qkv_rope=True): every step's QKV GEMM does RoPE + the KV write itself
    (kernels.qkv_rope_kv_write, one launch per layer) and the logits and cache equal the plain forward's."""
    shape = MODEL_PRESETS["tiny-llama"]
    ids = torch.randint(0, shape.vocab_size, (20,), generator=torch.Generator().manual_seed(3))
    steps = ((ids[:16], AttnMeta.causal(0, 16)), (ids[16:], AttnMeta.causal(16, 4)))
    calls = fused_plan_matches_the_plain_forward(monkeypatch, "qkv_rope_kv_write", steps, 20, qkv_rope=True)
    assert calls == [16] * shape.num_layers + [4] * shape.num_layers


@pytest.mark.parametrize("max_tokens", [None, 64], ids=["runtime-limit", "kernel-limit"])
def test_rope_attention_matches_the_plain_forward(max_tokens, monkeypatch):
    """KernelPlan(skinny=True, rope_attention=True): a decode step of up to the backend's rope_max_tokens tokens (the
    runtime's: single-token steps; kernel-limit: up to ROPE_MAX_TOKENS) rotates q and writes the new K/V inside its
    attention launch (kernels.rope_tree_attention, one launch fewer per layer); longer steps and a prefill keep the
    separate RoPE kernel; the logits and cache equal the plain forward's. The reference attention backend
    (rope_max_tokens 0) keeps the separate kernel too."""
    from kernels.tree_attention import ROPE_MAX_TOKENS

    shape = MODEL_PRESETS["tiny-llama"]
    n = ROPE_MAX_TOKENS + 4
    ids = torch.randint(0, shape.vocab_size, (n + 10,), generator=torch.Generator().manual_seed(3))
    assert make_attention_backend("triton").rope_max_tokens == 1
    tree = AttnMeta.tree(n + 5, 5, torch.arange(n + 5, n + 10), n + 5 + torch.tensor([0, 1, 1, 2, 2]), TREE_MASK)
    steps = ((ids[:n], AttnMeta.causal(0, n)), (ids[n:n + 1], AttnMeta.causal(n, 1)),
             (ids[n + 1:n + 5], AttnMeta.causal(n + 1, 4)), (ids[n + 5:], tree))
    calls = fused_plan_matches_the_plain_forward(monkeypatch, "rope_tree_attention", steps, n + 10, max_tokens,
                                                 rope_attention=True)
    fused_steps = [1] if max_tokens is None else [1, 4, 5]  # never the prefill (T > ROPE_MAX_TOKENS)
    assert calls == [t for t in fused_steps for _ in range(shape.num_layers)]
    calls.clear()  # kernels.rope_tree_attention is still the counting stand-in
    fused = FusedDecoder(build_model(shape, torch.float32, "cpu", seed=6), KernelPlan(skinny=True, rope_attention=True))
    fused(ids[:1], AttnMeta.causal(0, 1), new_cache(fused, 8), make_attention_backend("reference"))
    assert calls == []


def test_for_role_gives_the_fused_qkv_rope_gemm_to_an_unbiased_target_only():
    """kernels.target_qkv_rope: the target's QKV GEMM does RoPE + the KV write in place of the fused RoPE attention;
    a draft, a target with a QKV bias (Qwen2: the fused GEMM has no bias term), one without skinny GEMMs or one with
    fp8 weights (that GEMM has no fp8 path) keeps rope_attention."""
    llama, qwen = MODEL_PRESETS["tiny-llama"], MODEL_PRESETS["tiny-qwen2"]
    assert qwen.qkv_bias and not llama.qkv_bias
    on = dict(skinny=True, rope_attention=True, target_qkv_rope=True)
    assert KernelPlan.for_role(llama, **on, target=True) == KernelPlan(skinny=True, qkv_rope=True)
    keep = KernelPlan(skinny=True, rope_attention=True)
    assert KernelPlan.for_role(llama, **on, target=False) == keep
    assert KernelPlan.for_role(qwen, **on, target=True) == keep
    assert KernelPlan.for_role(llama, **{**on, "target_qkv_rope": False}, target=True) == keep
    assert KernelPlan.for_role(llama, **{**on, "skinny": False}, target=True) == KernelPlan(rope_attention=True)
    assert KernelPlan.for_role(llama, **on, target=True, weight_bits=8) == KernelPlan(True, False, True, 8)


def test_decode_model_gives_the_plain_model_or_the_roles_fused_path(one_rank_group):
    """kernels=reference: the plain model itself; graphs: a FusedDecoder with the role's plan. A TP shard without its
    group is refused (its all-reduces would be missing)."""
    from conf.kernels_config import KernelsConfig
    from runtime.tp import VocabParallelEmbedding

    model = build_model(MODEL_PRESETS["tiny-llama"], torch.float32, "cpu", seed=1)
    assert decode_model(model, KernelsConfig(preset="reference").features, target=True) is model
    kcfg = KernelsConfig(preset="graphs").features
    target, draft = (decode_model(model, kcfg, target=t) for t in (True, False))
    assert target.model is model and target.plan == KernelPlan(skinny=True, qkv_rope=True) and not target.sharded
    assert draft.plan == KernelPlan(skinny=True, rope_attention=True)
    assert (target.shape, target.dtype, target.device, target.cache_spec()) == (
        model.shape, model.dtype, model.device, model.cache_spec())
    model.embed = VocabParallelEmbedding(model.embed.weight, 0, one_rank_group)
    with pytest.raises(ValueError, match="the model is a TP shard .*pass the group it was sharded over as tp_group"):
        FusedDecoder(model)
    assert FusedDecoder(model, tp_group=one_rank_group).sharded


def _dequantize(decoder: FusedDecoder, into, names=("wqkv", "wo", "w13", "w2")) -> None:
    """In place: `into`'s projections `names` := `decoder`'s fp8 copies, dequantized (a biased QKV has none)."""
    for copies, layer in zip(decoder.fp8, into.layers):
        for name in names:
            copy = getattr(copies, name)
            linear = getattr(layer.attn if name in ("wqkv", "wo") else layer.mlp, name)
            if copy is None:
                assert name == "wqkv" and linear.bias is not None  # a biased QKV stays on torch at 16 bits
                continue
            assert copy.q.dtype == torch.float8_e4m3fn
            linear.weight.data.copy_(copy.q.float() * copy.scale[:, None])


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen2"])
def test_fp8_weights_compute_the_dequantized_models_decode_steps(preset):
    """KernelPlan(skinny=True, weight_bits=8): every step of <= 64 rows streams the fp8 copies (one scale per output
    row) of QKV (not Qwen2's biased one), o, gate / up and down, so its logits and cache equal those of the same model
    with those weights replaced by their dequantized values (16 bits), and differ from the unquantized model's; the
    LM head and embedding stay, and so do the wrapped model's 16-bit weights."""
    shape = MODEL_PRESETS[preset]
    fp8 = FusedDecoder(build_model(shape, torch.float32, "cpu", seed=9), KernelPlan(skinny=True, weight_bits=8))
    plain, deq = (FusedDecoder(build_model(shape, torch.float32, "cpu", seed=9), KernelPlan(skinny=True))
                  for _ in range(2))
    assert plain.fp8 is None
    _dequantize(fp8, deq.model)
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
    assert all(torch.equal(a.weight, b.weight) for a, b in zip(fp8.model.modules(), plain.model.modules())
               if isinstance(a, torch.nn.Linear))


def test_fp8_weights_in_a_bf16_model_feed_their_gemms_fp16(monkeypatch):
    """In a bf16 model the norms before the fp8 QKV and SwiGLU GEMMs write fp16, the attention its output (the o
    projection's input) and the SwiGLU its output (the down projection's input); the QKV output, the residual and the
    LM head's input stay bf16. The logits stay those of the dequantized bf16 model up to the inputs' rounding."""
    import kernels

    shape = MODEL_PRESETS["tiny-llama"]
    fp8 = FusedDecoder(build_model(shape, torch.bfloat16, "cpu", seed=9), KernelPlan(skinny=True, weight_bits=8))
    deq = FusedDecoder(build_model(shape, torch.bfloat16, "cpu", seed=9), KernelPlan(skinny=True))
    _dequantize(fp8, deq.model)
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


def test_fp8_weights_of_a_shard_keep_o_and_down_at_16_bits(one_rank_group):
    """On a TP shard (a group given) the o and down projections run on torch with the 16-bit weights, all-reduced;
    QKV and gate / up still stream their fp8 copies (what simulator.cost_model's matrix_bytes prices for a shard)."""
    shape = MODEL_PRESETS["tiny-llama"]
    fp8 = FusedDecoder(build_model(shape, torch.float32, "cpu", seed=9), KernelPlan(skinny=True, weight_bits=8),
                       tp_group=one_rank_group)
    deq = FusedDecoder(build_model(shape, torch.float32, "cpu", seed=9), KernelPlan(skinny=True),
                       tp_group=one_rank_group)
    _dequantize(fp8, deq.model, names=("wqkv", "w13"))  # only the column-parallel projections
    attn = make_attention_backend("triton")
    ids = torch.randint(0, shape.vocab_size, (6,), generator=torch.Generator().manual_seed(4))
    q8 = fp8(ids, AttnMeta.causal(0, 6), new_cache(fp8, 8), attn)
    want = deq(ids, AttnMeta.causal(0, 6), new_cache(deq, 8), attn)
    assert_close(q8, want, torch.float32, reduction=forward_terms(shape, 6), what="fp8 on a shard")


@pytest.mark.parametrize("plan,match", [
    (dict(qkv_rope=True), "qkv_rope needs skinny"),
    (dict(skinny=True, qkv_rope=True, rope_attention=True), "pick one"),
    (dict(weight_bits=8), "weight_bits=8 needs skinny"),
    (dict(skinny=True, weight_bits=4), r"weight_bits must be one of \(16, 8\) \(4: simulator only\), got 4"),
    (dict(skinny=True, qkv_rope=True, weight_bits=8), r"the fused QKV \+ RoPE GEMM has no fp8 path")])
def test_kernel_plans_the_fused_path_lacks_are_refused(plan, match):
    """A plan the fused path does not implement fails at construction, naming what is missing."""
    with pytest.raises(ValueError, match=match):
        KernelPlan(**plan)


@pytest.mark.parametrize("skinny", [False, True], ids=["torch_gemms", "skinny"])
def test_a_plans_norm_row_limits_reach_every_norm_launch(monkeypatch, skinny):
    """KernelPlan.early_norm_rows goes to every norm launch (plain and partials) as `early_rows`; None leaves the
    kernels' tuned kernels.norm.EARLY_ROWS (no keyword)."""
    import kernels
    from kernels.norm import EARLY_ROWS

    seen: list = []
    for name in ("add_rmsnorm", "add_rmsnorm_partials"):
        real = getattr(kernels, name)

        def spy(*args, _real=real, **kw):
            seen.append(kw.get("early_rows"))
            return _real(*args, **kw)

        monkeypatch.setattr(kernels, name, spy)
    model = build_model(MODEL_PRESETS["tiny-llama"], torch.float32, "cpu", seed=1)
    ids, attn = torch.arange(3), make_attention_backend("triton")
    rows = EARLY_ROWS._replace(tiny=1)
    for early_norm_rows, want in ((None, None), (tuple(rows), rows)):
        seen.clear()
        dec = FusedDecoder(model, KernelPlan(skinny=skinny, early_norm_rows=early_norm_rows))
        dec(ids, AttnMeta.causal(0, 3), new_cache(dec, 8), attn)
        assert len(seen) == 1 + 2 * model.shape.num_layers and all(r == want for r in seen)
