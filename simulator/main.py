"""Simulator entry used by simulate.py: run one configuration and write its run directory.

`run(config, run_dir, command)` simulates `workload.num_requests` requests of `workload.prompt_tokens`
prompt and `workload.max_new_tokens` new tokens each, prints a summary table and ends with ONE JSON line of
the metrics (metrics.py contract), and writes into `run_dir` (conf.rundir, atomically):

    config.json        resolved config + meta (git SHA, seed, date, command, device "sim:<gpu>", oracle false)
    metrics.json/.csv  the metrics contract
    iterations.csv     per-iteration breakdown (conf/rundir.py ITERATION_COLUMNS; records.IterationRow: its cells)
    traces.jsonl       conf.trace records: step.prefill / step.verify / step.expand / step.reroot (groups
                       target, draft) and msg.proposal / msg.verified (group link)   [trace.enabled]
    chrome_trace.json  the same as a Chrome / Perfetto trace                          [trace.chrome]

Traces come from the simulation's event log, kept when `trace.enabled`. Nothing here imports torch or the runtime.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conf.rundir import ITERATIONS_FILE, atomic_write_csv, atomic_write_json, run_meta, write_run
from conf.schema import ExperimentConfig
from conf.trace import CHROME_FILE, TRACE_FILE, to_chrome_trace, write_traces
from policy.predicates import draft_tp
from simulator.metrics import metrics_of, summary_table
from simulator.records import iteration_dicts, to_trace_records
from simulator.simulation import Simulation, simulate


def run_simulation(config: ExperimentConfig) -> tuple[Simulation, dict[str, Any]]:
    """Check, build costs, resolve d, simulate; returns the finished simulation and its metrics."""
    sim = simulate(config)
    return sim, metrics_of(config, sim.tally, sim.d_used, sim.costs.source)


def write_outputs(run_dir: Path, config: ExperimentConfig, sim: Simulation, metrics: dict[str, Any],
                  command: str) -> None:
    """Write the run dir: config + meta, metrics, iterations, traces (as configured)."""
    device = f"sim:{config.hardware.gpu}"
    meta = run_meta(config.seed, command, device, oracle=False, source="sim")
    write_run(run_dir, config, meta, metrics)
    atomic_write_csv(run_dir / ITERATIONS_FILE, iteration_dicts(sim.rows))
    if config.trace.enabled and sim.record_events:
        tp = {"target": config.parallel.target_gpus, "draft": draft_tp(config), "link": 1}
        records = to_trace_records(sim.events, config.run_name, device, tp)
        write_traces(run_dir / TRACE_FILE, records)
        if config.trace.chrome:
            atomic_write_json(run_dir / CHROME_FILE, to_chrome_trace(records))


def run(config: ExperimentConfig, run_dir: Path, command: str = "", verbose: bool = True) -> dict[str, Any]:
    """Simulate `config`, write `run_dir`, print the summary and the final JSON line; returns the metrics."""
    sim, metrics = run_simulation(config)
    write_outputs(Path(run_dir), config, sim, metrics, command)
    if verbose:
        print(summary_table(metrics))
        print(f"run dir: {run_dir}")
        print(json.dumps(metrics))
    return metrics
