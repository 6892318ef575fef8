"""The GPU-split table of docs/SPLITS.md, simulated from a profile: 70B-shaped target + 3B draft on 4 and 8 GPUs.

Rows: async_tree and serial_tree at every split of `SPLITS`, autoregressive decoding on all 8 GPUs, then the
simulator's recommended configuration on 8 GPUs (`simulator.autoconfig.search`). Every row is simulated with
`conf/simulate.yaml` plus the overrides below (the same as `python simulate.py model=llama3-70b_llama3.2-3b
parallel=TxD spec=MODE workload.num_requests=2 workload.prompt_tokens=512 workload.max_new_tokens=512`; a 4-GPU row
is its split on one node). Nothing here is measured.

    python -m analysis.splits_doc --profile profiles/h200.json --out runs/bench/splits_<date>.json
        -> the JSON (git SHA, date, profile, overrides, rows, pick) and the markdown table on stdout
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import sys
import time
from pathlib import Path
from typing import Any

from conf import compose_config

SPLITS = ((8, 4, 4), (8, 6, 2), (8, 7, 1), (4, 3, 1), (4, 2, 2))  # (GPUs, target, draft)
MODES = ("async_tree", "serial_tree")
BASE = ["model=llama3-70b_llama3.2-3b", "workload.num_requests=2", "workload.prompt_tokens=512",
        "workload.max_new_tokens=512", "trace.enabled=false"]


def simulate_row(gpus: int, target: int, draft: int, mode: str, profile: str) -> dict[str, Any]:
    """One table row: the simulator's metrics of `mode` on `target` + `draft` GPUs of a `gpus`-GPU machine."""
    from simulator.main import run_simulation

    ov = [*BASE, f"parallel={target}x{draft}", f"spec={mode}", f"sim.profile={profile}"]
    _, m = run_simulation(compose_config("simulate", ov))
    keys = ("tokens_per_s", "iteration_time_s", "verify_time_s", "mean_accept_len", "d")
    return {"gpus": gpus, "target_gpus": target, "draft_gpus": draft, "mode": mode, "overrides": ov,
            **{k: m[k] for k in keys}}


def pick(profile: str) -> dict[str, Any]:
    """The simulator's recommended configuration on 8 GPUs and its two runners-up."""
    from simulator.autoconfig import search

    config = compose_config("simulate", [*BASE, "parallel=7x1", "spec=async_tree", f"sim.profile={profile}"])
    t0 = time.perf_counter()
    ranked = [c for c in search(config) if not c.error]
    return {"candidates": len(ranked), "search_s": time.perf_counter() - t0,
            "top": [dataclasses.asdict(c) for c in ranked[:3]]}


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of docs/SPLITS.md (measured columns: not run)."""
    lines = ["| GPUs | target:draft | mode | simulated tok/s | iteration (ms) | verify (ms) | accept len | d | "
             "measured tok/s | error |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['gpus']} | {r['target_gpus']}:{r['draft_gpus']} | {r['mode']} | {r['tokens_per_s']:.1f} | "
                     f"{r['iteration_time_s'] * 1e3:.2f} | {r['verify_time_s'] * 1e3:.2f} | "
                     f"{r['mean_accept_len']:.2f} | {r['d']} | not run | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="profiles/h200.json", help="calibrated profile (sim.profile)")
    ap.add_argument("--out", type=Path, help="JSON results file (written atomically)")
    args = ap.parse_args(argv)
    if not Path(args.profile).is_file():
        raise SystemExit(f"--profile: {args.profile} is not a file (a calibrated profile, e.g. profiles/h200.json)")
    from conf.rundir import atomic_write_json, git_sha

    rows = [simulate_row(g, t, d, mode, args.profile) for g, t, d in SPLITS for mode in MODES]
    rows.append(simulate_row(8, 8, 0, "autoregressive", args.profile))
    record = {"benchmark": "splits", "git_sha": git_sha(), "date": _dt.date.today().isoformat(),
              "device": "simulated (no GPU)", "profile": args.profile, "rows": rows, "pick": pick(args.profile)}
    print(table(rows))
    for c in record["pick"]["top"]:
        print(f"pick {c['target_gpus']}:{c['draft_gpus']} bs {c['bs']} w {c['w']} d {c['d']}: "
              f"{c['tokens_per_s']:.1f} tok/s")
    if args.out:
        atomic_write_json(args.out, record)
    return record


if __name__ == "__main__":
    main(sys.argv[1:])
