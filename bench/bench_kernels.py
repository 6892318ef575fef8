"""Kernel benchmarks for the H200 (bf16): correctness vs the references first, then timings.

    python bench/bench_kernels.py --out runs/bench/kernels_<date>.json [--only tree_attention,swiglu]

Sections (each runs inside its own try/except: one failure is reported and the rest still run):
  correctness     every kernel vs kernels.reference on GPU (fp32 and bf16; max abs err printed), plus
                  CUDA-graph capture + replay of tree_attention / kv_compact / greedy_verify with
                  device-side lengths changed between replays
  tree_attention  Triton vs torch eager (matmul + masked softmax) vs SDPA with a boolean mask, bs (tree
                  nodes) 8/16/32/64 x context 1K/4K/16K, Llama-3-8B heads (Hq 32, Hkv 8, D 128)
  kv_compact      Triton vs advanced-indexing copy, Llama-3-8B cache (32 layers), 64/256 kept slots
  swiglu          Triton vs eager silu(x Wg^T) * (x Wu^T), Llama-3-8B MLP at TP 1 and TP 2
  add_rmsnorm     Triton vs eager residual add + RMSNorm, N = 4096
  greedy_verify   Triton vs the host-loop reference, trees of 16/64 nodes
  gemm_allreduce  TP=2 (2 spawned processes, NCCL): Triton GEMM + one-shot symmetric-memory all-reduce
                  vs cuBLAS + NCCL all_reduce, eager and inside CUDA graphs, M 1/4/8/16, o_proj/down_proj
                  shards; skipped with a note on a one-GPU machine

Timing: triton.testing.do_bench (median; it clears L2 before every call), so single-kernel numbers are
cold-L2. The multi-process section times fixed iteration counts with CUDA events (do_bench's adaptive
counts could differ between ranks and deadlock a collective) and rotates weight copies (> 2x L2).
GB/s counts the bytes a kernel must move (analytic, same for every provider) against the 4.29 TB/s
copy ceiling measured on this machine type (reference/device-h200.md). Budget: ~2-3 minutes of GPU.
The JSON has git SHA, device, date, versions, config and every row; a markdown table is printed last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
import traceback
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # runnable as a plain script from anywhere
    sys.path.insert(0, str(REPO))

from bench.bench_gemm_allreduce import GEMM_AR_SHAPES, section_gemm_allreduce  # noqa: E402
from bench.kernel_bench_common import (  # noqa: E402
    BF16_TOL,
    ERRORS,
    FP32_TOL,
    HBM_PEAK_GBS,
    LLAMA3_8B,
    NCCL_ENV,
    ROWS,
    bench_ms,
    gbs,
    max_err,
    record,
    run_providers,
)
from conf.rundir import BENCH_DIR, atomic_write_json, git_sha  # noqa: E402


def random_tree(n: int, gen: torch.Generator) -> list[int]:
    return [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, n)]


def ancestor_mask(parent: list[int], device) -> torch.Tensor:
    """The runtime's tree mask (runtime/tree.py) of `parent`, on `device`."""
    from runtime.tree import ancestor_mask as tree_mask

    return tree_mask(parent, len(parent)).to(device)


# ----------------------------------------------------------------------------------------------- correctness
def section_correctness(dev) -> None:
    from kernels import add_rmsnorm, greedy_verify, kv_compact, swiglu, tree_attention
    from kernels import reference as ref

    g = torch.Generator().manual_seed(0)

    def check(name, dtype, err, tol, scale=1.0):
        ok = err <= tol * max(1.0, scale)  # relative to the output's magnitude (1 ulp of a value in [2, 4) = 2 eps)
        record("correctness", kernel=name, dtype=str(dtype).replace("torch.", ""), max_err=err, tol=tol, ok=ok)

    hq, hkv, d = LLAMA3_8B["hq"], LLAMA3_8B["hkv"], LLAMA3_8B["head_dim"]
    for dtype, tol in ((torch.float32, FP32_TOL), (torch.bfloat16, BF16_TOL)):
        for t, prefix, splits in ((16, 4000, None), (64, 1000, None), (7, 130, 1), (33, 0, 3)):
            parent = random_tree(t, g)
            mask = ancestor_mask(parent, dev)
            cap = prefix + t + 5
            q = torch.randn(t, hq, d, generator=g).to(dev, dtype)
            k = torch.randn(cap, hkv, d, generator=g).to(dev, dtype)
            v = torch.randn(cap, hkv, d, generator=g).to(dev, dtype)
            out = tree_attention(q, k, v, prefix, mask, d**-0.5, num_splits=splits)
            want = ref.tree_attention_ref(q, k, v, prefix, mask, d**-0.5)
            check(f"tree_attention T{t} prefix{prefix} splits{splits}", dtype, max_err(out, want), tol,
                  want.abs().max().item())
        x = torch.randn(8, 512, generator=g).to(dev, dtype)
        wg = (torch.randn(1000, 512, generator=g) / 512**0.5).to(dev, dtype)
        wu = (torch.randn(1000, 512, generator=g) / 512**0.5).to(dev, dtype)
        want = ref.swiglu_ref(x, wg, wu)
        check("swiglu M8 K512 I1000", dtype, max_err(swiglu(x, wg, wu), want), tol, want.abs().max().item())
        x = torch.randn(5, 4096, generator=g).to(dev, dtype)
        r = torch.randn(5, 4096, generator=g).to(dev, dtype)
        w = torch.randn(4096, generator=g).to(dev, dtype)
        got, want = add_rmsnorm(x, r, w, 1e-5), ref.add_rmsnorm_ref(x, r, w, 1e-5)
        check("add_rmsnorm M5 N4096", dtype, max(max_err(got[0], want[0]), max_err(got[1], want[1])), tol,
              max(want[0].abs().max().item(), want[1].abs().max().item()))
        kv = torch.randn(4, 2, 300, 8, 128, generator=g).to(dev, dtype)
        kv_want = kv.clone()
        src = torch.tensor([40, 38, 41, 44, 45, 39, -1, 50], device=dev)  # overlaps its destination
        kv_compact(kv, src, 38)
        ref.kv_compact_ref(kv_want, src, 38)
        check("kv_compact overlapping", dtype, max_err(kv, kv_want), 0.0)

    for n in (16, 64):
        parent = torch.tensor(random_tree(n, g))
        amax = torch.randint(0, 3, (n,), generator=g)
        tok = torch.randint(0, 3, (n,), generator=g)
        got = greedy_verify(amax.to(dev), tok.to(dev), parent.to(dev), n)
        want = ref.greedy_verify_ref(amax, tok, parent, n)
        same = all(torch.equal(a.cpu(), b) for a, b in zip(got, want))
        check(f"greedy_verify N{n} (accepted {int(want[1])})", torch.int64, 0.0 if same else 1.0, 0.0)
    _check_graph_capture(dev, g, check)


def _check_graph_capture(dev, g, check) -> None:
    """Capture the kernels with device-side lengths, change the lengths, replay, compare."""
    from kernels import greedy_verify, kv_compact, tree_attention
    from kernels import reference as ref

    hq, hkv, d, t, cap = 32, 8, 128, 16, 8192
    parent = random_tree(t, g)
    mask = ancestor_mask(parent, dev)
    q = torch.randn(t, hq, d, generator=g).to(dev, torch.bfloat16)
    k = torch.randn(cap, hkv, d, generator=g).to(dev, torch.bfloat16)
    v = torch.randn(cap, hkv, d, generator=g).to(dev, torch.bfloat16)
    prefix = torch.tensor([100], device=dev)
    out = torch.empty_like(q)
    kv = torch.randn(2, 2, 64, 4, 32, generator=g).to(dev)
    src = torch.tensor([20, 22, 23, -1], device=dev)
    dst = torch.tensor([10], device=dev)
    amax = torch.randint(0, 2, (t,), generator=g).to(dev)
    tok = torch.randint(0, 2, (t,), generator=g).to(dev)
    par = torch.tensor(parent, device=dev)
    n_nodes = torch.tensor([t], device=dev)
    vout = (torch.empty(t, dtype=torch.int64, device=dev), torch.empty((), dtype=torch.int64, device=dev),
            torch.empty((), dtype=torch.int64, device=dev))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (compiles, allocates counters) on the capture stream
        tree_attention(q, k, v, prefix, mask, d**-0.5, out=out)
        kv_compact(kv, src, dst)
        greedy_verify(amax, tok, par, n_nodes, out=vout)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        tree_attention(q, k, v, prefix, mask, d**-0.5, out=out)
        kv_compact(kv, src, dst)
        greedy_verify(amax, tok, par, n_nodes, out=vout)
    for p, nn in ((100, t), (5000, t // 2), (7000, 3)):
        prefix.fill_(p)
        n_nodes.fill_(nn)
        kv_before = kv.clone()
        graph.replay()
        torch.cuda.synchronize()
        want = ref.tree_attention_ref(q, k, v, p, mask, d**-0.5)
        check(f"graph replay tree_attention prefix{p}", torch.bfloat16, max_err(out, want), BF16_TOL,
              want.abs().max().item())
        ref.kv_compact_ref(kv_before, src, 10)
        check(f"graph replay kv_compact (replay with prefix{p})", torch.float32, max_err(kv, kv_before), 0.0)
        want_v = ref.greedy_verify_ref(amax.cpu(), tok.cpu(), par.cpu(), nn)
        same = all(torch.equal(a.cpu(), b) for a, b in zip(vout, want_v))
        check(f"graph replay greedy_verify nodes{nn}", torch.int64, 0.0 if same else 1.0, 0.0)


# ----------------------------------------------------------------------------------------------- tree attention
def _eager_tree_attention(q, k_cache, v_cache, prefix, full_mask, scale):
    """What a plain PyTorch runtime would do: per-kv-head batched matmul, masked softmax, matmul."""
    t, hq, d = q.shape
    hkv = k_cache.shape[1]
    s = full_mask.shape[1]  # prefix + tree keys
    qh = q.view(t, hkv, hq // hkv, d).permute(1, 0, 2, 3).reshape(hkv, -1, d)  # [Hkv, T*G, D]
    kh = k_cache[:s].permute(1, 2, 0)  # [Hkv, D, S]
    vh = v_cache[:s].permute(1, 0, 2)  # [Hkv, S, D]
    scores = torch.matmul(qh, kh) * scale  # [Hkv, T*G, S]
    row_mask = full_mask.repeat_interleave(hq // hkv, dim=0)  # [T*G, S] rows ordered (t, g)
    scores = scores.masked_fill(~row_mask, float("-inf"))
    p = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(p, vh).view(hkv, t, hq // hkv, d).permute(1, 0, 2, 3).reshape(t, hq, d)


def section_tree_attention(dev, quick: bool) -> None:
    from kernels import tree_attention

    hq, hkv, d = LLAMA3_8B["hq"], LLAMA3_8B["hkv"], LLAMA3_8B["head_dim"]
    g = torch.Generator().manual_seed(1)
    scale = d**-0.5
    ctxs = (1024, 16384) if quick else (1024, 4096, 16384)
    for ctx in ctxs:
        cap = ctx + 64
        k = torch.randn(cap, hkv, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(cap, hkv, d, device=dev, dtype=torch.bfloat16)
        for bs in (8, 16, 32, 64):
            parent = random_tree(bs, g)
            mask = ancestor_mask(parent, dev)
            full = torch.cat([torch.ones(bs, ctx, dtype=torch.bool, device=dev), mask], dim=1)  # [T, S]
            q = torch.randn(bs, hq, d, device=dev, dtype=torch.bfloat16)
            nbytes = (ctx + bs) * hkv * d * 2 * 2 + 2 * q.numel() * 2 + mask.numel()
            q4 = q.transpose(0, 1).unsqueeze(0)  # [1, Hq, T, D]
            k4 = k[: ctx + bs].permute(1, 0, 2).unsqueeze(0)  # [1, Hkv, S, D]
            v4 = v[: ctx + bs].permute(1, 0, 2).unsqueeze(0)
            sdpa = partial(F.scaled_dot_product_attention, q4, k4, v4, attn_mask=full, scale=scale, enable_gqa=True)
            run_providers("tree_attention", f"bs{bs} ctx{ctx}", {
                "triton": (partial(tree_attention, q, k, v, ctx, mask, scale), False),
                "triton_graph": (partial(tree_attention, q, k, v, ctx, mask, scale), True),
                "torch_eager": (partial(_eager_tree_attention, q, k, v, ctx, full, scale), False),
                "sdpa_bool_mask": (sdpa, False),
            }, nbytes)


def section_tree_attention_tune(dev, quick: bool) -> None:
    """Opt-in (--only tree_attention_tune): sweep tile, warp, stage and split choices in CUDA graphs."""
    from kernels import tree_attention
    from kernels.tree_attention import _pick_num_splits

    hq, hkv, d = LLAMA3_8B["hq"], LLAMA3_8B["hkv"], LLAMA3_8B["head_dim"]
    g = torch.Generator().manual_seed(3)
    for bs, ctx in ((8, 16384), (64, 16384), (16, 4096), (8, 1024)):
        k = torch.randn(ctx + bs, hkv, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(ctx + bs, hkv, d, device=dev, dtype=torch.bfloat16)
        q = torch.randn(bs, hq, d, device=dev, dtype=torch.bfloat16)
        mask = ancestor_mask(random_tree(bs, g), dev)
        nbytes = (ctx + bs) * hkv * d * 4 + 4 * q.numel()
        rows = bs * hq // hkv
        bm = min(128 if rows >= 128 else 64, max(16, 1 << (rows - 1).bit_length()))
        results = []
        for bn in (64, 128):
            base = _pick_num_splits(dev, math.ceil(rows / bm) * hkv, math.ceil(ctx / bn))
            for warps, stages in ((4, 2), (4, 3), (8, 2), (8, 3)):
                for factor in (1, 2, 4):
                    splits = min(64, base * factor)
                    fn = partial(tree_attention, q, k, v, ctx, mask, d**-0.5, num_splits=splits, block_n=bn,
                                 num_warps=warps, num_stages=stages)
                    try:
                        fn()
                        ms = bench_ms(fn, graph=True)
                    except Exception as exc:
                        print(f"  bn{bn} w{warps} s{stages} splits{splits}: {exc!r}")
                        continue
                    results.append((ms, bn, warps, stages, splits))
        results.sort()
        for ms, bn, warps, stages, splits in results[:3] + results[-1:]:
            record("tree_attention_tune", shape=f"bs{bs} ctx{ctx}", provider=f"bn{bn} w{warps} s{stages} sp{splits}",
                   us=ms * 1e3, gbs=gbs(nbytes, ms), pct_peak=100 * gbs(nbytes, ms) / HBM_PEAK_GBS)


# ----------------------------------------------------------------------------------------------- kv compaction
def section_kv_compact(dev, quick: bool) -> None:
    from kernels import kv_compact
    from kernels import reference as ref

    layers, h, d = LLAMA3_8B["layers"], LLAMA3_8B["hkv"], LLAMA3_8B["head_dim"]
    cap = 4096
    kv = torch.randn(layers, 2, cap, h, d, device=dev, dtype=torch.bfloat16)  # 512 MiB
    for n in (64, 256):
        src = torch.arange(2000, 2000 + 2 * n, 2, device=dev)  # every other slot of a subtree
        nbytes = 2 * layers * 2 * n * h * d * 2
        run_providers("kv_compact", f"L{layers} n{n}", {
            "triton": (partial(kv_compact, kv, src, 1500), False),
            "triton_graph": (partial(kv_compact, kv, src, 1500), True),
            "torch_index_copy": (partial(ref.kv_compact_ref, kv, src, 1500), False),
        }, nbytes)


# ----------------------------------------------------------------------------------------------- MLP and norm
def section_swiglu(dev, quick: bool) -> None:
    from kernels import swiglu

    k = LLAMA3_8B["hidden"]
    for tp in (1, 2):
        inter = LLAMA3_8B["inter"] // tp
        wg = torch.randn(inter, k, device=dev, dtype=torch.bfloat16) / k**0.5
        wu = torch.randn(inter, k, device=dev, dtype=torch.bfloat16) / k**0.5
        w_cat = torch.cat([wg, wu])
        for m in (1, 8, 32) if quick else (1, 8, 16, 32, 64):
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            nbytes = 2 * inter * k * 2 + m * k * 2 + m * inter * 2
            run_providers("swiglu", f"TP{tp} M{m} K{k} I{inter}", {
                "triton": (partial(swiglu, x, wg, wu), False),
                "torch_eager": (partial(_eager_swiglu, x, wg, wu), False),
                "torch_gate_up_cat": (partial(_eager_swiglu_cat, x, w_cat), False),
            }, nbytes)


def _eager_swiglu(x, wg, wu):
    return F.silu(x @ wg.t()) * (x @ wu.t())


def _eager_swiglu_cat(x, w_cat):
    gate, up = (x @ w_cat.t()).chunk(2, dim=-1)
    return F.silu(gate) * up


def section_add_rmsnorm(dev, quick: bool) -> None:
    from kernels import add_rmsnorm

    n = LLAMA3_8B["hidden"]
    w = torch.randn(n, device=dev, dtype=torch.bfloat16)

    def eager(x, r):
        h = x + r
        hf = h.float()
        return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(h.dtype) * w, h

    for m in (1, 8, 64):
        x = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
        r = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
        nbytes = 4 * m * n * 2 + n * 2
        run_providers("add_rmsnorm", f"M{m} N{n}", {
            "triton": (partial(add_rmsnorm, x, r, w, 1e-5), False),
            "triton_graph": (partial(add_rmsnorm, x, r, w, 1e-5), True),
            "torch_eager_graph": (partial(eager, x, r), True),
            "torch_eager": (partial(eager, x, r), False),
        }, nbytes)


def section_greedy_verify(dev, quick: bool) -> None:
    from kernels import greedy_verify
    from kernels import reference as ref

    g = torch.Generator().manual_seed(2)
    for n in (16, 64):
        parent = torch.tensor(random_tree(n, g), device=dev)
        amax = torch.randint(0, 3, (n,), generator=g).to(dev)
        tok = torch.randint(0, 3, (n,), generator=g).to(dev)
        run_providers("greedy_verify", f"N{n}", {
            "triton": (partial(greedy_verify, amax, tok, parent, n), False),
            "triton_graph": (partial(greedy_verify, amax, tok, parent, n), True),
            "torch_host_loop": (partial(ref.greedy_verify_ref, amax, tok, parent, n), False),
        }, None)


# ----------------------------------------------------------------------------------------------- GEMM + AR


# ----------------------------------------------------------------------------------------------- driver
SECTIONS = {
    "correctness": lambda dev, quick: section_correctness(dev),
    "tree_attention": section_tree_attention,
    "kv_compact": section_kv_compact,
    "swiglu": section_swiglu,
    "add_rmsnorm": section_add_rmsnorm,
    "greedy_verify": section_greedy_verify,
    "gemm_allreduce": section_gemm_allreduce,
}
TUNE_SECTIONS = {  # opt-in only: --only tree_attention_tune,gemm_allreduce_tune
    "tree_attention_tune": section_tree_attention_tune,
    "gemm_allreduce_tune": lambda dev, quick: section_gemm_allreduce(dev, quick, tune=True),
}


def _markdown() -> str:
    lines = ["| section | shape | provider | us | GB/s | % of 4.29 TB/s | err |", "|---|---|---|---|---|---|---|"]
    def fmt(row: dict, key: str, spec: str) -> str:
        return format(row[key], spec) if isinstance(row.get(key), float) else ""

    for r in ROWS:
        if r["section"] == "correctness":
            continue
        lines.append(f"| {r['section']} | {r.get('shape', '')} | {r.get('provider', '')} | {fmt(r, 'us', '.1f')} | "
                     f"{fmt(r, 'gbs', '.0f')} | {fmt(r, 'pct_peak', '.1f')} | {fmt(r, 'max_err', '.2e')} |")
    checks = [r for r in ROWS if "ok" in r]
    bad = [r.get("kernel") or f"{r['section']} {r.get('shape')} {r.get('provider')}" for r in checks if not r["ok"]]
    lines.append(f"\ncorrectness: {len(checks) - len(bad)}/{len(checks)} ok" + (f"; FAILED: {bad}" if bad else ""))
    if ERRORS:
        lines.append(f"errors: {[(e['section'], e['error'][:120]) for e in ERRORS]}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    today = datetime.date.today().isoformat()
    parser.add_argument("--out", default=str(BENCH_DIR / f"kernels_{today}.json"))
    parser.add_argument("--only", default="", help="comma-separated sections: " + ",".join([*SECTIONS, *TUNE_SECTIONS]))
    parser.add_argument("--quick", action="store_true", help="smaller sweeps")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_kernels: needs a CUDA GPU (kernel tests on CPU live in tests/kernels)")
        return 2
    os.environ.update(NCCL_ENV)
    import triton

    dev = torch.device("cuda", 0)
    meta = {
        "git_sha": git_sha(),
        "device": torch.cuda.get_device_name(dev),
        "device_count": torch.cuda.device_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "config": {"model_shape": LLAMA3_8B, "dtype": "bfloat16", "hbm_peak_gbs": HBM_PEAK_GBS,
                   "timing": "triton.testing.do_bench median, L2 cleared per call; GEMM+AR: CUDA events",
                   "gemm_ar_shapes": GEMM_AR_SHAPES, "quick": args.quick, "env": NCCL_ENV},
    }
    print(json.dumps(meta))
    chosen = [s for s in args.only.split(",") if s] or list(SECTIONS)
    timings = {}
    for name in chosen:
        print(f"== {name}", flush=True)
        t0 = time.time()
        try:
            {**SECTIONS, **TUNE_SECTIONS}[name](dev, args.quick)
        except Exception as exc:  # report and carry on with the next section
            traceback.print_exc()
            ERRORS.append({"section": name, "error": repr(exc), "traceback": traceback.format_exc()})
        timings[name] = round(time.time() - t0, 1)
        torch.cuda.empty_cache()
    meta["section_seconds"] = timings
    out = Path(args.out)
    atomic_write_json(out, {**meta, "rows": ROWS, "errors": ERRORS})
    print(f"\nwrote {out} ({len(ROWS)} rows, {len(ERRORS)} errors); section seconds {timings}\n")
    print(_markdown())
    return 1 if ERRORS else 0


if __name__ == "__main__":
    sys.exit(main())
