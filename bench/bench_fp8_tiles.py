"""Tile sweep of the fp8-weight kernels (`weight_bits=8`) on the H200: the tiles the bf16 tables pick vs the best.

    python bench/bench_fp8_tiles.py [--out runs/bench/fp8_tiles_<date>.json] [--shapes 1b_qkv,1b_gate_up]
                                    [--ms 1,8,16] [--budget-s 240]

The runtime's fp8 decode GEMMs (runtime/model.py) stream float8 e4m3 codes + a float32 scale per row, half the bytes
of bf16, through the same kernels: `skinny_linear` (QKV), `skinny_linear_partials` (o, down: the next norm sums the
partials) and the fused `swiglu` (gate / up). Their tiles came from the bf16 tables (`kernels.skinny_linear.CONFIGS`,
`pick_config`; `fused_mlp.BLOCK_I` / `BLOCK_K`), tuned where a tile load is twice the bytes. Per shape (the Llama-3.2-1B
and Llama-3-8B decode projections) and M, every tile of the sweep is checked against the float32 product of the fp16
input and the dequantized weights (max abs error <= FP8_TOL * max(1, max |ref|)), then timed as bench/bench_skinny.py
times (CUDA events per call behind a device sleep, weight copies rotated past the L2, median). The default row is
the tile the kernels pick now (for fp8: the bf16 tables, unless `kernels.skinny_linear.FP8_CONFIGS` /
`kernels.fused_mlp.FP8_TILES` hold the shape). The JSON (git SHA, device, date, config, every timing) has the
literals of both tables: per (N, K, m_bucket) the tile with the least summed time over the M's of that bucket.
GPU only; a budget bounds the sweep (shapes not reached are listed in the JSON).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import traceback
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.bench_skinny import least_total_configs, max_err, sensible, time_us  # noqa: E402
from conf.presets import GPU_PRESETS  # noqa: E402
from conf.rundir import BENCH_DIR, atomic_write_json, git_sha  # noqa: E402

SHAPES = {  # name -> (kernel, N or I, K)
    "1b_qkv": ("skinny", 3072, 2048), "1b_o": ("partials", 2048, 2048), "1b_gate_up": ("swiglu", 8192, 2048),
    "1b_down": ("partials", 2048, 8192),
    "8b_qkv": ("skinny", 6144, 4096), "8b_o": ("partials", 4096, 4096), "8b_gate_up": ("swiglu", 14336, 4096),
    "8b_down": ("partials", 4096, 14336),
}
MS = (1, 8, 16)
SKINNY_SWEEP = [dict(block_n=bn, block_k=bk, split_k=sk, num_warps=4, num_stages=ns)
                for bn in (16, 32, 64) for bk in (128, 256, 512) for sk in (1, 2, 4, 8) for ns in (3, 4)]
SWIGLU_SWEEP = [dict(block_i=bi, block_k=bk) for bi in (16, 32, 64, 128) for bk in (64, 128, 256, 512)]
ROTATE_BYTES, MIN_COPIES = 200e6, 4
FP8_TOL = 1e-2  # fp16 inputs and fp8 -> fp16 weights, float32 accumulation: ~1e-3 relative; margin


def table_literal(best: list[dict]) -> str:
    """A Python dict literal of (N, K, m_bucket) -> tile, for the kernels' fp8 tables."""
    return "{\n" + "".join(f"    ({b['n']}, {b['k']}, {b['m_bucket']}): {b['config']!r},\n" for b in best) + "}"


def best_tiles(rows: list[dict], kernels: tuple[str, ...]) -> list[dict]:
    """Per (N, K, m_bucket) of `kernels`' rows: the swept tile with the least time summed over that bucket's M's."""
    return least_total_configs([r for r in rows if r["kernel"] in kernels and r["tile"] != "default"])


def bench_shape(torch, name: str, ms: tuple[int, ...], sms: int, rows: list, errors: list, deadline: float) -> None:
    """Every M of one shape: the current tile ("default") and each swept one."""
    from kernels import skinny_linear, skinny_linear_partials, swiglu
    from kernels.skinny_linear import quantize_rows_fp8

    kernel, n, k = SHAPES[name]
    rows_n = 2 * n if kernel == "swiglu" else n  # gate and up: one [2I, K] weight, as runtime/model.py holds w13
    wbytes = rows_n * k + 4.0 * rows_n
    copies = max(MIN_COPIES, int(ROTATE_BYTES // wbytes) + 1)
    g = torch.Generator(device="cuda").manual_seed(rows_n + k)
    ws = [quantize_rows_fp8(torch.randn(rows_n, k, device="cuda", generator=g).to(torch.bfloat16) / k**0.5)
          for _ in range(copies)]
    floor_us = wbytes / GPU_PRESETS["h200"].hbm_bytes_per_s * 1e6

    def call(i: int, x, cfg: dict):
        q, s = ws[i]
        if kernel == "swiglu":
            (gate, up), (sg, su) = q.chunk(2, dim=0), s.chunk(2)
            return swiglu(x, gate, up, scale_gate=sg, scale_up=su, **cfg)
        if kernel == "partials":
            return skinny_linear_partials(x, q, w_scale=s, **cfg)
        return skinny_linear(x, q, w_scale=s, **cfg)

    sweep = SWIGLU_SWEEP if kernel == "swiglu" else [c for c in SKINNY_SWEEP if sensible(c, n, k, sms)]
    deq = ws[0][0].float() * ws[0][1][:, None]  # the first copy, which the checks use
    for m in ms:
        x = torch.randn(m, k, device="cuda", generator=g).to(torch.float16)
        ref = x.float() @ deq.T
        if kernel == "swiglu":
            ref = torch.nn.functional.silu(ref[:, :n]) * ref[:, n:]
        tol = FP8_TOL * max(1.0, ref.abs().max().item())
        base = dict(shape=name, kernel=kernel, n=n, k=k, m=m, floor_us=floor_us)
        for cfg in [None, *sweep]:
            if time.perf_counter() > deadline:
                errors.append(dict(base, error="budget reached"))
                return
            try:
                got = call(0, x, cfg or {})
                got = got.sum(0) if kernel == "partials" else got
                err = max_err(got.float(), ref)
                if not err <= tol:
                    errors.append(dict(base, config=cfg, error=f"max abs err {err:.3g} > {tol:.3g}"))
                    continue
                us = time_us(torch, lambda i, cfg=cfg, x=x: call(i, x, cfg or {}), copies)
                rows.append(dict(base, tile="default" if cfg is None else "swept", config=cfg, us=us,
                                 pct_floor=100 * floor_us / us, max_err=err))
            except Exception as exc:  # e.g. out of shared memory: reported, the sweep goes on
                errors.append(dict(base, config=cfg, error=repr(exc)[:300]))


def summary(rows: list[dict]) -> list[dict]:
    """Per (shape, M): the default tile's time, the best swept one's, and their ratio."""
    out = []
    for key in dict.fromkeys((r["shape"], r["m"]) for r in rows):
        mine = [r for r in rows if (r["shape"], r["m"]) == key]
        default = next((r for r in mine if r["tile"] == "default"), None)
        swept = [r for r in mine if r["tile"] == "swept"]
        best = min(swept, key=lambda r: r["us"]) if swept else None
        out.append(dict(shape=key[0], m=key[1], floor_us=mine[0]["floor_us"],
                        default_us=default and default["us"], best_us=best and best["us"],
                        best_config=best and best["config"],
                        speedup=default and best and default["us"] / best["us"]))
    return out


def markdown(result: dict) -> str:
    lines = ["| shape | M | floor us | current tile us (% floor) | best tile us (% floor) | speedup | best tile |",
             "|---|---|---|---|---|---|---|"]
    for s in result["summary"]:
        fl = s["floor_us"]
        cur = f"{s['default_us']:.1f} ({100 * fl / s['default_us']:.0f}%)" if s["default_us"] else "-"
        best = f"{s['best_us']:.1f} ({100 * fl / s['best_us']:.0f}%)" if s["best_us"] else "-"
        sp = f"{s['speedup']:.2f}x" if s["speedup"] else "-"
        cfg = " ".join(f"{k.replace('block_', 'b').replace('split_k', 'sk')}={v}" for k, v in
                       (s["best_config"] or {}).items())
        lines.append(f"| {s['shape']} | {s['m']} | {fl:.1f} | {cur} | {best} | {sp} | {cfg} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    """Command line: see the module docstring."""
    today = datetime.date.today().isoformat()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=BENCH_DIR / f"fp8_tiles_{today}.json")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset of: " + ", ".join(SHAPES))
    ap.add_argument("--ms", default=",".join(map(str, MS)), help="comma-separated row counts M (<= 64)")
    ap.add_argument("--budget-s", type=float, default=240.0, help="wall-clock budget of the sweep")
    a = ap.parse_args(argv)
    shapes = [s for s in a.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise SystemExit(f"--shapes: unknown {unknown}; choose from {list(SHAPES)}")
    ms = tuple(int(v) for v in a.ms.split(",") if v)
    if not ms or any(not 1 <= m <= 64 for m in ms):
        raise SystemExit(f"--ms: row counts in 1..64, got {a.ms!r}")
    import torch
    import triton

    if not torch.cuda.is_available():
        raise SystemExit("bench_fp8_tiles.py needs a CUDA GPU (the CPU tests are tests/kernels/test_fp8_weights.py)")
    from kernels.skinny_linear import sm_count

    sms = sm_count(torch.device("cuda"))
    deadline = time.perf_counter() + a.budget_s
    rows: list[dict] = []
    errors: list[dict] = []
    for name in shapes:
        print(f"{name} {SHAPES[name]}", flush=True)
        try:
            bench_shape(torch, name, ms, sms, rows, errors, deadline)
        except Exception as exc:
            errors.append({"shape": name, "error": repr(exc), "traceback": traceback.format_exc()})
            print(f"  {name} failed: {exc!r}", flush=True)
        torch.cuda.empty_cache()
    skinny = best_tiles(rows, ("skinny", "partials"))
    fused = best_tiles(rows, ("swiglu",))
    result = {
        "benchmark": "fp8_tiles", "date": today, "git_sha": git_sha(), "device": torch.cuda.get_device_name(0),
        "versions": {"torch": torch.__version__, "triton": triton.__version__},
        "config": {"shapes": {s: SHAPES[s] for s in shapes}, "ms": ms, "x_dtype": "float16",
                   "weights": "float8_e4m3fn + float32 row scales (quantize_rows_fp8 of random bf16)",
                   "skinny_sweep": SKINNY_SWEEP, "swiglu_sweep": SWIGLU_SWEEP, "budget_s": a.budget_s,
                   "stat": "median of per-call CUDA events (bench_skinny.time_us)", "rotate_bytes_min": ROTATE_BYTES,
                   "sm_count": sms, "hbm_bytes_per_s": GPU_PRESETS["h200"].hbm_bytes_per_s, "tol": FP8_TOL},
        "summary": summary(rows), "fp8_configs": skinny, "fp8_configs_literal": table_literal(skinny),
        "swiglu_fp8_tiles": fused, "swiglu_fp8_tiles_literal": table_literal(fused),
        "rows": rows, "errors": errors,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(a.out, result)
    print(f"FP8_CONFIGS = {result['fp8_configs_literal']}\nFP8_TILES = {result['swiglu_fp8_tiles_literal']}")
    print(json.dumps({"json": str(a.out), "device": result["device"], "rows": len(rows), "errors": len(errors)}))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
