"""Benchmark: simulated async_tree iterations per wall-second on one CPU core, and `simulate.py` wall time.

    python bench/bench_simulator.py [hydra overrides of conf/simulate.yaml]

Runs the default scenario (conf/simulate.yaml: Llama-3-70B / Llama-3.2-1B, 6x2 H200, bs 8, w 8, d auto)
with more requests, pinned to one core, event log off and on; reports the best and the median of
`REPEATS` timed runs after one warm-up (the machine may be shared: the best run is the least disturbed).
Also times one default `python simulate.py` end to end (process start, Hydra, simulation, run dir).
Writes runs/bench/simulator_<date>.json (git SHA, date, machine, config, results) and ends with one
JSON line.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from conf import compose_config  # noqa: E402

REPEATS = 5
NUM_REQUESTS = 40


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _iterations_per_s(config, record_events: bool) -> dict[str, float]:
    from simulator.simulation import Simulation, build_costs, resolve_d

    costs = build_costs(config)
    d = resolve_d(config, costs)
    Simulation(config, costs, d=d, num_requests=1, record_events=record_events).run()  # warm-up
    rates = []
    iterations = 0
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        sim = Simulation(config, costs, d=d, record_events=record_events).run()
        rates.append(sim.tally.verifies / (time.perf_counter() - t0))
        iterations = sim.tally.verifies
    return {"best": max(rates), "median": statistics.median(rates), "iterations_per_run": iterations, "d": d}


def _simulate_py_wall_s() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, str(REPO / "simulate.py"), f"hydra.run.dir={tmp}"], cwd=REPO, check=True,
                       capture_output=True)
        return time.perf_counter() - t0


def main(overrides: list[str]) -> dict:
    """Run the benchmark, write the results file, return the results."""
    from conf.rundir import BENCH_DIR, atomic_write_json, git_sha

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    all_overrides = [f"workload.num_requests={NUM_REQUESTS}", *overrides]
    config = compose_config("simulate", all_overrides)
    results = {
        "async_iterations_per_s_events_off": _iterations_per_s(config, record_events=False),
        "async_iterations_per_s_events_on": _iterations_per_s(config, record_events=True),
        "simulate_py_default_wall_s": _simulate_py_wall_s(),
    }
    now = dt.datetime.now(dt.timezone.utc)
    out = {
        "benchmark": "simulator",
        "git_sha": git_sha(),
        "date": now.isoformat(),
        "machine": {"node": platform.node(), "cpu": _cpu_model(), "cores_used": 1, "python": platform.python_version(),
                    "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
        "config": {"config_name": "simulate", "overrides": all_overrides, "mode": config.spec.mode,
                   "model": config.model.name, "split": f"{config.parallel.target_gpus}x{config.parallel.draft_gpus}",
                   "bs": config.spec.bs, "w": config.spec.w, "d": config.spec.d, "repeats": REPEATS},
        "results": results,
    }
    path = BENCH_DIR / f"simulator_{now:%Y-%m-%d}.json"
    atomic_write_json(path, out)
    off, on = results["async_iterations_per_s_events_off"], results["async_iterations_per_s_events_on"]
    print(f"async_tree iterations per wall-second, 1 core: {off['best']:.0f} best / {off['median']:.0f} median "
          f"(event log off), {on['best']:.0f} / {on['median']:.0f} (on); d={off['d']}, "
          f"{off['iterations_per_run']} iterations per run")
    print(f"python simulate.py (default): {results['simulate_py_default_wall_s']:.2f} s wall")
    print(f"wrote {path}")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
