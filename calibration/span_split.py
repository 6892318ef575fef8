"""Where a runtime step's time goes beyond the simulator's device price (CPU, over measured run dirs).

    python -m calibration.span_split RUN_DIR [RUN_DIR ...] [--profile profiles/h200.json] [--out FILE]

For runs recorded with `trace.graph_events=true`, every replayed verify and expansion span carries its in-run
device time (`gpu_replay_s`: CUDA events around the graph replay). Per (run, span kind, rows) this prints the medians
of the span, of the cost model's device price of that step (`GroupCost.forward_s` from the profile's operators alone,
no runtime block) and of the in-run replay, and splits the span's residual (span - price) into

    device error = replay - price    (what the operator model misses on the device)
    host         = span - replay     (what the runtime block's host costs stand for)

The profile's runtime block fits the whole residual per loop; where the device error differs between model sizes,
that block does not carry over from one size to another (docs/LOG.md, twenty-sixth session). Writes a JSON (git SHA,
date, profile, rows) and prints a table. Spans without device times (runs without graph events) are skipped and
counted.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conf.rundir import BENCH_DIR, atomic_write_json, git_sha  # noqa: E402
from simulator.profile import Profile, load_profile  # noqa: E402
from simulator.runtime_fit import draft_span_group, traced_run  # noqa: E402

SPANS = {"step.verify": "target", "step.expand": "draft"}
"""Span name -> the GroupCost that prices it."""


def split_run(run_dir: Path, profile: Profile) -> tuple[list[dict[str, Any]], int]:
    """(rows, spans without device times) of one run dir: per span kind and row count, the medians (us)."""
    config, path, spans, costs = traced_run(run_dir, profile)
    groups: dict[tuple[str, int], list[tuple[float, float, float]]] = defaultdict(list)
    skipped = 0
    for name, role in SPANS.items():
        cost = costs.target if role == "target" else costs.draft
        group = "target" if role == "target" else draft_span_group(config)
        for r in spans.get((group, name), []):
            extra = r.extra_fields(f"{path}: {r.name}")
            if cost is None or r.tokens <= 0 or "gpu_replay_s" not in extra:
                skipped += 1
                continue
            groups[(name, r.tokens)].append((r.duration_s, cost.forward_s(r.tokens, r.ctx + r.tokens),
                                             float(extra["gpu_replay_s"])))
    rows = []
    for (name, tokens), xs in sorted(groups.items()):
        span, price, replay = (statistics.median(x[i] for x in xs) * 1e6 for i in range(3))
        rows.append({"run": run_dir.name, "model": config.model.name, "mode": config.spec.mode,
                     "split": f"{config.parallel.target_gpus}x{config.parallel.draft_gpus}", "span": name,
                     "rows": tokens, "n": len(xs), "span_us": span, "price_us": price, "replay_us": replay,
                     "device_error_us": replay - price, "host_us": span - replay})
    return rows, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="run dirs recorded with trace.graph_events=true")
    ap.add_argument("--profile", default="profiles/h200.json", help="profile whose operators price the steps")
    ap.add_argument("--out", default=None, help="JSON (default: runs/bench/span_split_<date>_<sha>.json)")
    args = ap.parse_args(argv)
    profile = load_profile(args.profile)
    rows, skipped = [], {}
    for d in args.runs:
        run_rows, n = split_run(Path(d), profile)
        rows += run_rows
        skipped[str(d)] = n
    date, sha = datetime.date.today().isoformat(), git_sha()
    out = Path(args.out or BENCH_DIR / f"span_split_{date}_{sha[:7]}.json")
    atomic_write_json(out, {"benchmark": "span_split", "date": date, "git_sha": sha, "profile": args.profile,
                            "runs": args.runs, "skipped_spans": skipped, "rows": rows})
    print("| run | span | rows | n | span us | price us | replay us | device error us | host us |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['run']} | {r['span']} | {r['rows']} | {r['n']} | {r['span_us']:.0f} | {r['price_us']:.0f} | "
              f"{r['replay_us']:.0f} | {r['device_error_us']:+.0f} | {r['host_us']:.0f} |")
    print(f"{out}; spans without device times: {sum(skipped.values())}")
    return 0 if rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
