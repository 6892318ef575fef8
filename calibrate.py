"""Fit the simulator's hardware profile from operator traces: `python calibrate.py traces=[...]`.

Thin Hydra entry point (conf/calibrate.yaml, conf/calibrate_schema.py): compose -> validate/freeze ->
`simulator.calibrate` (read traces, fit every operator in the profile's functional forms, held-out error)
-> write the versioned profile (simulator/profile.py) and a fit report -> print a table, end with ONE JSON
line. The traces come from `calibration/profile_ops.py` on the GPU; a `<trace>.meta.json` next to a trace file
(device, versions, git SHA) is copied into the profile's `software` block.

    python calibrate.py 'traces=[data/measured/profile_traces_2026-12-01_954a1bf.jsonl]' output=profiles/h200.json
    python simulate.py sim.profile=profiles/h200.json      # simulate with it

`runs=[dir, ...]` (measured runtime run dirs) also fits the profile's `runtime` block: the host costs of the
runtime's own loop (simulator/runtime_fit.py). Validate the profile on other runs only.

Errors in trace files name the file and line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from conf.calibrate_schema import CalibrateConfig, build_calibrate_config, register_calibrate_config

register_calibrate_config()


def trace_meta(paths: list[Path]) -> dict[str, Any]:
    """Software facts from the first `<trace>.meta.json` found (profile_ops.py writes one per trace)."""
    for p in paths:
        meta = p.with_suffix(".meta.json")
        if meta.is_file():
            try:
                data = json.loads(meta.read_text())
            except json.JSONDecodeError as e:
                raise ValueError(f"{meta}: not valid JSON ({e})") from e
            keys = ("device", "torch", "triton", "cuda", "date", "git_sha", "attention_impl", "runtime", "op_timing",
                    "steps_mode")
            return {k: data[k] for k in keys if k in data}
    return {}


def run(config: CalibrateConfig) -> dict[str, Any]:
    """Calibrate, write the profile and the report; returns a summary dict."""
    from conf.rundir import atomic_write_json, git_sha
    from simulator.calibrate import CalibrationOptions, calibrate, summary_table
    from simulator.profile import Profile, write_profile
    from simulator.trace_reader import read_traces, resolve_trace_paths

    paths = resolve_trace_paths(config.traces)
    ts = read_traces(paths)
    opts = CalibrationOptions(gpu=config.hardware.gpu, holdout_fraction=config.holdout_fraction, seed=config.seed,
                              intra_group=config.intra_group, cross_group=config.cross_group,
                              allreduce_mode=config.allreduce_mode, step_kinds=tuple(config.step_kinds),
                              min_samples=config.min_samples, graph_operators=tuple(config.graph_operators),
                              step_overhead_from=config.step_overhead_from)
    software = {**trace_meta(paths), "calibrate_git_sha": git_sha(), "traces": [str(p) for p in paths],
                "allreduce_impl": f"nccl {config.allreduce_mode}"}
    profile, report = calibrate(ts, opts, software)
    out = Path(config.output)
    runtime: dict[str, float] = {}
    loops: dict[str, dict[str, float]] = {}
    if config.runs:
        from simulator.runtime_fit import fit_runtime_costs, loop_costs

        runtime, report["runtime"] = fit_runtime_costs(list(config.runs), profile)
        loops = loop_costs(report["runtime"])
    write_profile(out, Profile(str(out), profile.hardware, profile.software, profile.operators, runtime, loops,
                               profile.tree_op_s))
    report_path = Path(config.report) if config.report else out.with_name(out.stem + ".report.json")
    atomic_write_json(report_path, {"profile": str(out), "hardware": profile.hardware, "software": software,
                                    **report})
    print(summary_table(report))
    if config.runs:
        loop_runs = report["runtime"]["loops"]
        print(f"runtime block fitted on {len(config.runs)} runs; loops: "
              + (", ".join(f"{shape} ({len(e['runs'])} of them)" for shape, e in loop_runs.items()) or "none"))
    for key, value in runtime.items():
        print(f"runtime {key:28s} {value * 1e3:8.3f} ms")
    for shape, entry in loops.items():
        for key, value in entry.items():
            print(f"runtime {'loops.' + shape + '.' + key:28s} {value * 1e3:8.3f} ms")
    print(f"profile: {out}\nreport: {report_path}")
    summary = {"profile": str(out), "report": str(report_path),
               "mape": {op: r["mape"] for op, r in report["operators"].items()},
               "skipped": list(report["skipped"]), "tree_op_s": profile.tree_op_s,
               "runtime": runtime, "runtime_loops": loops}
    print(json.dumps(summary), flush=True)
    return summary


@hydra.main(version_base="1.3", config_path="conf", config_name="calibrate")
def main(cfg: DictConfig) -> None:
    """Compose, validate, calibrate."""
    run(build_calibrate_config(cfg))


if __name__ == "__main__":
    sys.exit(main())
