"""`python -m calibration.validate compare` (CPU): measured runtime run dirs against the simulator.

For every measured run dir, the same configuration simulated from the profile in two acceptance views:
- **replayed**: the run's own verify outcomes (`acceptance.kind=replay` on its iterations.csv, calibration/
  validation_replay.py), so what differs is the timing model's error;
- **predicted**: the acceptance the run's config names (its table or family member), so the difference between the
  views is the acceptance model's error.
A fixed d is the run's; a d = auto runs the runtime's depth tuner (`sim.d_rule=runtime`: its trial rounds included),
except a serial_tree run whose d no tuner chose (before the serial tuner: the breadth rule; validation_replay.py
recorded_serial_d). Writes the simulated run dirs, a table (measured, simulated, error per metric), the decision
agreement (calibration/agreement.py: for runs of one model pair on one GPU, does the simulator order each pair of
configurations as measured?), the parity plot (analysis/fig04_parity.py), validation.json, and the autoconfig check:
the simulator's ranking of the measured async configurations (config acceptance) against the measured ranking, and the
autoconfig search's pick against the best measured configuration.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from calibration.agreement import REPEAT_SEP, decision_agreement
from calibration.report import print_table, write_table
from calibration.validation_doc import write_doc
from calibration.validation_replay import recorded_serial_d, replay_belief_of, sim_config, with_oracle_ranks
from conf.rundir import (
    MEASURED_DIR,
    OUTPUTS_FILE,
    REPO_ROOT,
    atomic_write_json,
    config_from_dict,
    git_sha,
    read_run,
)

AUTOCONFIG_BS, AUTOCONFIG_W = (4, 8, 16), (4, 8, 16)
WITHIN = 0.05  # "the autoconfig pick is as good as the best measured config" if within 5% of its tokens/s


def autoconfig_pick(base: Any, profile: str) -> tuple[dict[str, Any], list[Any]]:
    """The autoconfig search on the base config's 2 GPUs, 1:1 split, from the profile: (best, ranked).

    d = auto is simulated with the runtime's own DepthTuner (`sim.d_rule=runtime`): its warm-up and trial
    rounds are what an auto-d run pays, so a fixed d wins where tuning costs more than it finds."""
    from simulator.autoconfig import search

    cfg = sim_config(base, profile, acceptance_file=None, d_rule="runtime")
    ranked = search(cfg, splits=[cfg.parallel.target_gpus], bs_values=AUTOCONFIG_BS, w_values=AUTOCONFIG_W)
    ok = [c for c in ranked if not c.error]
    return (dataclasses.asdict(ok[0]) if ok else {}), ok


# ---- CPU side: simulate the measured runs, compare -------------------------------------------------------
def read_report(profile: str, report: str | None) -> dict[str, Any]:
    """The calibration report (`report`, else <profile stem>.report.json next to the profile); {} if none."""
    path = Path(report) if report else Path(profile).with_name(Path(profile).stem + ".report.json")
    return json.loads(path.read_text()) if path.is_file() else {}


def fitted_runs(profile: str, report: str | None) -> list[str]:
    """The run dirs the profile's `runtime` block was fitted on (the report's `runtime.runs`); their configurations
    are left out of the comparison."""
    return list(read_report(profile, report).get("runtime", {}).get("runs", []))


def measured_expand_s(run_dir: Path) -> float | None:
    """Mean duration of one draft forward (step.expand spans of the draft leader) in a runtime run dir."""
    from conf.trace import TRACE_FILE, read_traces

    path = run_dir / TRACE_FILE
    if not path.is_file():
        return None
    spans = [r for r in read_traces(path) if r.name == "step.expand"]
    if not spans:
        return None
    leader = min(r.rank for r in spans)  # the draft group's leader (TP peers repeat the same steps)
    return statistics.fmean(r.duration_s for r in spans if r.rank == leader)


def relative_error(sim: float | None, meas: float | None) -> float | None:
    """simulated / measured - 1; None when either is missing (or measured is not positive)."""
    return None if sim is None or meas is None or meas <= 0 else sim / meas - 1.0


def _simulated(cfg: Any, pin: int | None) -> tuple[Any, Any, dict[str, Any]]:
    """(simulation, costs, metrics) of one simulator config; `pin`: a fixed d (None: the config's rule)."""
    from simulator.checks import check_config
    from simulator.metrics import metrics_of
    from simulator.simulation import Simulation, build_costs

    check_config(cfg)
    costs = build_costs(cfg)
    sim = Simulation(cfg, costs, d=pin).run()
    return sim, costs, metrics_of(cfg, sim.tally, sim.d_used, costs.source)


def _prompt_lengths(run_dir: Path) -> list[int] | None:
    """Prompt sizes of a runtime run's requests from its outputs.jsonl (None when it has none)."""
    path = run_dir / OUTPUTS_FILE
    if not path.is_file():
        return None
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [int(r["prompt_tokens"]) for r in lines] or None


def _compared(measured: Any, simulated: Any) -> dict[str, Any]:
    return {"measured": measured, "simulated": simulated, "error": relative_error(simulated, measured)}


def simulate_run(run_dir: Path, profile: str | None, sim_root: Path) -> dict[str, Any]:
    """Simulate one measured run dir in both acceptance views; write the replayed view's simulated run dir; return
    the comparison row (the replayed view's metrics, and `predicted_acceptance`: the predicted view's)."""
    from simulator.main import write_outputs

    run = read_run(run_dir)
    measured = run["metrics"]
    config = config_from_dict(run["config"])
    config.validate()
    workload: dict[str, int] = {}
    lengths = run["meta"].get("validation", {}).get("prompt_tokens") or _prompt_lengths(run_dir)
    if lengths and (config.workload.prompts or config.workload.prompt_file):  # text prompts: measured sizes
        generated = int(measured.get("generated_tokens") or len(lengths))
        workload = {"num_requests": len(lengths), "prompt_tokens": round(statistics.fmean(lengths)),
                    "max_new_tokens": max(1, round(generated / len(lengths)))}
    replay = str(run_dir / "iterations.csv")
    ranked = with_oracle_ranks(run_dir, config, measured, sim_root / "replays")
    if ranked is not None:
        replay = str(ranked)
    tree = config.spec.mode in ("serial_tree", "async_tree")
    serial_d = recorded_serial_d(config, measured)  # a serial auto run not tuned (e.g. the breadth rule's): its d
    tuned = tree and str(config.spec.d) == "auto" and serial_d is None
    d_rule = "runtime" if tuned else None
    cfg = sim_config(config, profile, acceptance_file=replay,
                     replay_belief=replay_belief_of(measured, config), d_rule=d_rule, **workload)
    d_used = measured.get("d_used")
    pin = int(d_used) if tree and d_used and not tuned else serial_d
    sim, costs, metrics = _simulated(cfg, pin)
    write_outputs(sim_root / run_dir.name, cfg, sim, metrics, f"calibration/validate.py compare ({run_dir.name})")
    predicted = metrics
    if config.spec.mode != "autoregressive":  # an autoregressive run has no acceptance to predict
        predicted = _simulated(sim_config(config, profile, acceptance_file=None, d_rule=d_rule, **workload),
                               pin)[2]
    meas_expand = measured_expand_s(run_dir)
    row: dict[str, Any] = {
        "name": run_dir.name, "config": run_dir.name.split(REPEAT_SEP)[0], "mode": cfg.spec.mode,
        "model": measured.get("model"), "split": f"{cfg.parallel.target_gpus}x{cfg.parallel.draft_gpus}",
        "bs": metrics["bs"], "w": metrics["w"], "d_config": str(cfg.spec.d), "d_used": sim.d_used,
        "d_measured": measured.get("d_used") if cfg.spec.mode in ("serial_tree", "async_tree") else None,
        "gpu": measured.get("gpu"), "oracle": measured.get("oracle"),
        "workload": f"{cfg.workload.prompt_tokens} prompt + {cfg.workload.max_new_tokens} new tokens",
    }
    for key, meas, simv in (("tokens_per_s", measured.get("tokens_per_s"), metrics["tokens_per_s"]),
                            ("iteration_time_s", measured.get("iteration_time_s"), metrics["iteration_time_s"]),
                            ("verify_time_s", measured.get("verify_time_s"), metrics["verify_time_s"]),
                            ("expand_per_forward_s", meas_expand, metrics["expand_time_s"]),
                            ("mean_accept_len", measured.get("mean_accept_len"), metrics["mean_accept_len"])):
        row[key] = _compared(meas, simv)
    row["predicted_acceptance"] = {
        "acceptance": config.acceptance.kind if config.spec.mode != "autoregressive" else None,
        **{key: _compared(measured.get(key), predicted[key]) for key in ("tokens_per_s", "mean_accept_len")}}
    row["cost_model"] = costs.source
    row["replay_divergences"] = getattr(sim.acceptance, "divergences", 0)
    return row


def error_summary(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Median / max / mean absolute relative error of `key` over rows of {key: {measured, simulated, error}}."""
    errs = [abs(r[key]["error"]) for r in rows if r[key]["error"] is not None]
    if not errs:
        return {"n": 0}
    return {"n": len(errs), "median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
            "mean_abs_error": statistics.fmean(errs)}


def run_to_run(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Spread of measured tokens/s between repeats of one configuration (max / min - 1): the noise floor."""
    by: dict[str, list[float]] = {}
    for r in rows:
        if r["tokens_per_s"]["measured"]:
            by.setdefault(r["config"], []).append(r["tokens_per_s"]["measured"])
    spread = {k: max(v) / min(v) - 1.0 for k, v in by.items() if len(v) >= 2}
    if not spread:
        return {"n": 0}
    return {"n": len(spread), "median": statistics.median(spread.values()), "max": max(spread.values()),
            "per_config": spread}


def _spearman(a: list[float], b: list[float]) -> float | None:
    import numpy as np

    if len(a) < 3:
        return None
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def autoconfig_check(run_dirs: list[Path], profile: str | None, notes: dict[str, Any],
                     fitted: set[str] = frozenset()) -> dict[str, Any]:
    """Does the simulator rank the measured async configs like the runtime, and is its pick near the best?

    Every measured async config takes part (the best measured is a fact of the hardware); those the profile's
    runtime costs were fitted on are marked `fitted`."""
    from simulator.simulation import simulate

    groups: dict[str, list[dict[str, Any]]] = {}
    runs = {rd.name: read_run(rd) for rd in run_dirs}
    oracle_models = [r["metrics"].get("model") for r in runs.values() if r["metrics"].get("oracle")]
    model = max(set(oracle_models), key=oracle_models.count) if oracle_models else None
    for name, run in runs.items():  # the oracle pair's async runs (the real pair has its own acceptance)
        m = run["metrics"]
        if m.get("mode") == "async_tree" and m.get("tokens_per_s") and m.get("model") == model:
            groups.setdefault(name.split(REPEAT_SEP)[0], []).append(run)
    if not groups:
        return {"note": "no measured async_tree runs"}
    table = []
    for name, runs in sorted(groups.items()):
        cfg = sim_config(config_from_dict(runs[0]["config"]), profile, acceptance_file=None,
                         d_rule="runtime")  # auto d pays its tuning rounds, as in the search below
        sim = simulate(cfg, record_events=False)
        table.append({"name": name, "bs": cfg.spec.bs, "w": cfg.spec.w, "d": str(cfg.spec.d), "repeats": len(runs),
                      "fitted": name in fitted,
                      "measured_tokens_per_s": statistics.fmean(r["metrics"]["tokens_per_s"] for r in runs),
                      "predicted_tokens_per_s": sim.tally.generated_tokens / sim.tally.wall_s})
    best_meas = max(table, key=lambda r: r["measured_tokens_per_s"])
    sim_pick = max(table, key=lambda r: r["predicted_tokens_per_s"])
    out: dict[str, Any] = {
        "acceptance": "the oracle's positional table (config acceptance), not the replay",
        "measured_async": table, "best_measured": best_meas["name"], "simulator_pick_among_measured": sim_pick["name"],
        "regret_of_simulator_pick": 1.0 - sim_pick["measured_tokens_per_s"] / best_meas["measured_tokens_per_s"],
        "spearman_measured_vs_predicted": _spearman([r["measured_tokens_per_s"] for r in table],
                                                    [r["predicted_tokens_per_s"] for r in table]),
    }
    base = config_from_dict(next(iter(groups.values()))[0]["config"])
    base.validate()
    best, ranked = autoconfig_pick(base, profile)
    out["autoconfig_search"] = {"split": f"{base.parallel.target_gpus}x{base.parallel.draft_gpus}",
                                "bs": list(AUTOCONFIG_BS), "w": list(AUTOCONFIG_W), "d": "auto, 1..8",
                                "best": best, "top5": [dataclasses.asdict(c) for c in ranked[:5]]}
    # The run measured as the autoconfig pick (run notes) counts only if this profile still picks its shape;
    # otherwise any measured run of the picked shape does.
    hit = None
    if best:
        shape = (best["bs"], best["w"], str(best["d"]))
        named = next((r for r in table if r["name"] == notes.get("autoconfig_measured_as")), None)
        hit = named if named is not None and (named["bs"], named["w"], named["d"]) == shape else next(
            (r for r in table if (r["bs"], r["w"], r["d"]) == shape), None)
    if hit is not None:
        ratio = hit["measured_tokens_per_s"] / best_meas["measured_tokens_per_s"]
        out["autoconfig_pick_measured"] = {"name": hit["name"], "measured_tokens_per_s": hit["measured_tokens_per_s"],
                                           "fraction_of_best_measured": ratio, "within_5_percent": ratio >= 1 - WITHIN}
    else:
        out["autoconfig_pick_measured"] = None
    return out


def default_sim_root(runs_dir: Path) -> Path:
    """Where compare writes the simulated run dirs: next to the measured ones (RUNS/../sim), except for curated
    runs under data/measured/, which is only written by bench/promote.py: runs/validate/<RUNS name>/sim."""
    if runs_dir.resolve().is_relative_to(MEASURED_DIR.resolve()):
        return REPO_ROOT / "runs" / "validate" / runs_dir.resolve().name / "sim"
    return runs_dir.parent / "sim"


def find_run_dirs(paths: list[str]) -> list[Path]:
    """The run dirs of `paths`: a path holding metrics.json is one, a folder's */metrics.json are its runs; sorted by
    name, each once. A path with neither is a one-line error naming it."""
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        dirs = [path] if (path / "metrics.json").is_file() else sorted(p.parent for p in path.glob("*/metrics.json"))
        if not dirs:
            raise ValueError(f"--runs: {raw} is neither a run dir (metrics.json) nor a folder of run dirs "
                             f"(*/metrics.json)")
        found.update(dict.fromkeys(d.resolve() for d in dirs))
    return sorted(found, key=lambda d: (d.name, str(d)))


def _outputs(args: argparse.Namespace, first: Path) -> tuple[Path, Path, str | None]:
    """(simulated run dirs' root, validation.json, parity plot stem or None): the flags, else under --out, else the
    defaults (next to the first measured folder; runs/validate/)."""
    out = Path(args.out) if args.out else None
    sim_root = Path(args.sim_out) if args.sim_out else out / "sim" if out else default_sim_root(first)
    today = datetime.date.today().isoformat()
    json_path = Path(args.results) if args.results else (
        out / "validation.json" if out else REPO_ROOT / "runs" / "validate" / f"validation_{today}.json")
    figure = args.figure or (str(out / "fig04_parity") if out else None)
    return sim_root, json_path, figure


def cmd_compare(args: argparse.Namespace) -> int:
    """Simulate every measured run dir, write the table, the doc, the parity plot."""
    sha = git_sha()  # before this command writes its own (possibly tracked) outputs, which would mark it dirty
    try:
        run_dirs = find_run_dirs(args.runs)
    except ValueError as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 2
    folders = [Path(r) for r in args.runs]
    fit_runs = fitted_runs(args.profile, args.report) if args.profile else []
    fitted = {Path(r).name.split(REPEAT_SEP)[0] for r in fit_runs}
    if args.keep_fitted and args.doc:
        print("compare: --keep-fitted is a cross-call check (--results); the --doc method describes a held-out "
              "table", file=sys.stderr)
        return 2
    if args.keep_fitted:  # another call's runs of the fit configurations are unseen by the fit
        # by the call's folder name (date and commit): the fit runs' recorded paths may predate a move
        names = {f.resolve().name for f in folders} | {rd.parent.name for rd in run_dirs}
        same = sorted(r for r in fit_runs if Path(r).parent.name in names)
        if same:
            print(f"compare: --keep-fitted: the profile's runtime costs were fitted on runs in "
                  f"{' '.join(args.runs)} ({', '.join(Path(r).name for r in same)}); it is for another call's runs",
                  file=sys.stderr)
            return 2
        fitted = set()
    fitted |= {c for c in (args.exclude or "").split(",") if c}
    held_out_dirs = [rd for rd in run_dirs if rd.name.split(REPEAT_SEP)[0] not in fitted]
    sim_root, json_path, figure = _outputs(args, folders[0])
    rows = []
    for rd in held_out_dirs:
        try:
            rows.append(simulate_run(rd, args.profile, sim_root))
        except Exception as exc:
            print(f"compare: {rd.name}: {exc!r}", file=sys.stderr)
            rows.append({"name": rd.name, "error": repr(exc)})
    good = [r for r in rows if "error" not in r]
    # run_notes.json sits next to the runtime/ folder (validate.py run) or inside a committed runs folder
    notes_path = next((p for f in folders for p in (f.parent / "run_notes.json", f / "run_notes.json")
                       if p.is_file()), None)
    notes = json.loads(notes_path.read_text()) if notes_path is not None else {}
    try:
        ac = autoconfig_check(run_dirs, args.profile, notes, fitted)
    except Exception as exc:
        ac = {"note": f"autoconfig check failed: {exc!r}"}
    predicted = [{**r, **r["predicted_acceptance"]} for r in good]
    result = {
        "date": datetime.date.today().isoformat(), "git_sha": sha, "profile": args.profile,
        "gpu": good[0]["gpu"] if good else None, "runs": " ".join(args.runs), "sim_runs": str(sim_root),
        "profile_cost_model": good[0]["cost_model"] if good else None, "json": str(json_path),
        "held_out": ("the profile's operators are fitted from operator traces"
                     + (f"; its runtime costs on the runs of {sorted(fitted)}, left out of this table" if fitted
                        else "; its runtime costs on another call's runs of some of these configurations"
                        if args.keep_fitted and fit_runs else "; no validation run enters the fit")),
        "fitted_configs": sorted(fitted),
        "fitted_run_folders": sorted({str(Path(r).parent) for r in fit_runs}),
        "rows": good, "errors": [r for r in rows if "error" in r],
        "summary": {k: error_summary(good, k) for k in ("tokens_per_s", "iteration_time_s", "verify_time_s",
                                                   "expand_per_forward_s", "mean_accept_len")},
        "summary_predicted_acceptance": {k: error_summary(predicted, k) for k in ("tokens_per_s", "mean_accept_len")},
        "decision_agreement": decision_agreement(good),
        "decision_agreement_predicted_acceptance": decision_agreement(predicted),
        "run_to_run_tokens_per_s": run_to_run(good), "autoconfig": ac, "run_notes": notes,
    }
    atomic_write_json(json_path, result)
    if args.out:
        write_table(Path(args.out) / "validation.md", result)
    if args.doc:
        write_doc(Path(args.doc), result)
    if figure:
        paths = [str(Path(p).resolve()) for p in (*args.runs, sim_root)]  # the script runs in the repository root
        proc = subprocess.run([sys.executable, str(REPO_ROOT / "analysis" / "fig04_parity.py"), *paths, "--out",
                               str(Path(figure).resolve())], capture_output=True, text=True, cwd=REPO_ROOT)
        print(proc.stdout[-800:] + proc.stderr[-800:])
    print_table(result)
    print(json.dumps({"json": str(json_path), "configs": len(good), "errors": len(rows) - len(good),
                      "summary": result["summary"]}))
    return 0 if good else 1
