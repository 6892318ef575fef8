"""What issue 7's ratio targets need, in the calibrated simulator (CPU): async_tree / serial_tree and async_tree /
autoregressive tokens/s, each mode at its best configuration, and async_tree's iteration / verify time, across
acceptance tables, draft host costs and draft kernel speeds.

    python tools/bench_ratio_bounds.py [--profile profiles/h200.json] [--top1 0.75,0.85] [--host 1,0.5,0]
                                       [--device 1,0.8,0.6] [--draft-bits 16,8] [--quick] [--out DIR]

Workload a's shapes (Llama-3-8B target + Llama-3.2-1B draft, 1 + 1 GPUs, 1K prompt, 512 new tokens, one request).
Per acceptance table and draft host scale:
- autoregressive: one run;
- serial_tree: the best over bs x w in {4, 8, 16}^2 and d in {auto, 1, 2, 3};
- async_tree: the best of `simulator.autoconfig.search` on the 1 + 1 split (bs x w in {4, 8, 16}^2, d auto or
  1..6), and workload a's measured pick (bs 8 w 16 d 3, `PICK`); for both, the iteration time over the verify time
  (the iteration target: <= 1.10x).
Acceptance tables: `smollm2` (the real pair's measured positional table, depth-dependent; the one workload a
feeds its oracle), then one-row tables with a top-1 acceptance of `--top1`, whose lower ranks are the measured
table's first row rescaled so the same share of the rest is caught by ranks 1..7. Host scale:
`sim.whatif.draft_host_scale`, the profile's fitted draft host costs (runtime block: `expand_extra_s`,
`expand_extra_per_row_s` or `expand_extra_per_real_row_s`, `draft_round_s`) times the scale, for both tree modes
alike (a what-if on the draft's Python and launches, not on its kernels). Device scale: `sim.whatif.draft_device_scale`,
the draft's kernel time times the scale (0.6: the Llama-3.2-1B one-row step at about its byte floor). Draft bits:
`model.draft.weight_bits` (8: the runtime's fp8 draft weights, priced by the profile's `gemm_fp8` and its measured
shapes where it has them).

Writes `<out>/ratio_bounds_<date>.json` (git SHA, date, config, every cell's best configurations) and prints a
table. Simulated, not measured: the profile's validation (docs/VALIDATION.md) says how far to trust it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from conf import compose_config  # noqa: E402
from conf.rundir import BENCH_DIR, atomic_write_json, git_sha  # noqa: E402
from simulator.autoconfig import search  # noqa: E402
from simulator.simulation import DRAFT_HOST_KEYS, simulate  # noqa: E402

BASE = ["model=llama3-8b_llama3.2-1b", "parallel=1x1", "workload=shape_realistic", "workload.num_requests=1",
        "workload.max_new_tokens=512", "kernels=graphs", "trace.enabled=false"]
GRID = (4, 8, 16)
SERIAL_D = ("auto", "1", "2", "3")
ASYNC_D = ("auto", *(str(d) for d in range(1, 7)))
PICK = (8, 16, "3")
"""Workload a's measured async_tree pick (bs, w, d): docs/BENCHMARKS_RUNTIME.md, 954a1bf."""


def one_row_table(top1: float, measured_row: list[float]) -> list[list[float]]:
    """A one-row positional table: rank 0 accepted with `top1`, ranks 1.. the measured row's, rescaled so they
    keep their share of the remaining probability."""
    if not 0.0 < top1 < 1.0:
        raise SystemExit(f"--top1: each value must be in (0, 1), got {top1}")
    scale = (1.0 - top1) / (1.0 - measured_row[0])
    return [[top1, *(p * scale for p in measured_row[1:])]]


def _tokens_per_s(sim) -> float:
    return sim.tally.generated_tokens / sim.tally.wall_s


def _accept(sim) -> float:
    return sim.tally.generated_tokens / sim.tally.verifies


def _async_run(ov: list[str], bs: int, w: int, d: str) -> dict:
    """One async_tree simulation: tokens/s, accepted length and iteration / verify time (d=auto resolved by
    sim.d_rule, as in the autoconfig search)."""
    sim = simulate(compose_config("simulate", [*ov, "spec=async_tree", f"spec.bs={bs}", f"spec.w={w}",
                                               f"spec.d={d}"]), record_events=False)
    t = sim.tally
    iteration = (t.wall_s - t.prefill_s) / t.verifies
    return {"bs": bs, "w": w, "d": d, "d_used": sim.d_used, "tokens_per_s": _tokens_per_s(sim),
            "accept_len": _accept(sim), "iteration_over_verify": iteration / (t.verify_s / t.verifies)}


def cell(acceptance: list[str], profile: str, host_scale: float, grid: tuple[int, ...],
         serial_d: tuple[str, ...], async_d: tuple[str, ...], device_scale: float = 1.0, draft_bits: int = 16) -> dict:
    """Best autoregressive, serial_tree and async_tree runs, and the pick's async_tree run, under one acceptance
    table, profile, draft host scale, draft device scale and draft weight width."""
    ov = [*BASE, *acceptance, f"sim.profile={profile}", f"sim.whatif.draft_host_scale={host_scale}",
          f"sim.whatif.draft_device_scale={device_scale}", f"model.draft.weight_bits={draft_bits}"]
    ar = simulate(compose_config("simulate", [*ov, "spec=autoregressive"]), record_events=False)
    serial = []
    for bs in grid:
        for w in grid:
            for d in serial_d:
                sim = simulate(compose_config("simulate", [*ov, "spec=serial_tree", f"spec.bs={bs}", f"spec.w={w}",
                                                           f"spec.d={d}"]), record_events=False)
                serial.append({"bs": bs, "w": w, "d": d, "d_used": sim.d_used, "tokens_per_s": _tokens_per_s(sim),
                               "accept_len": _accept(sim)})
    best_s = max(serial, key=lambda r: r["tokens_per_s"])
    ranked = search(compose_config("simulate", [*ov, "spec=async_tree"]), splits=[1], bs_values=grid,
                    w_values=grid, d_values=async_d)
    a = next(c for c in ranked if not c.error)
    best_a = _async_run(ov, a.bs, a.w, a.d)  # the search's best again, for its iteration / verify
    ar_tps = _tokens_per_s(ar)
    return {"autoregressive_tokens_per_s": ar_tps, "serial_best": best_s, "async_best": best_a,
            "async_pick": _async_run(ov, *PICK),
            "async_over_serial": best_a["tokens_per_s"] / best_s["tokens_per_s"],
            "async_over_ar": best_a["tokens_per_s"] / ar_tps}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="profiles/h200.json", help="calibrated profile with a runtime block")
    ap.add_argument("--top1", default="0.75,0.85,0.9", help="one-row tables' top-1 acceptances (comma-separated)")
    ap.add_argument("--host", default="1,0.5,0", help="draft host cost scales (comma-separated, >= 0)")
    ap.add_argument("--device", default="1", help="draft kernel time scales (comma-separated, > 0)")
    ap.add_argument("--draft-bits", default="16", help="draft weight widths, 16 and / or 8 (comma-separated)")
    ap.add_argument("--quick", action="store_true", help="bs, w in {8}, d in {auto, 3} (tests)")
    ap.add_argument("--out", type=Path, default=BENCH_DIR, help="results folder")
    args = ap.parse_args(argv)
    path = Path(args.profile)
    if not path.is_file():
        raise SystemExit(f"--profile: {args.profile} is not a file (a calibrated profile, e.g. profiles/h200.json)")
    profile = json.loads(path.read_text())
    runtime = profile.get("runtime", {})
    missing = [k for k in ("expand_extra_s", "draft_round_s") if k not in runtime]
    per_row = ("expand_extra_per_row_s", "expand_extra_per_real_row_s")  # per row of w (older fits) or real row
    if not any(k in runtime for k in per_row):
        missing.append(" or runtime.".join(per_row))
    if missing:
        raise SystemExit(f"--profile: {args.profile} has no runtime.{', runtime.'.join(missing)} (a profile fitted "
                         "with runtime runs: calibrate.py runs=[...])")
    try:
        top1 = [float(x) for x in args.top1.split(",") if x]
        host = [float(x) for x in args.host.split(",") if x]
        device = [float(x) for x in args.device.split(",") if x]
    except ValueError as e:
        raise SystemExit(f"--top1 / --host / --device: comma-separated numbers expected ({e})") from None
    if any(h < 0 for h in host) or not host:
        raise SystemExit(f"--host: scales must be >= 0 (at least one), got {args.host}")
    if not device or not all(0 < v < float("inf") for v in device):
        raise SystemExit(f"--device: scales must be finite and > 0 (at least one), got {args.device}")
    bits = [b.strip() for b in args.draft_bits.split(",") if b.strip()]
    if not bits or any(b not in ("16", "8") for b in bits):
        raise SystemExit(f"--draft-bits: 16 and / or 8 (the widths the runtime runs), got {args.draft_bits!r}")
    measured = json.loads((REPO_ROOT / "profiles" / "acceptance" / "smollm2.json").read_text())["positional"]
    tables = [("smollm2 (measured)", ["acceptance=smollm2"])]
    tables += [(f"top-1 {p:g}", [f"acceptance.positional={json.dumps(one_row_table(p, measured[0]))}",
                                 "acceptance.file=null"]) for p in top1]
    grid, serial_d, async_d = ((8,), ("auto", "3"), ("auto", "3")) if args.quick else (GRID, SERIAL_D, ASYNC_D)
    cells = [{"acceptance": label, "overrides": acc, "host_scale": scale, "device_scale": dev, "draft_bits": int(b),
              **cell(acc, args.profile, scale, grid, serial_d, async_d, dev, int(b))}
             for b in bits for dev in device for scale in host for label, acc in tables]
    record = {"benchmark": "ratio_bounds", "git_sha": git_sha(), "date": datetime.date.today().isoformat(),
              "device": "simulated (no GPU)",
              "config": {"profile": args.profile, "base": BASE, "host_keys": DRAFT_HOST_KEYS, "grid": grid,
                         "serial_d": serial_d, "async_d": async_d, "pick": PICK}, "cells": cells}
    out = args.out / f"ratio_bounds_{record['date']}.json"
    atomic_write_json(out, record)
    print("| acceptance | draft host | draft kernels | draft bits | AR tok/s | best serial (bs w d: tok/s, accept) | "
          "best async (bs w d: tok/s, accept, iteration / verify) | the pick (tok/s, iteration / verify) | "
          "async / serial | async / AR |\n|---|---|---|---|---|---|---|---|---|---|")
    for c in cells:
        s, a, p = c["serial_best"], c["async_best"], c["async_pick"]
        print(f"| {c['acceptance']} | x{c['host_scale']:g} | x{c['device_scale']:g} | {c['draft_bits']} | "
              f"{c['autoregressive_tokens_per_s']:.1f} | "
              f"{s['bs']} {s['w']} {s['d']}={s['d_used']}: {s['tokens_per_s']:.1f}, {s['accept_len']:.2f} | "
              f"{a['bs']} {a['w']} {a['d']}={a['d_used']}: {a['tokens_per_s']:.1f}, {a['accept_len']:.2f}, "
              f"{a['iteration_over_verify']:.3f}x | d={p['d_used']}: {p['tokens_per_s']:.1f}, "
              f"{p['iteration_over_verify']:.3f}x | {c['async_over_serial']:.2f}x | {c['async_over_ar']:.2f}x |")
    print(f"-> {out}")
    return record


if __name__ == "__main__":
    main(sys.argv[1:])
