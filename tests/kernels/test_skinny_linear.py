"""skinny_linear, its split-K partials and add_rmsnorm_partials vs the float32 references (Triton interpreter on
CPU; bf16 is upcast after the loads there, so bf16 covers loads, stores and rounding only). Small grids and
wide tiles keep the interpreter cheap; one GPU test (marker `gpu`) checks Llama shapes and graph capture.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from kernels import add_rmsnorm, add_rmsnorm_partials, skinny_linear, skinny_linear_partials
from kernels.reference import add_rmsnorm_partials_ref, skinny_linear_partials_ref, skinny_linear_ref
from kernels.skinny_linear import CONFIGS, MAX_M, SMEM_BUDGET, m_bucket, pick_config
from tests.tolerances import assert_bitwise, assert_close, poisoned

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# (N, K, block_n, block_k, split_k): N=96 is not a multiple of 64; K=200 is not a multiple of block_k, and
# split 2 / 3 of it gives 16-aligned chunks (112 + 88, 80 + 80 + 40) that end inside a K tile
CASES = [(96, 256, 64, 128, 1), (96, 256, 64, 128, 2), (96, 200, 32, 64, 2), (80, 200, 64, 64, 3)]
EPS = 1e-5


def _inputs(m, n, k, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(dtype)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(dtype)  # outputs O(1), like a real projection
    return x, w


def _norm_inputs(m, n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, n, generator=g).to(dtype), (1 + 0.5 * torch.randn(n, generator=g)).to(dtype)


@pytest.mark.parametrize("m", [1, 5, 16])
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=[f"N{c[0]}_K{c[1]}_bn{c[2]}_bk{c[3]}_sk{c[4]}" for c in CASES])
def test_matches_reference(case, dtype, m):
    n, k, bn, bk, sk = case
    x, w = _inputs(m, n, k, dtype, seed=m * 1000 + n + k + sk)
    out = poisoned((m, n), dtype)
    workspace = torch.full((sk * m * n + 7,), float("nan"))  # larger than needed: the front part is used
    res = skinny_linear(x, w, out=out, workspace=workspace, block_n=bn, block_k=bk, split_k=sk)
    assert res is out
    assert_close(out, skinny_linear_ref(x, w), dtype, reduction=k, what=f"M={m} case={case}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("n,k,sk", [(96, 256, 2), (80, 200, 3), (48, 40, 8)], ids=["even", "ragged", "empty_splits"])
def test_partials_match_reference(n, k, sk, dtype):
    """Partial s covers the same K chunk as the reference; K=40 over 8 splits leaves splits 3..7 empty (zeros)."""
    x, w = _inputs(5, n, k, dtype, seed=n + k)
    out = poisoned((sk, 5, n), torch.float32)
    res = skinny_linear_partials(x, w, sk, out=out, block_n=64, block_k=64)
    assert res is out
    assert_close(out, skinny_linear_partials_ref(x, w, sk), torch.float32, reduction=k,
                 what=f"partials N={n} K={k} split {sk}")
    assert_close(out.sum(0), skinny_linear_ref(x.float(), w.float()), torch.float32, reduction=k,
                 what="sum of partials")


@pytest.mark.parametrize("split_k", [1, 2, 3])
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
def test_add_rmsnorm_partials_is_linear_then_add_rmsnorm(dtype, split_k):
    """The fused sum-of-partials + norm gives the unfused skinny_linear then add_rmsnorm (two kernels each: to
    rounding, summed over K, then the norm's N)."""
    m, n, k = 5, 96, 200
    x, w = _inputs(m, n, k, dtype, seed=split_k)
    res, nw = _norm_inputs(m, n, dtype, seed=10 + split_k)
    tile = {"block_n": 32, "block_k": 64}
    y = skinny_linear(x, w, split_k=split_k, **tile)
    want_normed, want_res = add_rmsnorm(y, res, nw, EPS)
    partials = skinny_linear_partials(x, w, split_k, **tile)
    bufs = (poisoned((m, n), dtype), poisoned((m, n), dtype))
    normed, new_res = add_rmsnorm_partials(partials, res, nw, EPS, out=bufs)
    assert normed is bufs[0] and new_res is bufs[1]
    assert_close(new_res, want_res, dtype, reduction=k, what="new_residual")
    assert_close(normed, want_normed, dtype, reduction=k + n, what="normed")


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("shape", [(1, 3, 1), (4, 2, 100), (3, 1, 257)], ids=["M3_N1", "S4_M2_N100", "S3_M1_N257"])
def test_add_rmsnorm_partials_matches_reference(shape, dtype):
    s, m, n = shape
    g = torch.Generator().manual_seed(s * m * n)
    partials = torch.randn(s, m, n, generator=g) * 2
    res, nw = _norm_inputs(m, n, dtype, seed=n)
    before = (partials.clone(), res.clone())
    normed, new_res = add_rmsnorm_partials(partials, res, nw, EPS)
    want_normed, want_res = add_rmsnorm_partials_ref(partials, res, nw, EPS)
    assert_close(new_res, want_res, dtype, reduction=s + 1, what="new_residual")  # S partials + residual
    assert_close(normed, want_normed, dtype, reduction=s + 1 + n, what="normed")
    assert_bitwise(partials, before[0], reason="an input the kernel must not write", what="partials")
    assert_bitwise(res, before[1], reason="an input the kernel must not write", what="residual")
    assert normed.dtype == new_res.dtype == dtype


@pytest.mark.parametrize("m", [0, 33, MAX_M])
def test_batch_edges(m):
    """M = 0 (nothing launched), and 33..64 rows (BLOCK_M 64) with default tiles and a float32 out."""
    x, w = _inputs(m, 48, 64, torch.float16, seed=m)
    out = poisoned((m, 48), torch.float32)
    assert skinny_linear(x, w, out=out, block_n=64, block_k=64) is out
    assert_close(out, skinny_linear_ref(x.float(), w.float()), torch.float32, reduction=64, what=f"M={m} float32 out")
    assert_close(skinny_linear(x, w, split_k=2), skinny_linear_ref(x, w), torch.float16, reduction=64,
                 what=f"M={m} default tiles")


@pytest.mark.parametrize("n,k", [(6144, 4096), (4096, 4096), (4096, 14336), (128256, 4096), (3072, 2048),
                                 (2048, 2048), (2048, 8192)])
@pytest.mark.parametrize("m", [1, 16, 64])
def test_heuristic_fills_the_h200(n, k, m):
    """Llama-3-8B / 3.2-1B projections: >= ~2 programs per SM, chunks that split K evenly, tiles in smem
    (the heuristic alone: an empty tuned table passed in)."""
    cfg = pick_config(m, n, k, sms=132, configs={})
    assert -(-n // cfg["block_n"]) * cfg["split_k"] >= 250, cfg
    assert k % (cfg["split_k"] * cfg["block_k"]) == 0, cfg
    assert cfg["num_stages"] * (m_bucket(m) + cfg["block_n"]) * cfg["block_k"] * 2 <= SMEM_BUDGET
    assert cfg["split_k"] == 1 or n < 4096, "split-K only where N alone cannot fill the GPU"


def test_configs_table_then_keywords_override_the_heuristic(monkeypatch):
    x, w = _inputs(3, 96, 256, torch.float32, seed=3)
    tuned = {"block_n": 64, "block_k": 128, "split_k": 2, "num_warps": 4, "num_stages": 3}
    monkeypatch.setitem(CONFIGS, (96, 256, 16), tuned)
    assert pick_config(3, 96, 256) == tuned and pick_config(3, 96, 256) is not tuned
    with pytest.raises(ValueError, match="workspace"):  # the table's split_k=2 needs a workspace of 2*3*96
        skinny_linear(x, w, workspace=torch.empty(10))
    out = skinny_linear(x, w, workspace=torch.empty(10), split_k=1)  # the keyword wins: no workspace used
    assert_close(out, skinny_linear_ref(x, w), torch.float32, reduction=256, what="split_k=1 keyword")
    assert_close(skinny_linear(x, w), skinny_linear_ref(x, w), torch.float32, reduction=256, what="tuned config")
    partials = skinny_linear_partials(x, w)  # split_k=None: the table's split, as skinny_linear picks it
    assert partials.shape == (2, 3, 96)
    assert_close(partials.sum(0), skinny_linear_ref(x, w), torch.float32, reduction=256,
                 what="configured split partials")


@pytest.mark.parametrize("programs,sk", [(5, 1), (7, 2), (200, 1)], ids=["p5", "p7_split2", "p200_over_n"])
def test_balanced_programs_match_reference(programs, sk):
    """`programs`: column programs of equal shares (96 / 5 = 19-20 columns in a 32-wide tile; 200 > N: one column
    each, masked to 16) give the tiles' product, and the partials of each split."""
    x, w = _inputs(5, 96, 200, torch.float32, seed=programs)
    cfg = {"block_n": 64, "block_k": 64, "split_k": sk, "num_warps": 4, "num_stages": 2, "programs": programs}
    with _configs({(96, 200, 16): cfg}):
        out = skinny_linear(x, w, out=poisoned((5, 96), torch.float32))
        partials = skinny_linear_partials(x, w, out=poisoned((sk, 5, 96), torch.float32))
    assert_close(out, skinny_linear_ref(x, w), torch.float32, reduction=200, what=f"balanced over {programs}")
    assert_close(partials, skinny_linear_partials_ref(x, w, sk), torch.float32, reduction=200,
                 what=f"balanced partials over {programs}")
    with _configs({(96, 200, 16): {**cfg, "programs": -1}}), pytest.raises(ValueError, match="programs must be"):
        skinny_linear(x, w)


@contextlib.contextmanager
def _configs(entries):
    saved = dict(CONFIGS)
    CONFIGS.update(entries)
    try:
        yield
    finally:
        CONFIGS.clear()
        CONFIGS.update(saved)


BAD = [  # (message the ValueError must match: it names the argument, call on x [4,64], w [32,64], ...)
    ("x must be \\[M, K\\]", lambda x, w, p, res, nw: skinny_linear(x[0], w)),
    ("w must be \\[N, K=64\\]", lambda x, w, p, res, nw: skinny_linear(x, w[:, :32])),
    ("w \\(torch.float16", lambda x, w, p, res, nw: skinny_linear(x, w.half())),
    ("x has M=65 rows", lambda x, w, p, res, nw: skinny_linear(torch.zeros(65, 64), w)),
    ("x and w need a contiguous", lambda x, w, p, res, nw: skinny_linear(x, w.t().contiguous().t())),
    ("out must be \\[4, 32\\]", lambda x, w, p, res, nw: skinny_linear(x, w, out=torch.empty(4, 31))),
    ("out must be floating", lambda x, w, p, res, nw: skinny_linear(x, w, out=torch.empty(4, 32).int())),
    ("workspace must be", lambda x, w, p, res, nw: skinny_linear(x, w, split_k=2, workspace=p.half())),
    ("block_n must be a power of two", lambda x, w, p, res, nw: skinny_linear(x, w, block_n=48)),
    ("block_k must be a power of two", lambda x, w, p, res, nw: skinny_linear(x, w, block_k=8)),
    ("split_k must be a positive int", lambda x, w, p, res, nw: skinny_linear(x, w, split_k=0)),
    ("num_warps must be a positive int", lambda x, w, p, res, nw: skinny_linear(x, w, num_warps=-4)),
    ("out must be \\[2, 4, 32\\] torch.float32",
     lambda x, w, p, res, nw: skinny_linear_partials(x, w, 2, out=p.half())),
    ("split_k must be a positive int, got 0", lambda x, w, p, res, nw: skinny_linear_partials(x, w, 0)),
    ("partials must be float32", lambda x, w, p, res, nw: add_rmsnorm_partials(p.half(), res, nw, EPS)),
    ("partials must be float32 \\[S", lambda x, w, p, res, nw: add_rmsnorm_partials(p[0], res, nw, EPS)),
    ("residual must be", lambda x, w, p, res, nw: add_rmsnorm_partials(p, res[:3], nw, EPS)),
    ("weight must be", lambda x, w, p, res, nw: add_rmsnorm_partials(p, res, nw[:16], EPS)),
    ("out\\[1\\] \\(new_residual\\)",
     lambda x, w, p, res, nw: add_rmsnorm_partials(p, res, nw, EPS, out=(res.clone(), res.half()))),
]


@pytest.mark.parametrize("match,call", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_rejects_bad_inputs(match, call):
    x, w = _inputs(4, 32, 64, torch.float32, seed=0)
    res, nw = _norm_inputs(4, 32, torch.float32, seed=0)
    with pytest.raises(ValueError, match=match):
        call(x, w, torch.zeros(2, 4, 32), res, nw)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n,k", [(4096, 4096), (2048, 2048)], ids=["llama3_8b_o", "llama3.2_1b_o"])
def test_gpu_bf16_and_graph_capture(n, k):
    """bf16 against cuBLAS at a Llama shape with the default config, then the same calls captured in a CUDA
    graph (out and workspace given) replayed on new inputs; the fused norm gives the unfused one."""
    dev, m = "cuda", 8
    x, w = (t.to(dev) for t in _inputs(m, n, k, torch.bfloat16, seed=n))
    res, nw = (t.to(dev) for t in _norm_inputs(m, n, torch.bfloat16, seed=k))
    assert_close(skinny_linear(x, w), torch.nn.functional.linear(x, w), torch.bfloat16, reduction=k,
                 what="bf16 vs cuBLAS")
    sk = 2
    out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    ws = torch.empty(sk, m, n, device=dev)
    bufs = (torch.empty_like(res), torch.empty_like(res))
    fused = (torch.empty_like(res), torch.empty_like(res))

    def step():
        skinny_linear(x, w, out=out, workspace=ws, split_k=sk)
        add_rmsnorm(out, res, nw, EPS, out=bufs)
        add_rmsnorm_partials(skinny_linear_partials(x, w, sk, out=ws), res, nw, EPS, out=fused)

    step()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert_close(out, skinny_linear_ref(x, w), torch.bfloat16, reduction=k, what="graph replay")
    assert_close(fused[0], bufs[0], torch.bfloat16, reduction=k + n, what="fused normed")
    assert_close(fused[1], bufs[1], torch.bfloat16, reduction=k, what="fused new_residual")
