"""How fast the host runs Python, per CPU and per run: the speed that every host-bound runtime cost scales with.

    python bench/host_speed.py probe [--passes 2] [--reps 7] [--loops 1000000] [--out FILE]
    python bench/host_speed.py runs RUN_DIR [RUN_DIR ...] [--out FILE]

probe: times a fixed pure-Python loop (`loops` additions) `reps` times on each CPU this process may use, pinned
there with `os.sched_setaffinity`, `passes` times over all CPUs; min and median milliseconds per CPU and pass.
On the device's 16-vCPU VMs (2026-12-01, git e2553d0) the loop took either ~35 or ~63 ms, on any vCPU, and a vCPU
that was fast in one pass was often slow in the next: the VM's vCPUs run at two speeds that move between them
over time (their physical cores shared with other work), so pinning does not choose the fast state.

runs: the host-only spans of measured runtime run dirs (`traces.jsonl`, group leaders: TP peers repeat them; as
`simulator.runtime_fit.leader_spans` reads them): the draft's re-root and top-bs selection,
the target's KV keep, and with `trace.graph_events=true` the host marks of each replayed step (inputs planned,
replay queued). Medians in us per run, with each run's tokens/s: runs of one configuration in one call whose host
spans differ ~2x ran in the two speed states (bench/results/runtime_runs_2026-12-01_e2553d0_cores/).

Both write JSON (git SHA, date, machine, config, rows) and print a table.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from conf.rundir import atomic_write_json, git_sha, read_run  # noqa: E402
from conf.trace import TRACE_FILE, read_traces  # noqa: E402
from simulator.runtime_fit import leader_spans  # noqa: E402

HOST_SPANS = ("step.reroot", "step.select", "step.keep")
"""Spans with no device work in them: host Python only."""
HOST_MARKS = {"step.expand": ("planned_s", "launched_s"), "step.verify": ("inputs_s", "launched_s")}
"""Host marks (seconds after the span's start) that trace.graph_events records per replayed step."""


def loop_ms(loops: int) -> float:
    """Milliseconds of one pure-Python loop of `loops` additions."""
    start, total = time.perf_counter(), 0
    for i in range(loops):
        total += i
    return (time.perf_counter() - start) * 1e3


def probe(cpus: list[int], passes: int, reps: int, loops: int) -> list[dict]:
    """Per pass and CPU: the loop's min and median ms over `reps`, this process pinned to that CPU. The process's
    affinity is restored afterwards."""
    allowed = os.sched_getaffinity(0)
    rows = []
    try:
        for p in range(1, passes + 1):
            for cpu in cpus:
                os.sched_setaffinity(0, {cpu})
                times = [loop_ms(loops) for _ in range(reps)]
                rows.append({"pass": p, "cpu": cpu, "min_ms": min(times), "median_ms": statistics.median(times)})
    finally:
        os.sched_setaffinity(0, allowed)
    return rows


def run_row(run_dir: Path) -> dict:
    """Host-only span medians (us) of one run dir, with its mode and tokens/s."""
    if not (run_dir / TRACE_FILE).is_file():
        raise FileNotFoundError(f"{run_dir}: no {TRACE_FILE} (a runtime run dir with trace.enabled=true)")
    run = read_run(run_dir)
    values: dict[str, list[float]] = {}
    spans = leader_spans(read_traces(run_dir / TRACE_FILE), skip=0)  # group leaders only: TP peers repeat them
    for r in (r for recs in spans.values() for r in recs):
        if r.name in HOST_SPANS:
            values.setdefault(r.name.removeprefix("step."), []).append(r.duration_s)
        marks = HOST_MARKS.get(r.name, ())
        extra = r.extra_fields(f"{run_dir / TRACE_FILE}: {r.name}") if marks else {}
        for key in marks:
            if isinstance(extra.get(key), (int, float)):
                values.setdefault(f"{r.name.removeprefix('step.')}.{key.removesuffix('_s')}", []).append(extra[key])
    metrics = run.get("metrics") or {}
    return {"run": str(run_dir), "mode": run["config"]["spec"]["mode"], "tokens_per_s": metrics.get("tokens_per_s"),
            "n": {k: len(v) for k, v in values.items()},
            "median_us": {k: statistics.median(v) * 1e6 for k, v in sorted(values.items())}}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("probe", help="time a pure-Python loop on each CPU")
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--loops", type=int, default=1_000_000)
    p.add_argument("--out", type=Path, default=None, help="JSON (default: bench/results/host_speed_<date>_<sha>.json)")
    r = sub.add_parser("runs", help="host-only span medians of run dirs")
    r.add_argument("dirs", nargs="+", type=Path)
    r.add_argument("--out", type=Path, default=None, help="JSON (default: bench/results/host_runs_<date>_<sha>.json)")
    args = ap.parse_args(argv)
    date, sha = datetime.date.today().isoformat(), git_sha()
    record = {"benchmark": f"host_speed_{args.cmd}", "date": date, "git_sha": sha,
              "machine": {"platform": platform.platform(), "processor": platform.processor(),
                          "cpus": sorted(os.sched_getaffinity(0))}}
    if args.cmd == "probe":
        for name in ("passes", "reps", "loops"):
            if getattr(args, name) < 1:
                raise SystemExit(f"--{name}: must be >= 1, got {getattr(args, name)}")
        record["config"] = {"passes": args.passes, "reps": args.reps, "loops": args.loops}
        record["rows"] = probe(record["machine"]["cpus"], args.passes, args.reps, args.loops)
        out = args.out or REPO_ROOT / "bench" / "results" / f"host_speed_{date}_{sha[:7]}.json"
        print("| pass | cpu | min ms | median ms |\n|---|---|---|---|")
        for row in record["rows"]:
            print(f"| {row['pass']} | {row['cpu']} | {row['min_ms']:.1f} | {row['median_ms']:.1f} |")
    else:
        record["config"] = {"spans": HOST_SPANS, "marks": HOST_MARKS}
        record["rows"] = [run_row(d) for d in args.dirs]
        out = args.out or REPO_ROOT / "bench" / "results" / f"host_runs_{date}_{sha[:7]}.json"
        keys = sorted({k for row in record["rows"] for k in row["median_us"]})
        print("| run | mode | tok/s | " + " | ".join(f"{k} us" for k in keys) + " |\n|" + "---|" * (3 + len(keys)))
        for row in record["rows"]:
            tps = row["tokens_per_s"]
            cells = [f"{row['median_us'][k]:.1f}" if k in row["median_us"] else "-" for k in keys]
            print(f"| {Path(row['run']).name} | {row['mode']} | {'-' if tps is None else f'{tps:.1f}'} | "
                  + " | ".join(cells) + " |")
    atomic_write_json(out, record)
    print(f"-> {out}")
    return record


if __name__ == "__main__":
    main(sys.argv[1:])
