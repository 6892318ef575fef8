"""Draft expansion time by phase and position within an iteration, from runtime run dirs' traces.jsonl.

An async_tree iteration's expansions are a refill (after a miss: before the send, the target idle) and
overlapped ones (after the send, while the target verifies); serial modes add serial ones. Comparing their
medians separates what an expansion costs alone from what it costs next to a verify (docs/VALIDATION.md,
"Known limits").

    python bench/expand_positions.py RUN_DIR [RUN_DIR ...] [--json OUT]
        -> one line per run: median ms (count) per (position, phase), and overlap - refill in ms
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
from pathlib import Path
from typing import Any

from conf.rundir import atomic_write_json
from conf.trace import TRACE_FILE, read_traces


def expand_positions(run_dir: Path) -> dict[str, Any]:
    """{"positions": {"<i><phase initial>": {"median_ms", "n"}}, "phase": {phase: {"median_ms", "n"}},
    "device_phase": the same over the spans' device_s (trace.graph_events runs), "overlap_minus_refill_ms"}
    for one run dir."""
    path = run_dir / TRACE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no {TRACE_FILE} (expected a runtime run dir)")
    by_iteration: dict[int, list[tuple[float, float, str, Any]]] = collections.defaultdict(list)
    for rec in read_traces(path):
        if rec.name == "step.expand":
            extra = rec.extra_fields(f"{path}: step.expand of iteration {rec.iteration}")
            by_iteration[rec.iteration].append((rec.start_s, rec.duration_s, extra.get("phase", "?"),
                                                extra.get("device_s")))
    positions: dict[str, list[float]] = collections.defaultdict(list)
    phases: dict[str, list[float]] = collections.defaultdict(list)
    device: dict[str, list[float]] = collections.defaultdict(list)  # trace.graph_events runs only
    for spans in by_iteration.values():
        for i, (_, dur, phase, device_s) in enumerate(sorted(spans)):
            positions[f"{i}{phase[0]}"].append(dur)
            phases[phase].append(dur)
            if device_s is not None:
                device[phase].append(float(device_s))

    def summary(values: list[float]) -> dict[str, Any]:
        return {"median_ms": round(statistics.median(values) * 1e3, 4), "n": len(values)}

    med = {p: statistics.median(v) for p, v in phases.items()}
    gap = (med["overlap"] - med["refill"]) * 1e3 if "overlap" in med and "refill" in med else None
    return {"run": run_dir.name, "positions": {k: summary(v) for k, v in sorted(positions.items())},
            "phase": {k: summary(v) for k, v in sorted(phases.items())},
            "device_phase": {k: summary(v) for k, v in sorted(device.items())},
            "overlap_minus_refill_ms": None if gap is None else round(gap, 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="runtime run dirs (or folders of run dirs)")
    ap.add_argument("--json", help="write every run's summary here")
    args = ap.parse_args(argv)
    dirs: list[Path] = []
    for r in map(Path, args.runs):
        dirs += [r] if (r / TRACE_FILE).exists() else sorted(p.parent for p in r.glob(f"*/{TRACE_FILE}"))
    if not dirs:
        print(f"expand_positions: no run dir with {TRACE_FILE} under {args.runs}", file=sys.stderr)
        return 2
    rows = [expand_positions(d) for d in dirs]
    for r in rows:
        cells = " ".join(f"{k}:{v['median_ms']:.3f}({v['n']})" for k, v in r["positions"].items() if v["n"] >= 5)
        gap = r["overlap_minus_refill_ms"]
        dev = " ".join(f"{k}:{v['median_ms']:.3f}" for k, v in r["device_phase"].items())
        print(f"{r['run']:30s} overlap-refill {'-' if gap is None else f'{gap:+.3f}'} ms | {cells}"
              + (f" | device {dev}" if dev else ""))
    if args.json:
        atomic_write_json(Path(args.json), {"runs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
