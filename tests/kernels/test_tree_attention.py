"""tree_attention vs the dense reference and vs the branch-as-chain oracle (Triton interpreter on CPU)."""

from __future__ import annotations

import math

import pytest
import torch

from kernels import tree_attention
from kernels.reference import tree_attention_ref
from tests.conftest import pairwise
from tests.kernels.trees import ancestor_mask, build, root_path
from tests.tolerances import assert_bitwise, assert_close, poisoned

BLOCK_N = 16  # small key block in tests so the prefix sweep crosses block edges cheaply
HKV = 2
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


def _inputs(t, hq, hkv, d, cap, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(t, hq, d, generator=g).to(dtype)
    k = torch.randn(cap, hkv, d, generator=g).to(dtype)
    v = torch.randn(cap, hkv, d, generator=g).to(dtype)
    return q, k, v


def _run(q, k, v, prefix, mask, **kw):
    out = poisoned(q.shape, q.dtype)
    res = tree_attention(q, k, v, prefix, mask, 1.0 / math.sqrt(q.shape[-1]), out=out, **kw)
    assert res is out
    return out


def _terms(q, k):
    """Terms summed into one output element along its longest chain: a head_dim dot product per score, then up to
    cap keys in the softmax and the weighted sum of values (tests/tolerances.py)."""
    return q.shape[-1] + k.shape[0]


TREES = [("single", 1), ("chain", 5), ("star", 7), ("random", 13)]
PREFIXES = [0, 1, BLOCK_N - 1, BLOCK_N, BLOCK_N + 1, 3 * BLOCK_N + 5]


DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _case_id(value) -> str:
    """Test ids of the pairwise grids below."""
    if isinstance(value, tuple):
        return f"{value[0]}{value[1]}"
    return DTYPE_NAMES.get(value, str(value))


# Every pair of (prefix, tree, GQA group, dtype, splits) values, not their whole product (tests/conftest.py
# `pairwise`): 24 of 288 cases.
@pytest.mark.parametrize("prefix,tree,group,dtype,splits",
                         pairwise(prefix=PREFIXES, tree=TREES, group=[1, 4, 8], dtype=list(DTYPES.values()),
                                  splits=[1, 3]), ids=_case_id)
def test_matches_reference(prefix, tree, group, dtype, splits):
    parent = build(tree[0], tree[1], seed=prefix)
    n = len(parent)
    mask = ancestor_mask(parent)
    q, k, v = _inputs(n, HKV * group, HKV, 32, prefix + n + 3, dtype, seed=prefix * 7 + n)
    out = _run(q, k, v, prefix, mask, num_splits=splits, block_n=BLOCK_N)
    ref = tree_attention_ref(q, k, v, prefix, mask, 1.0 / math.sqrt(32))
    assert_close(out, ref, dtype, reduction=_terms(q, k),
                 what=f"prefix={prefix} tree={tree} gqa={group} splits={splits}")


def _chain_oracle(q, k, v, prefix, parent, node, query_row):
    """Plain attention of one query over the prefix plus its root-to-node path, in float64."""
    keys = list(range(prefix)) + [prefix + j for j in root_path(parent, node)]
    group = q.shape[1] // k.shape[1]
    kk = k[keys].double().repeat_interleave(group, dim=1)  # [S, Hq, D]
    vv = v[keys].double().repeat_interleave(group, dim=1)
    s = torch.einsum("hd,shd->hs", q[query_row].double(), kk) / math.sqrt(q.shape[-1])
    return torch.einsum("hs,shd->hd", torch.softmax(s, dim=-1), vv)


CHAIN_TREES = [("single", 1), ("chain", 9), ("star", 12), ("binary", 31), ("random", 40), ("random", 64)]


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("prefix", [0, 21], ids=lambda p: f"prefix{p}")
@pytest.mark.parametrize("tree", CHAIN_TREES, ids=[f"{k}{n}" for k, n in CHAIN_TREES])
def test_branch_as_chain(tree, prefix, dtype):
    """Each node's output equals ordinary attention over the prefix plus its own root-to-node path."""
    parent = build(tree[0], tree[1], seed=3)
    n = len(parent)
    q, k, v = _inputs(n, 8, HKV, 16, prefix + n, dtype, seed=n)
    out = _run(q, k, v, prefix, ancestor_mask(parent), num_splits=2, block_n=BLOCK_N)
    oracle = torch.stack([_chain_oracle(q, k, v, prefix, parent, i, i) for i in range(n)])
    assert_close(out, oracle.to(dtype), dtype, reduction=_terms(q, k), what=f"tree={tree} prefix={prefix}")


@pytest.mark.parametrize("splits", [1, 4], ids=lambda s: f"splits{s}")
@pytest.mark.parametrize("width", [1, 4, 9], ids=lambda w: f"w{w}")
def test_non_square_expansion_mask(width, splits):
    """Draft expansion: w leaf queries over an n-node tree (a (w, n) mask), each sees only its ancestors."""
    parent = build("random", 20, seed=width)
    n = len(parent)
    leaves = [i for i in range(n) if i not in parent][:width]
    prefix = 19
    mask = ancestor_mask(parent)[leaves]  # [w, n]
    q, k, v = _inputs(len(leaves), 8, HKV, 32, prefix + n, torch.float32, seed=width)
    out = _run(q, k, v, prefix, mask, num_splits=splits, block_n=BLOCK_N)
    oracle = torch.stack([_chain_oracle(q, k, v, prefix, parent, leaf, r) for r, leaf in enumerate(leaves)])
    assert_close(out, oracle.float(), torch.float32, reduction=_terms(q, k), what=f"w={width}")
    assert_close(out, tree_attention_ref(q, k, v, prefix, mask, 1 / math.sqrt(32)), torch.float32,
                 reduction=_terms(q, k), what="vs ref")


@pytest.mark.parametrize("head_dim", [16, 32, 64, 128], ids=lambda d: f"d{d}")
def test_head_dims(head_dim):
    parent = build("random", 10, seed=head_dim)
    q, k, v = _inputs(10, 8, HKV, head_dim, 60, torch.float16, seed=head_dim)
    mask = ancestor_mask(parent)
    out = _run(q, k, v, 45, mask, num_splits=2)
    assert_close(out, tree_attention_ref(q, k, v, 45, mask, 1 / math.sqrt(head_dim)), torch.float16,
                 reduction=_terms(q, k), what=f"D={head_dim}")


@pytest.mark.parametrize("prefix", [63, 64, 65, 200], ids=lambda p: f"prefix{p}")
def test_default_blocks_and_heuristic_splits(prefix):
    """Default block sizes (BLOCK_N=64) around the block edge, with the wrapper's own split choice."""
    parent = build("binary", 15)
    mask = ancestor_mask(parent)
    q, k, v = _inputs(15, 16, 4, 64, prefix + 15, torch.float32, seed=prefix)
    out = _run(q, k, v, prefix, mask)
    assert_close(out, tree_attention_ref(q, k, v, prefix, mask, 1 / 8), torch.float32, reduction=_terms(q, k),
                 what=f"prefix={prefix}")


@pytest.mark.parametrize("prefix", [0, 5, 40], ids=lambda p: f"prefix{p}")
def test_prefix_as_device_tensor(prefix):
    """CUDA-graph mode: prefix_len read on device, grid sized from cap (here 3x the used slots)."""
    parent = build("random", 11, seed=prefix)
    mask = ancestor_mask(parent)
    q, k, v = _inputs(11, 8, HKV, 32, 3 * (prefix + 11) + 16, torch.float32, seed=prefix)
    out = _run(q, k, v, torch.tensor([prefix]), mask, num_splits=4, block_n=BLOCK_N)
    assert_close(out, tree_attention_ref(q, k, v, prefix, mask, 1 / math.sqrt(32)), torch.float32,
                 reduction=_terms(q, k), what="tensor prefix")


def test_strided_query_view_and_repeat_calls():
    """q as a view into a fused qkv tensor; two calls with split-KV give the same answer (counters reset)."""
    g = torch.Generator().manual_seed(5)
    qkv = torch.randn(6, 8 + 2 * HKV, 32, generator=g)
    q = qkv[:, :8]
    k = torch.randn(40, HKV, 32, generator=g)
    v = torch.randn(40, HKV, 32, generator=g)
    mask = ancestor_mask(build("chain", 6))
    first = _run(q, k, v, 30, mask, num_splits=3, block_n=BLOCK_N)
    second = _run(q, k, v, 30, mask, num_splits=3, block_n=BLOCK_N)
    assert_close(first, tree_attention_ref(q, k, v, 30, mask, 1 / math.sqrt(32)), torch.float32,
                 reduction=_terms(q, k), what="view")
    assert_bitwise(second, first, reason="the same kernel on the same inputs, run twice: determinism")


def test_row_without_visible_keys_is_zero():
    """A padding row (empty mask row, empty prefix) outputs zeros instead of NaN."""
    q, k, v = _inputs(3, 4, HKV, 16, 8, torch.float32, seed=1)
    mask = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    out = _run(q, k, v, 0, mask, num_splits=1)
    assert bool((out[1] == 0).all()), "a row with no visible key must be written as zeros"
    assert_close(out, tree_attention_ref(q, k, v, 0, mask, 0.25), torch.float32, reduction=_terms(q, k),
                 what="padding row")


def test_rejects_bad_shapes():
    q, k, v = _inputs(3, 6, 4, 16, 8, torch.float32, seed=0)
    with pytest.raises(ValueError, match="multiple"):
        tree_attention(q, k, v, 0, torch.ones(3, 3, dtype=torch.bool), 0.25)
    q, k, v = _inputs(3, 8, 4, 16, 8, torch.float32, seed=0)
    with pytest.raises(ValueError, match="exceeds cap"):
        tree_attention(q, k, v, 6, torch.ones(3, 3, dtype=torch.bool), 0.25)


@pytest.mark.parametrize("prefix", [0, BLOCK_N + 1, 3 * BLOCK_N + 5], ids=lambda p: f"prefix{p}")
def test_many_splits_few_blocks_merge_only_the_used_ones(prefix):
    """8 splits over at most 4 prefix blocks (as a CUDA-graph launch sized from a large cache): the combine
    reads the splits that own blocks plus the last one (tree keys) and skips the empty ones."""
    parent = build("random", 9, seed=prefix + 1)
    mask = ancestor_mask(parent)
    q, k, v = _inputs(9, 8, HKV, 32, prefix + 9 + 8 * BLOCK_N, torch.float32, seed=prefix + 2)
    for p in (prefix, torch.tensor([prefix])):
        for min_blocks in (1, 3):  # 3: at most 2 splits own prefix blocks, the rest stay empty
            out = _run(q, k, v, p, mask, num_splits=8, block_n=BLOCK_N, min_blocks_per_split=min_blocks)
            assert_close(out, tree_attention_ref(q, k, v, prefix, mask, 1 / math.sqrt(32)), torch.float32,
                         reduction=_terms(q, k), what=f"8 splits, >= {min_blocks} blocks each")


@pytest.mark.parametrize("splits,min_blocks", [(1, 1), (3, 1), (8, 1), (3, 2)], ids=lambda x: str(x))
@pytest.mark.parametrize("prefix", [0, BLOCK_N - 1, BLOCK_N + 1, 3 * BLOCK_N + 5], ids=lambda p: f"prefix{p}")
def test_prefix_ready_prefetch_gives_the_plain_result(prefix, splits, min_blocks):
    """prefix_ready (the first prefix block loaded before the PDL wait, then blocks lo+1.. in the loop) gives the
    plain launch's output (to rounding: another specialisation of the kernel), with splits that own no block (8
    splits), one block, or several (min_blocks 2), and a prefix of 0 (every prefetched key masked off)."""
    parent = build("random", 7, seed=prefix + splits)
    mask = ancestor_mask(parent)
    q, k, v = _inputs(7, 8, HKV, 32, prefix + 7 + 8 * BLOCK_N, torch.float16, seed=prefix + 3)
    kw = {"num_splits": splits, "block_n": BLOCK_N, "min_blocks_per_split": min_blocks}
    for p in (prefix, torch.tensor([prefix])):
        plain = _run(q, k, v, p, mask, **kw)
        ready = _run(q, k, v, p, mask, prefix_ready=True, **kw)
        assert_close(ready, plain, torch.float16, reduction=_terms(q, k), what=f"prefix_ready vs plain, prefix {p}")
    assert_close(ready, tree_attention_ref(q, k, v, prefix, mask, 1 / math.sqrt(32)), torch.float16,
                 reduction=_terms(q, k), what="vs reference")


def _rope_operands(t, hq, hkv, d, cap, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(t, (hq + 2 * hkv) * d, generator=g).to(dtype)
    k = torch.randn(cap, hkv, d, generator=g).to(dtype)
    v = torch.randn(cap, hkv, d, generator=g).to(dtype)
    positions = torch.randint(0, 4000, (t,), generator=g)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    return qkv, k, v, positions, inv_freq


ROPE_TUNES = {"one-split": {}, "3-splits-16-keys": {"num_splits": 3, "block_n": BLOCK_N}}


# Every pair of (case, dtype, GQA group, tune) values: 10 of 36 cases (tests/conftest.py `pairwise`).
@pytest.mark.parametrize("case,dtype,group,tune",
                         pairwise(case=["verify", "expansion", "two_row_blocks"],
                                  dtype=[torch.float32, torch.float16, torch.bfloat16], group=[4, 3],
                                  tune=list(ROPE_TUNES)), ids=_case_id)
def test_rope_tree_attention_equals_rope_kv_write_then_attention(case, dtype, group, tune):
    """kernels.rope_tree_attention = kernels.rope_kv_write followed by tree_attention: the same q (rotated in
    registers, rounded to qkv's dtype), the same cache contents, the same output (to rounding: other kernels); and
    both equal the reference.
    verify: a square tree at prefix + 0..T-1; expansion: w rows written at scattered tree slots of a longer
    region (the draft); two_row_blocks: 22 tokens x GQA 4 (or 3) = 88 (66) query rows, two row blocks of 64 that
    each write the new keys of their kv head before reading them; GQA 3: a group that is not a power of two.
    3-splits-16-keys: the split path (partials, the last split's merge) and tree regions longer than one key
    block."""
    from kernels import rope_kv_write, rope_tree_attention
    from kernels.reference import rope_kv_write_ref

    hkv, d, prefix = 2, 32, 3 * BLOCK_N + 5
    hq = group * hkv
    if case == "verify":
        t, tree_len = 9, 9
        mask = ancestor_mask(build("random", 9, seed=1))
        slots = prefix + torch.arange(9)
    elif case == "expansion":
        t, tree_len = 4, 13
        full = ancestor_mask(build("random", 13, seed=2))
        rows = torch.tensor([3, 7, 11, 12])
        mask = full[rows]
        slots = prefix + rows
    else:
        t, tree_len = 22, 22
        mask = ancestor_mask(build("random", 22, seed=3))
        slots = prefix + torch.randperm(22, generator=torch.Generator().manual_seed(5))
    cap = prefix + tree_len + 2 * BLOCK_N
    qkv, k, v, positions, inv_freq = _rope_operands(t, hq, hkv, d, cap, dtype, seed=7)
    scale = 1 / math.sqrt(d)
    k_sep, v_sep, k_fused, v_fused = k.clone(), v.clone(), k.clone(), v.clone()
    q = rope_kv_write(qkv, positions, inv_freq, k_sep, v_sep, slots, hq, hkv)
    tune = ROPE_TUNES[tune]
    want = tree_attention(q, k_sep, v_sep, torch.tensor([prefix]), mask, scale, **tune)
    got = rope_tree_attention(qkv, positions, inv_freq, k_fused, v_fused, slots, hq, torch.tensor([prefix]), mask,
                              scale, out=poisoned((t, hq, d), dtype), **tune)
    _same_attention_and_cache((got, k_fused, v_fused), (want, k_sep, v_sep), dtype, q, k, "fused vs separate")
    # prefix_ready (first prefix block and q's RoPE angles before the PDL wait, as the runtime launches it)
    k_pre, v_pre = k.clone(), v.clone()
    pre = rope_tree_attention(qkv, positions, inv_freq, k_pre, v_pre, slots, hq, torch.tensor([prefix]), mask, scale,
                              prefix_ready=True, **tune)
    _same_attention_and_cache((pre, k_pre, v_pre), (want, k_sep, v_sep), dtype, q, k, "prefix_ready vs separate")
    k_ref, v_ref = k.clone(), v.clone()
    q_ref = rope_kv_write_ref(qkv, positions, inv_freq, k_ref, v_ref, slots, hq, hkv)
    assert_close(got, tree_attention_ref(q_ref, k_ref, v_ref, prefix, mask, scale), dtype, reduction=_terms(q, k),
                 what=f"{case} vs reference")


def _same_attention_and_cache(got, want, dtype, q, k, what):
    """(out, k_cache, v_cache) of two launch forms: attention and the rotated keys to rounding, v copied bit for bit."""
    assert_close(got[0], want[0], dtype, reduction=_terms(q, k), what=f"{what}: output")
    assert_close(got[1], want[1], dtype, reduction=2, what=f"{what}: k_cache")  # x1 cos - x2 sin
    assert_bitwise(got[2], want[2], reason="v is copied from qkv into the cache: data movement", what=f"{what}: v")


def test_rope_tree_attention_rejects_bad_operands():
    from kernels import rope_tree_attention
    from kernels.tree_attention import ROPE_MAX_TOKENS

    qkv, k, v, positions, inv_freq = _rope_operands(3, 8, 2, 16, 40, torch.float32, seed=0)
    mask = torch.ones(3, 3, dtype=torch.bool)
    slots = torch.arange(3) + 5
    with pytest.raises(ValueError, match=r"rope_tree_attention: k_cache must be \[cap, Hkv, D\]"):
        rope_tree_attention(qkv, positions, inv_freq, k[0], v, slots, 8, 5, mask, 0.25)
    with pytest.raises(ValueError, match="rope_tree_attention: out must be"):
        rope_tree_attention(qkv, positions, inv_freq, k, v, slots, 8, 5, mask, 0.25, out=torch.empty(3, 8, 15))
    with pytest.raises(ValueError, match="rope_tree_attention: v_cache needs a contiguous last dim"):
        rope_tree_attention(qkv, positions, inv_freq, k, v.transpose(0, 2).contiguous().transpose(0, 2), slots, 8,
                            5, mask, 0.25)
    with pytest.raises(ValueError, match="qkv width"):
        rope_tree_attention(qkv[:, :-16], positions, inv_freq, k, v, slots, 8, 5, mask, 0.25)
    with pytest.raises(ValueError, match="write_slots"):
        rope_tree_attention(qkv, positions, inv_freq, k, v, slots[:2], 8, 5, mask, 0.25)
    t = ROPE_MAX_TOKENS + 1
    big, kb, vb, pos_b, _ = _rope_operands(t, 8, 2, 16, t + 8, torch.float32, seed=1)
    with pytest.raises(ValueError, match="ROPE_MAX_TOKENS"):
        rope_tree_attention(big, pos_b, inv_freq, kb, vb, torch.arange(t), 8, 0, torch.ones(t, t, dtype=torch.bool),
                            0.25)


# Every pair of (prefix, splits, prefix_ready) values: 10 of 18 cases (tests/conftest.py `pairwise`).
@pytest.mark.parametrize("prefix,splits,prefetch",
                         pairwise(prefix=[0, BLOCK_N - 1, 3 * BLOCK_N + 5], splits=[1, 3, 8], prefetch=[False, True]),
                         ids=lambda v: {False: "plain", True: "prefix_ready"}.get(v, str(v)) if isinstance(v, bool)
                         else str(v))
def test_tma_prefix_descriptors_give_the_pointer_path_result(monkeypatch, prefix, splits, prefetch):
    """`use_tma_prefix`'s path forced on (the interpreter runs descriptors): the prefix blocks through tensor
    descriptors (whole boxes, keys past prefix_len read and masked in the scores, rows past the cache zero) give the
    pointer loads' output (to rounding: other loads and tile shapes feed tl.dot, whose CPU BLAS kernel may block them
    differently), with
    splits that own no block, one or several, and a last block that runs past the cache's end."""
    import importlib

    ta = importlib.import_module("kernels.tree_attention")
    parent = build("random", 6, seed=prefix + splits)
    mask = ancestor_mask(parent)
    cap = prefix + 6 + 3  # not a multiple of BLOCK_N: the last prefix box reaches past the cache
    q, k, v = _inputs(6, 8, HKV, 32, cap, torch.float16, seed=prefix + 11)
    kw = {"num_splits": splits, "block_n": BLOCK_N, "min_blocks_per_split": 1, "prefix_ready": prefetch}
    for p in (prefix, torch.tensor([prefix])):
        monkeypatch.setattr(ta, "use_tma_prefix", lambda *_: False)
        plain = _run(q, k, v, p, mask, **kw)
        monkeypatch.setattr(ta, "use_tma_prefix", lambda *_: True)
        assert ta._prefix_descriptors(k, v, BLOCK_N) is not None
        tma = _run(q, k, v, p, mask, **kw)
        assert_close(tma, plain, torch.float16, reduction=_terms(q, k), what=f"TMA vs pointer loads, prefix {p}")
    assert_close(tma, tree_attention_ref(q, k, v, prefix, mask, 1 / math.sqrt(32)), torch.float16,
                 reduction=_terms(q, k), what="vs reference")


@pytest.mark.filterwarnings("ignore:invalid value encountered in matmul:RuntimeWarning")  # q . inf, then masked
def test_tma_prefix_ignores_non_finite_stale_rows_past_the_prefix(monkeypatch):
    """Rows past prefix_len may hold anything (a rejected token's overflowed K / V): the TMA boxes read them, the
    scores are masked and the V rows zeroed, so the output is the pointer path's (which never loads them). The tree
    keys themselves sit further on and are finite."""
    import importlib

    ta = importlib.import_module("kernels.tree_attention")
    prefix, t = BLOCK_N + 5, 4
    mask = ancestor_mask(build("chain", t, seed=0))
    q, k, v = _inputs(t, 8, HKV, 32, 4 * BLOCK_N, torch.float16, seed=5)
    k[prefix + t:], v[prefix + t:] = float("inf"), float("nan")  # past the tree: stale garbage
    outs = []
    for tma in (False, True):
        monkeypatch.setattr(ta, "use_tma_prefix", lambda *_, tma=tma: tma)
        outs.append(_run(q, k, v, prefix, mask, num_splits=3, block_n=BLOCK_N, min_blocks_per_split=1))
    assert torch.isfinite(outs[0]).all()
    assert_close(outs[1], outs[0], torch.float16, reduction=_terms(q, k), what="TMA vs pointer loads")


def test_tma_prefix_keeps_pointers_for_caches_a_descriptor_cannot_cover():
    """A cache that is not row-contiguous (a strided view), or a box over 256 rows, gets no descriptors: the launch
    keeps the pointer loads."""
    import importlib

    ta = importlib.import_module("kernels.tree_attention")
    q, k, v = _inputs(2, 4, HKV, 32, 40, torch.float32, seed=3)
    wide = torch.randn(40, HKV, 64)[:, :, :32]  # rows strided 128 elements apart, not HKV * D
    assert ta._prefix_descriptors(k, v, BLOCK_N) is not None
    assert ta._prefix_descriptors(wide, v, BLOCK_N) is None and ta._prefix_descriptors(k, wide, BLOCK_N) is None
    assert ta._prefix_descriptors(k, v, 512) is None  # a box of 512 rows: over TMA's 256


def test_tma_prefix_in_the_fused_rope_attention(monkeypatch):
    """rope_tree_attention through the descriptors: the same output and cache as with pointer loads, to rounding (the
    last split writes the new keys past prefix_len while the prefix boxes may read those rows: masked either way)."""
    import importlib

    from kernels import rope_tree_attention

    ta = importlib.import_module("kernels.tree_attention")
    hq, hkv, d, prefix = 8, 2, 32, 2 * BLOCK_N + 3
    mask = ancestor_mask(build("random", 5, seed=4))
    qkv, k, v, positions, inv_freq = _rope_operands(5, hq, hkv, d, prefix + 5 + BLOCK_N, torch.float16, seed=9)
    slots = prefix + torch.arange(5)
    outs = []
    for tma in (False, True):
        monkeypatch.setattr(ta, "use_tma_prefix", lambda *_, tma=tma: tma)
        kc, vc = k.clone(), v.clone()
        out = rope_tree_attention(qkv, positions, inv_freq, kc, vc, slots, hq, torch.tensor([prefix]), mask,
                                  1 / math.sqrt(d), num_splits=3, block_n=BLOCK_N, prefix_ready=True)
        outs.append((out, kc, vc))
    _same_attention_and_cache(outs[1], outs[0], torch.float16, qkv.view(5, -1, d), k, "TMA vs pointer loads")


def test_wide_max_rows_moves_many_row_launches_to_the_wide_tile():
    """`wide_max_rows` (default kernels.tree_attention.WIDE_MAX_ROWS): launches of 65..wide_max_rows query rows take
    the wide tile (CUDA only) at 64 rows per block before the halving (32 per program); past it, or on CPU, or with a
    tile override, the 128-row generic tile stays; a bad value is named."""
    import importlib

    ta = importlib.import_module("kernels.tree_attention")
    assert ta.WIDE_MAX_ROWS == 256
    tile = ta.attention_tile
    assert [tile(n, 64, 2, True, wide_max_rows=64)[::4] for n in (128, 256)] == [(128, False), (128, False)]
    assert [tile(n, d, 2, True)[::4] for n in (65, 128, 256) for d in (64, 128)] == [(32, True)] * 6
    assert tile(257, 64, 2, True)[::4] == (128, False)
    assert tile(128, 64, 2, False)[::4] == (128, False)  # CPU: the generic tile
    assert tile(128, 64, 2, True, block_n=64)[::4] == (128, False)
    assert tile(128, 256, 2, True)[::4] == (128, False)  # head dim over 128
    assert tile(128, 64, 2, True, wide_max_rows=128)[::4] == (32, True)
    assert tile(256, 64, 2, True, wide_max_rows=128)[::4] == (128, False)
    for bad in (32, 100, True, 256.0):
        with pytest.raises(ValueError, match="tree_attention: wide_max_rows: expected 64, 128 or 256"):
            tile(128, 64, 2, True, wide_max_rows=bad)


def test_the_wide_tile_halves_its_rows_past_16_and_keeps_the_result():
    """The wide tile (CUDA) runs half the query rows per program once they exceed 16 (more programs over the same key
    splits, no extra merge) unless block_m is given; 16 rows per program give the reference's output."""
    import importlib

    ta = importlib.import_module("kernels.tree_attention")
    assert [ta.attention_tile(n, 64, 2, True)[0] for n in (4, 16, 17, 32, 64)] == [16, 16, 16, 16, 32]
    assert ta.attention_tile(64, 64, 2, False)[0] == 64 and ta.attention_tile(64, 64, 2, True, block_m=64)[0] == 64
    assert ta.attention_tile(512, 64, 2, True)[:1] + ta.attention_tile(512, 64, 2, True)[4:] == (128, False)
    assert ta.attention_tile(4, 128, 2, True)[3:] == (8, True)  # 8 warps on the wide tile
    assert ta.attention_tile(4, 128, 2, False)[3:] == (4, False)  # CPU: the 64-key tile
    parent = build("random", 13, seed=3)
    mask = ancestor_mask(parent)
    prefix = 2 * BLOCK_N + 3
    q, k, v = _inputs(len(parent), HKV * 4, HKV, 32, prefix + len(parent), torch.float32, seed=5)
    out = _run(q, k, v, prefix, mask, num_splits=2, block_n=BLOCK_N, block_m=16)  # 52 rows: 4 programs per kv head
    assert_close(out, tree_attention_ref(q, k, v, prefix, mask, 1.0 / math.sqrt(32)), torch.float32,
                 reduction=_terms(q, k), what="16 rows")


def test_tma_prefix_by_head_dim_tokens_and_device():
    """Descriptors on CUDA for single-token launches at head dims <= TMA_MAX_HEAD_DIM only (the 1B draft's one-row
    refill, not its tree steps nor the 8B's D 128), never under the CPU interpreter."""
    import importlib

    ta = importlib.import_module("kernels.tree_attention")
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert ta.TMA_MAX_HEAD_DIM == 64 and ta.TMA_MAX_TOKENS == 1
    assert [ta.use_tma_prefix(d, 1, cuda) for d in (32, 64, 128)] == [True, True, False]
    assert not ta.use_tma_prefix(64, 2, cuda) and not ta.use_tma_prefix(64, 16, cuda)
    assert not ta.use_tma_prefix(64, 1, cpu)
