"""Decode-time projections on the H200 (bf16, M 1/8/16): cuBLAS vs a config sweep of kernels.skinny_linear.

    python bench/bench_skinny.py [--out runs/bench/skinny_<date>.json] [--shapes 8b_o,1b_down] [--ms 1,16]

Shapes (N, K): Llama-3-8B qkv 6144x4096, o 4096x4096, down 4096x14336, lm_head 128256x4096 (gate_up is
fused in kernels/fused_mlp.py); Llama-3.2-1B qkv 3072x2048, o 2048x2048, down 2048x8192. Weights are random
(std 1/sqrt(K)). Every config is first checked against cuBLAS (max abs err <= 1.6e-2 * max(1, max |ref|),
2 bf16 eps as tests/tolerances.py), then timed: CUDA events around each call, 20 warm-up + 100
timed calls, median. A ~25 ms device sleep is queued first so the host runs ahead and the events time the
GPU, not Python launches (back-to-back kernels, as in a CUDA graph). Each call uses the next of >= 4
weight copies (> 200 MB in all), so no call finds its weight in the 50 MB L2: every byte comes from HBM.
Byte floor = N * K * 2 B / 4.29 TB/s (the measured copy ceiling, conf/presets.py).
The o and down shapes also time the projection + residual add + RMSNorm: cuBLAS + add_rmsnorm, the best
skinny config + add_rmsnorm, and skinny_linear_partials + add_rmsnorm_partials (best tile per split_k).
The JSON (git SHA, device, date, config, every timing) has "configs_literal", a ``CONFIGS`` table for
kernels/skinny_linear.py (per (N, K, m_bucket): the config with the least summed time over the M's timed).
Budget: about 2-3 minutes of one GPU, most of it Triton compiles. GPU only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import traceback
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from conf.presets import GPU_PRESETS  # noqa: E402
from conf.rundir import BENCH_DIR, atomic_write_json, git_sha  # noqa: E402

SHAPES = {  # name -> (N, K)
    "8b_qkv": (6144, 4096), "8b_o": (4096, 4096), "8b_down": (4096, 14336), "8b_lm_head": (128256, 4096),
    "1b_qkv": (3072, 2048), "1b_o": (2048, 2048), "1b_down": (2048, 8192),
}
FUSED_SHAPES = ("8b_o", "8b_down", "1b_o", "1b_down")
MS = (1, 8, 16)
SWEEP = [dict(block_n=bn, block_k=bk, split_k=sk, num_warps=4, num_stages=ns)
         for bn in (16, 32, 64) for sk in (1, 2, 4) for bk in (128, 256) for ns in (3, 4)]
WARMUP, ITERS = 20, 100
ROTATE_BYTES = 200e6  # > 4x the H200's 50 MB L2
MIN_COPIES = 4
SLEEP_CYCLES = 50_000_000  # ~25 ms at 1.98 GHz: longer than the host needs to enqueue ITERS calls
BF16_TOL = 1.6e-2
EPS = 1e-5


def sensible(cfg: dict, n: int, k: int, sms: int) -> bool:
    """Whole tiles only, and no split-K where the N tiles alone give >= 4 programs per SM (lm_head)."""
    if n % cfg["block_n"] or k % (cfg["split_k"] * cfg["block_k"]):
        return False
    return cfg["split_k"] == 1 or n // cfg["block_n"] < 4 * sms


def time_us(torch, call, copies: int) -> float:
    """Median GPU time of ``call(i)`` (i-th call: weight copy i % copies) over ITERS calls, in us."""
    for i in range(WARMUP):
        call(i % copies)
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(ITERS)]
    torch.cuda._sleep(SLEEP_CYCLES)
    for i, (a, b) in enumerate(ev):
        a.record()
        call((WARMUP + i) % copies)
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in ev) * 1e3


def max_err(a, b) -> float:
    return (a.double() - b.double()).abs().max().item()


def bench_shape(torch, name: str, n: int, k: int, ms: tuple[int, ...], sms: int, rows: list, errors: list) -> None:
    """Every M at one shape, over >= MIN_COPIES random weight copies of > ROTATE_BYTES in all."""
    ncopies = max(MIN_COPIES, int(ROTATE_BYTES // (n * k * 2)) + 1)
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5 for _ in range(ncopies)]
    g = torch.Generator(device="cuda").manual_seed(n + k)
    for m in ms:
        bench_m(torch, name, m, weights, g, sms, rows, errors)


def bench_m(torch, name: str, m: int, weights: list, g, sms: int, rows: list, errors: list) -> None:
    """cuBLAS, the sweep and (o, down) the fused norm variants at one (shape, M)."""
    import torch.nn.functional as F

    from kernels import add_rmsnorm, add_rmsnorm_partials, skinny_linear, skinny_linear_partials

    (n, k), dt, nc = weights[0].shape, torch.bfloat16, len(weights)
    floor_us = n * k * 2 / GPU_PRESETS["h200"].hbm_bytes_per_s * 1e6
    x = torch.randn(m, k, device="cuda", dtype=dt, generator=g)
    ref = F.linear(x, weights[0])
    tol = BF16_TOL * max(1.0, ref.abs().max().item())
    out = torch.empty(m, n, device="cuda", dtype=dt)
    work = torch.empty(4 * m * n, device="cuda")  # fp32 partials for split_k <= 4
    base = dict(shape=name, n=n, k=k, m=m, floor_us=floor_us)

    def add(provider, us, cfg=None, err=None, **extra):
        rows.append(dict(base, provider=provider, config=cfg, us=us, pct_floor=100 * floor_us / us,
                         max_err=err, **extra))

    add("cublas", time_us(torch, lambda i: F.linear(x, weights[i]), nc))
    for cfg in (c for c in SWEEP if sensible(c, n, k, sms)):
        try:
            err = max_err(skinny_linear(x, weights[0], out=out, workspace=work, **cfg), ref)
            if not err <= tol:
                errors.append(dict(base, config=cfg, error=f"max abs err {err:.3g} > {tol:.3g}"))
                continue
            add("skinny", time_us(torch, lambda i, cfg=cfg: skinny_linear(
                x, weights[i], out=out, workspace=work, **cfg), nc), cfg, err)
        except Exception as exc:  # e.g. out of shared memory: reported, the sweep goes on
            errors.append(dict(base, config=cfg, error=repr(exc)))
    mine = [r for r in rows if r["shape"] == name and r["m"] == m and r["provider"] == "skinny"]
    if name not in FUSED_SHAPES or not mine:
        return
    res = torch.randn(m, n, device="cuda", dtype=dt, generator=g)
    nw = (1 + 0.1 * torch.randn(n, device="cuda", generator=g)).to(dt)
    bufs = (torch.empty_like(res), torch.empty_like(res))
    want = add_rmsnorm(ref, res, nw, EPS)[0].clone()
    best = min(mine, key=lambda r: r["us"])["config"]
    add("cublas+add_rmsnorm", time_us(torch, lambda i: add_rmsnorm(
        F.linear(x, weights[i]), res, nw, EPS, out=bufs), nc), fused=True)
    add("skinny+add_rmsnorm", time_us(torch, lambda i: add_rmsnorm(
        skinny_linear(x, weights[i], out=out, workspace=work, **best), res, nw, EPS, out=bufs), nc),
        best, fused=True)
    for sk in sorted({r["config"]["split_k"] for r in mine}):
        cfg = min((r for r in mine if r["config"]["split_k"] == sk), key=lambda r: r["us"])["config"]
        tile = {key: v for key, v in cfg.items() if key != "split_k"}

        def fused(i, sk=sk, tile=tile):
            part = work[: sk * m * n].view(sk, m, n)
            return add_rmsnorm_partials(skinny_linear_partials(x, weights[i], sk, out=part, **tile), res, nw, EPS,
                                        out=bufs)

        err = max_err(fused(0)[0], want)
        add("partials+add_rmsnorm_partials", time_us(torch, fused, nc), cfg, err, fused=True)


def best_configs(rows: list) -> list[dict]:
    """Per shape: the config with the least time summed over the M's (all in one m_bucket when M <= 16)."""
    return least_total_configs([r for r in rows if r["provider"] == "skinny"])


def least_total_configs(rows: list) -> list[dict]:
    """Per (n, k, m_bucket) of `rows` (each with n, k, m, config, us): the config with the least time summed over the
    bucket's M's, among the configs timed at all of them."""
    from kernels.skinny_linear import m_bucket

    out = []
    for (n, k, bucket) in sorted({(r["n"], r["k"], m_bucket(r["m"])) for r in rows}):
        mine = [r for r in rows if (r["n"], r["k"], m_bucket(r["m"])) == (n, k, bucket)]
        ms = {r["m"] for r in mine}
        totals: dict[str, list] = {}
        for r in mine:
            totals.setdefault(json.dumps(r["config"], sort_keys=True), []).append(r["us"])
        full = {c: sum(t) for c, t in totals.items() if len(t) == len(ms)}
        if full:
            out.append(dict(n=n, k=k, m_bucket=bucket, config=json.loads(min(full, key=full.get))))
    return out


def summary(rows: list) -> list[dict]:
    out = []
    for key in dict.fromkeys((r["shape"], r["m"]) for r in rows):
        mine = [r for r in rows if (r["shape"], r["m"]) == key]
        cub = next(r for r in mine if r["provider"] == "cublas")
        sk = [r for r in mine if r["provider"] == "skinny"]
        best = min(sk, key=lambda r: r["us"]) if sk else None
        out.append(dict(shape=key[0], m=key[1], floor_us=cub["floor_us"], cublas_us=cub["us"],
                        cublas_pct_floor=cub["pct_floor"], best_us=best and best["us"],
                        best_pct_floor=best and best["pct_floor"], best_config=best and best["config"],
                        speedup=best and cub["us"] / best["us"]))
    return out


def markdown(result: dict) -> str:
    lines = ["| shape | M | floor us | cuBLAS us (% floor) | best skinny us (% floor) | speedup | config |",
             "|---|---|---|---|---|---|---|"]
    for s in result["summary"]:
        cfg = s["best_config"]
        cfg_s = (f"bn{cfg['block_n']} bk{cfg['block_k']} sk{cfg['split_k']} w{cfg['num_warps']} "
                 f"s{cfg['num_stages']}") if cfg else "-"
        best = f"{s['best_us']:.1f} ({s['best_pct_floor']:.0f}%) | {s['speedup']:.2f}x" if cfg else "failed | -"
        lines.append(f"| {s['shape']} | {s['m']} | {s['floor_us']:.1f} | {s['cublas_us']:.1f} "
                     f"({s['cublas_pct_floor']:.0f}%) | {best} | {cfg_s} |")
    lines += ["", "| shape | M | provider (+ norm) | split_k | us | max err |", "|---|---|---|---|---|---|"]
    for r in (r for r in result["rows"] if r.get("fused")):
        err = f"{r['max_err']:.2g}" if r["max_err"] is not None else "-"
        sk = r["config"]["split_k"] if r["config"] else "-"
        lines.append(f"| {r['shape']} | {r['m']} | {r['provider']} | {sk} | {r['us']:.1f} | {err} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    """Command line: see the module docstring."""
    today = datetime.date.today().isoformat()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=BENCH_DIR / f"skinny_{today}.json")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset of: " + ", ".join(SHAPES))
    ap.add_argument("--ms", default=",".join(map(str, MS)), help="comma-separated row counts M (<= 64)")
    a = ap.parse_args(argv)
    import torch
    import triton

    if not torch.cuda.is_available():
        raise SystemExit("bench_skinny.py needs a CUDA GPU (the CPU tests are tests/kernels/test_skinny_linear.py)")
    from kernels.skinny_linear import sm_count

    shapes = [s for s in a.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shapes {unknown}; choose from {list(SHAPES)}")
    ms = tuple(int(v) for v in a.ms.split(",") if v)
    sms = sm_count(torch.device("cuda"))
    rows: list[dict] = []
    errors: list[dict] = []
    for name in shapes:
        print(f"{name} {SHAPES[name]}", flush=True)
        try:
            bench_shape(torch, name, *SHAPES[name], ms, sms, rows, errors)
        except Exception as exc:
            errors.append({"shape": name, "error": repr(exc), "traceback": traceback.format_exc()})
            print(f"  {name} failed: {exc!r}", flush=True)
        torch.cuda.empty_cache()
    configs = best_configs(rows)
    literal = "{\n" + "".join(f"    ({c['n']}, {c['k']}, {c['m_bucket']}): {c['config']!r},\n" for c in configs) + "}"
    result = {
        "benchmark": "skinny_linear", "date": today, "git_sha": git_sha(), "device": torch.cuda.get_device_name(0),
        "versions": {"torch": torch.__version__, "triton": triton.__version__},
        "config": {"shapes": {s: SHAPES[s] for s in shapes}, "ms": ms, "dtype": "bfloat16", "sweep": SWEEP,
                   "warmup": WARMUP, "iters": ITERS, "stat": "median of per-call CUDA events",
                   "rotate_bytes_min": ROTATE_BYTES, "min_copies": MIN_COPIES, "sm_count": sms,
                   "hbm_bytes_per_s": GPU_PRESETS["h200"].hbm_bytes_per_s, "eps": EPS},
        "summary": summary(rows), "configs": configs, "configs_literal": literal, "rows": rows, "errors": errors,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(a.out, result)
    print(f"CONFIGS = {literal}")
    print(json.dumps({"json": str(a.out), "device": result["device"], "errors": len(errors)}))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
