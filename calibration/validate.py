"""Validation of the simulator against the runtime: measured runs, the same runs simulated, autoconfig check.

    python -m calibration.validate run --out OUT/validation [--profile profiles/h200.json] [--budget-s 230]   # GPU
    python -m calibration.validate compare --runs OUT/validation/runtime --profile profiles/h200.json            # CPU
    python -m calibration.validate run --smoke --out /tmp/val && python -m calibration.validate compare --smoke ...

`run` (2 GPUs): decodes each configuration of `CONFIGS` (mode x bs x w x d on the Llama-3-8B target +
Llama-3.2-1B draft pair, random weights, acceptance oracle, 1 request of 512 prompt + 256 new tokens; plus
the autoconfig pick when --profile is given, and TP-2 runs if the budget allows) with the real runtime
(`runtime.launch` spawns the ranks once; the models are built once per process and reused across
configurations), each once to warm up (Triton JIT, allocator) and once measured, and writes one run dir per
configuration (the runtime's own `write_run_dir`: config.json, metrics.json, iterations.csv, traces.jsonl).

`compare` (CPU): for every measured run dir, simulates the same configuration from the profile, with the
acceptance replayed from that run's iterations.csv (`acceptance.kind=replay`); a fixed d is the run's, an async
d = auto runs the runtime's DepthTuner (`sim.d_rule=runtime`: its trial rounds included); writes the simulated run
dirs, a validation table
(docs/VALIDATION.md + runs/validate/validation_<date>.json: measured vs simulated tokens/s, iteration,
verify and draft-step time, per-config error, median / max |error|), the parity plot
(analysis/fig04_parity.py) and the autoconfig comparison: the simulator's ranking of the measured async
configurations (with the oracle's acceptance table, not the replay) against the measured ranking, and the
autoconfig search's pick on 2 GPUs (1:1 split) against the best measured configuration.

The profile is fitted from operator traces only (calibration/profile_ops.py -> calibrate.py); no run made here
enters the fit, so every configuration validated is held out by construction. Simulator settings the
profile format cannot carry (`sim.tree_op_s`) come from the calibration report of the same operator
traces (`suggested_sim_settings`), and the validation says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from calibration.validation_doc import fmt, pct, write_doc  # noqa: E402
from calibration.validation_replay import replay_belief_of, sim_config, with_oracle_ranks  # noqa: E402
from conf.rundir import (  # noqa: E402
    MEASURED_DIR,
    REPO_ROOT,
    atomic_write_json,
    atomic_write_text,
    config_from_dict,
    git_sha,
    read_run,
)

PAIR = "llama3-8b_llama3.2-1b"
BASE = ["workload=default", "model=llama3-8b_llama3.2-1b", "kernels=graphs",
        "kernels.fused_allreduce=false", "spec.oracle=true", "spec.oracle_belief=table", "workload.prompt_tokens=512",
        "workload.max_new_tokens=256", "workload.num_requests=1", "workload.max_seq_len_tokens=1024",
        "parallel.timeout_s=60", "trace.chrome=false"]
"""Every measured configuration: the oracle pair on 1 + 1 GPUs, kernels=graphs (Triton kernels + CUDA graphs),
the draft growing its tree by the oracle table's belief (as the simulator's autoconfig search assumes; runs
before 2026-11-30's second session grew by the random draft's flat log-probs, replayed with uniform belief).
256 new tokens: the 128-token runs of 2026-11-29 spread up to 13% between repeats."""


def _tree(mode: str, bs: int, w: int, d: str) -> list[str]:
    return [f"spec={mode}", f"spec.bs={bs}", f"spec.w={w}", f"spec.d={d}"]


CONFIGS: list[tuple[str, list[str]]] = [(name, ["parallel=1x1", *ov]) for name, ov in [
    ("ar", ["spec=autoregressive"]),
    ("async_bs8_w8_dauto", _tree("async_tree", 8, 8, "auto")),
    ("serial_bs8_w8_dauto", _tree("serial_tree", 8, 8, "auto")),
    ("async_bs8_w8_d4", _tree("async_tree", 8, 8, "4")),
    ("async_bs4_w4_dauto", _tree("async_tree", 4, 4, "auto")),
    ("chain_g4", ["spec=chain", "spec.gamma=4"]),
    ("async_bs16_w8_dauto", _tree("async_tree", 16, 8, "auto")),
    ("serial_bs16_w4_d2", _tree("serial_tree", 16, 4, "2")),
    ("async_bs8_w4_d2", _tree("async_tree", 8, 4, "2")),
    ("chain_g2", ["spec=chain", "spec.gamma=2"]),
    ("serial_bs4_w4_d2", _tree("serial_tree", 4, 4, "2")),
    ("async_bs16_w4_d4", _tree("async_tree", 16, 4, "4")),
    ("async_bs4_w8_d2", _tree("async_tree", 4, 8, "2")),
    ("async_bs16_w8_d2", _tree("async_tree", 16, 8, "2")),
    ("async_bs8_w32_d3", _tree("async_tree", 8, 32, "3")),
]]
"""Ordered so that a short budget still measures each mode (AR, async, serial, chain) first. The last, 32-row
expansions, is one the shipped profile misprices (simulated above w 16 at workload a, measured 8% below: fifteenth
session); held out, it shows whether a recalibration prices wide expansions."""
TP2_CONFIGS: list[tuple[str, list[str]]] = [
    ("tp2_ar", ["parallel=2x0", "spec=autoregressive"]),
    ("tp2_chain_g4", ["parallel=2x0", "spec=chain", "spec.gamma=4"]),
]
"""Run in a second launch (another GPU split) when at least TP2_MIN_LEFT_S of the budget is left."""
REAL_BASE = ["workload=default", "model=smollm2", "kernels=graphs", "kernels.fused_allreduce=false",
             "spec.oracle=false", "model.target.dtype=bfloat16", "model.draft.dtype=bfloat16",
             "workload.max_new_tokens=128", "workload.max_seq_len_tokens=1024", "parallel.timeout_s=60",
             "trace.chrome=false", "parallel=1x1"]
REAL_CONFIGS: list[tuple[str, list[str]]] = [
    ("smollm2_real_ar", ["spec=autoregressive"]),
    ("smollm2_real_chain_g4", ["spec=chain", "spec.gamma=4"]),
    ("smollm2_real_async_bs8_w8_dauto", _tree("async_tree", 8, 8, "auto")),
]
"""The real pair (real acceptance, bf16), measured only when both checkpoints exist; prompts: the first
REAL_PROMPTS of data/prompts_eval.jsonl (held out of the draft's training)."""
REAL_PROMPTS = 2
TP2_MIN_LEFT_S = 70.0
RELAUNCH_MIN_LEFT_S = 45.0
SMOKE_BASE = ["workload=default", "model=tiny", "parallel=1x1", "parallel.device=cpu", "kernels=reference",
              "spec.oracle=true",
              "workload.prompt_tokens=24", "workload.max_new_tokens=16", "workload.max_seq_len_tokens=128",
              "parallel.timeout_s=60", "trace.chrome=false"]
SMOKE_CONFIGS = [("ar", ["spec=autoregressive"]), ("chain_g2", ["spec=chain", "spec.gamma=2"]),
                 ("serial_bs4_w2_d2", _tree("serial_tree", 4, 2, "2")),
                 ("async_bs4_w2_dauto", _tree("async_tree", 4, 2, "auto")),
                 ("async_bs8_w4_d2", _tree("async_tree", 8, 4, "2"))]
AUTOCONFIG_BS, AUTOCONFIG_W = (4, 8, 16), (4, 8, 16)
REPEAT_SEP = "__"
"""Run dir of repeat k > 0 of configuration NAME: NAME__rk."""
WITHIN = 0.05  # "the autoconfig pick is as good as the best measured config" if within 5% of its tokens/s


# ---- configs ---------------------------------------------------------------------------------------------
def compose(overrides: list[str]) -> Any:
    """conf/generate.yaml with overrides -> validated, frozen ExperimentConfig."""
    from conf import compose_config

    return compose_config("generate", overrides)


# ---- GPU side: measured runs -----------------------------------------------------------------------------
_MODELS: dict[tuple, Any] = {}
"""Models built in this rank process, reused by every configuration of the launch (weights are read-only)."""


def caching_engine_class() -> type:
    """An Engine subclass that builds each model once per process (a config change only changes workers)."""
    from runtime.engine import Engine

    class CachingEngine(Engine):
        """The runtime's Engine, with models built once per process (a config change only changes workers)."""

        def _build_model(self, mcfg: Any) -> Any:
            key = (mcfg.preset, mcfg.dtype, mcfg.seed, mcfg.checkpoint, str(self.ctx.device), self.ctx.group_size,
                   self.ctx.role)
            if key not in _MODELS:
                _MODELS[key] = super()._build_model(mcfg)
            return _MODELS[key]

    return CachingEngine


def run_one(ctx: Any, cfg: Any) -> dict[str, Any] | None:
    """`runtime.engine.run_rank` with the caching engine; rank 0 returns outputs, metrics, rows, traces."""
    from runtime.engine import run_rank

    return run_rank(ctx, cfg, engine_cls=caching_engine_class())


def _agree(ctx: Any, go: bool) -> bool:
    """Rank 0's decision, shared with every rank (so no rank starts a run the others skip)."""
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1 if go else 0], device=ctx.device)
    dist.broadcast(flag, src=0, group=ctx.world_group)
    return bool(int(flag.item()))


def run_configs(ctx: Any, cfg: Any, jobs: list[tuple[str, Any]] = (), out_dir: str = "", deadline: float = math.inf,
                warmup: bool = True, repeats: int = 1) -> list[str]:
    """Rank function: per job, one warm-up run, then `repeats` measured runs; rank 0 writes a run dir per
    measured run as it finishes (`<name>`, then `<name>__r1`, ...)."""
    import torch

    from conf.rundir import run_meta
    from runtime.metrics import output_records, write_run_dir

    done: list[str] = []
    last_s = 0.0
    for name, job in jobs:
        t0 = time.time()
        # rank 0 decides from its clock whether the job still fits (estimate: the previous job's time)
        if not _agree(ctx, t0 + last_s < deadline):
            break
        if warmup:
            run_one(ctx, job)
        for rep in range(repeats):
            result = run_one(ctx, job)
            if ctx.rank == 0 and result is not None:
                m = result["metrics"]
                run_name = name if rep == 0 else f"{name}{REPEAT_SEP}r{rep}"
                meta = run_meta(job.seed, f"calibration/validate.py run ({run_name})", m["gpu"],
                                workload_seed=job.workload.seed, source="runtime",
                                oracle=bool(job.spec.oracle and job.spec.mode != "autoregressive"),
                                validation={"name": name, "repeat": rep, "warmup_run": warmup,
                                            "prompt_tokens": [len(p) for p in result["prompts"]]})
                write_run_dir(Path(out_dir) / run_name, job, meta, m, result["iterations"], result["traces"],
                              outputs=output_records(job, result))
                print(f"[validate] {run_name}: {m['generated_tokens']} tokens, {m['tokens_per_s']:.1f} tok/s, "
                      f"accept {m['mean_accept_len']:.2f}, d {m.get('d_used')}", flush=True)
        done.append(name)
        last_s = time.time() - t0
        if ctx.rank == 0:
            print(f"[validate] {name}: {last_s:.1f} s (warm-up + {repeats} measured)", flush=True)
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
    return done


def real_pair_jobs(out: Path, notes: dict[str, Any]) -> list[tuple[str, Any]]:
    """REAL_CONFIGS when the SmolLM2 target and the trained draft checkpoints are present, else [] (noted)."""
    probe = compose([*REAL_BASE, "spec=autoregressive"])
    target = REPO_ROOT / str(probe.model.target.checkpoint)
    draft = REPO_ROOT / str(probe.model.draft.checkpoint)
    if not target.is_file() or not (draft / "config.json").is_file():
        notes["real_pair"] = f"not measured: needs {target} and a trained {draft} (config.json)"
        return []
    lines = (REPO_ROOT / "data" / "prompts_eval.jsonl").read_text().splitlines()
    prompts = out / "prompts_real.jsonl"
    atomic_write_text(prompts, "\n".join([line for line in lines if line.strip()][:REAL_PROMPTS]) + "\n")
    return [(n, compose([*REAL_BASE, *ov, f"workload.prompt_file={prompts}", f"run_name=val_{n}"]))
            for n, ov in REAL_CONFIGS]


def autoconfig_pick(base: Any, profile: str, settings: dict[str, float]) -> tuple[dict[str, Any], list[Any]]:
    """The autoconfig search on the base config's 2 GPUs, 1:1 split, from the profile: (best, ranked).

    d = auto is simulated with the runtime's own DepthTuner (`sim.d_rule=runtime`): its warm-up and trial
    rounds are what an auto-d run pays, so a fixed d wins where tuning costs more than it finds."""
    from simulator.autoconfig import search

    cfg = sim_config(base, profile, settings, acceptance_file=None, d_rule="runtime")
    ranked = search(cfg, splits=[cfg.parallel.target_gpus], bs_values=AUTOCONFIG_BS, w_values=AUTOCONFIG_W)
    ok = [c for c in ranked if not c.error]
    return (dataclasses.asdict(ok[0]) if ok else {}), ok


def cmd_run(args: argparse.Namespace) -> int:
    """Measured runs (GPU, or CPU with --smoke)."""
    import calibration.validate as this  # spawned ranks import the rank function by module name
    from runtime.launch import launch

    out = Path(args.out) / "runtime"
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    deadline = t_start + args.budget_s
    base, configs = (SMOKE_BASE, SMOKE_CONFIGS) if args.smoke else (BASE, CONFIGS)
    base = [*base, *args.override]
    jobs = [(name, compose([*base, *ov, f"run_name=val_{name}"])) for name, ov in configs]
    notes: dict[str, Any] = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                             "budget_s": args.budget_s, "failed": {}, "skipped": []}
    if args.profile:
        try:
            settings = load_settings(args.profile, args.report)
            best, _ = autoconfig_pick(jobs[-1][1], args.profile, settings)
            notes["autoconfig_pick"] = best
            if best:
                name = f"autoconfig_bs{best['bs']}_w{best['w']}_d{best['d']}"
                same = [n for n, j in jobs if j.spec.mode == "async_tree" and (j.spec.bs, j.spec.w, str(j.spec.d)) ==
                        (best["bs"], best["w"], str(best["d"]))]
                if same:
                    notes["autoconfig_measured_as"] = same[0]
                else:
                    jobs.insert(0, (name, compose([*base, "parallel=1x1",
                                                   *_tree("async_tree", best["bs"], best["w"], best["d"]),
                                                   f"run_name=val_{name}"])))
                    notes["autoconfig_measured_as"] = name
        except Exception as exc:  # the measured runs matter more than the pick
            notes["autoconfig_error"] = repr(exc)
            print(f"[validate] autoconfig pick failed: {exc!r}", flush=True)

    def measure(batch: list[tuple[str, Any]], stop_at: float) -> None:
        remaining = list(batch)
        while remaining and time.time() < stop_at:
            fn = partial(this.run_configs, jobs=remaining, out_dir=str(out), deadline=stop_at,
                         warmup=not args.no_warmup, repeats=args.repeats)
            try:
                launch(fn, remaining[0][1])
            except Exception as exc:
                first = next((n for n, _ in remaining if not (out / n / "metrics.json").exists()), None)
                notes["failed"][first or "?"] = repr(exc)[:2000]
                print(f"[validate] launch failed at {first}: {exc!r}"[:3000], flush=True)
            finished = {n for n, _ in remaining if (out / n / "metrics.json").exists()}
            left = [(n, j) for n, j in remaining if n not in finished and n not in notes["failed"]]
            if len(left) == len(remaining) or time.time() > stop_at - RELAUNCH_MIN_LEFT_S:
                remaining = left
                break
            remaining = left
        notes["skipped"] += [n for n, _ in remaining]

    real = [] if args.smoke else real_pair_jobs(Path(args.out), notes)
    tp2 = [] if args.smoke else [(n, compose([*base, *ov, f"run_name=val_{n}"])) for n, ov in TP2_CONFIGS]
    measure(jobs + real, deadline)
    if tp2 and args.tp2 and deadline - time.time() >= TP2_MIN_LEFT_S:
        measure(tp2, deadline)
    elif tp2:
        notes["skipped"] += [n for n, _ in tp2]
    notes["wall_s"] = round(time.time() - t_start, 1)
    notes["measured"] = sorted(p.parent.name for p in out.glob("*/metrics.json"))
    atomic_write_json(Path(args.out) / "run_notes.json", notes)
    print(json.dumps({"measured": len(notes["measured"]), "failed": list(notes["failed"]),
                      "skipped": notes["skipped"], "wall_s": notes["wall_s"]}), flush=True)
    return 0 if notes["measured"] else 1


# ---- CPU side: simulate the measured runs, compare -------------------------------------------------------
def read_report(profile: str, report: str | None) -> dict[str, Any]:
    """The calibration report (`report`, else <profile stem>.report.json next to the profile); {} if none."""
    path = Path(report) if report else Path(profile).with_name(Path(profile).stem + ".report.json")
    return json.loads(path.read_text()) if path.is_file() else {}


def load_settings(profile: str, report: str | None) -> dict[str, float]:
    """`suggested_sim_settings` of the calibration report; {} if none."""
    data = read_report(profile, report)
    return {k: float(v) for k, v in data.get("suggested_sim_settings", {}).items()}


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


def simulate_run(run_dir: Path, profile: str | None, settings: dict[str, float], sim_root: Path) -> dict[str, Any]:
    """Simulate one measured run dir; write the simulated run dir; return the comparison row."""
    from simulator.checks import check_config
    from simulator.main import write_outputs
    from simulator.metrics import metrics_of
    from simulator.simulation import Simulation, build_costs

    run = read_run(run_dir)
    measured = run["metrics"]
    config = config_from_dict(run["config"])
    config.validate()
    workload: dict[str, int] = {}
    lengths = run["meta"].get("validation", {}).get("prompt_tokens")
    if lengths and (config.workload.prompts or config.workload.prompt_file):  # text prompts: measured sizes
        generated = int(measured.get("generated_tokens") or len(lengths))
        workload = {"num_requests": len(lengths), "prompt_tokens": round(statistics.fmean(lengths)),
                    "max_new_tokens": max(1, round(generated / len(lengths)))}
    replay = str(run_dir / "iterations.csv")
    ranked = with_oracle_ranks(run_dir, config, measured, sim_root / "replays")
    if ranked is not None:
        replay = str(ranked)
    auto_async = config.spec.mode == "async_tree" and str(config.spec.d) == "auto"
    cfg = sim_config(config, profile, settings, acceptance_file=replay,
                     replay_belief=replay_belief_of(measured, config),
                     d_rule="runtime" if auto_async else None, **workload)
    d_used = measured.get("d_used")
    pin = (int(d_used) if cfg.spec.mode in ("serial_tree", "async_tree") and d_used and not auto_async
           else None)
    check_config(cfg)
    costs = build_costs(cfg)
    sim = Simulation(cfg, costs, d=pin).run()
    metrics = metrics_of(cfg, sim.tally, sim.d_used, costs.source)
    write_outputs(sim_root / run_dir.name, cfg, sim, metrics, f"calibration/validate.py compare ({run_dir.name})")
    meas_expand = measured_expand_s(run_dir)
    row: dict[str, Any] = {
        "name": run_dir.name, "config": run_dir.name.split(REPEAT_SEP)[0], "mode": cfg.spec.mode,
        "split": f"{cfg.parallel.target_gpus}x{cfg.parallel.draft_gpus}",
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
        row[key] = {"measured": meas, "simulated": simv, "error": relative_error(simv, meas)}
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


def autoconfig_check(run_dirs: list[Path], profile: str | None, settings: dict[str, float],
                     notes: dict[str, Any], fitted: set[str] = frozenset()) -> dict[str, Any]:
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
        cfg = sim_config(config_from_dict(runs[0]["config"]), profile, settings, acceptance_file=None,
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
    best, ranked = autoconfig_pick(base, profile, settings)
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


def cmd_compare(args: argparse.Namespace) -> int:
    """Simulate every measured run dir, write the table, the doc, the parity plot."""
    sha = git_sha()  # before this command writes its own (possibly tracked) outputs, which would mark it dirty
    runs_dir = Path(args.runs)
    run_dirs = sorted(p.parent for p in runs_dir.glob("*/metrics.json"))
    if not run_dirs:
        print(f"compare: no run dirs (*/metrics.json) under {runs_dir}", file=sys.stderr)
        return 2
    settings = load_settings(args.profile, args.report) if args.profile and not args.no_settings else {}
    fit_runs = fitted_runs(args.profile, args.report) if args.profile else []
    fitted = {Path(r).name.split(REPEAT_SEP)[0] for r in fit_runs}
    if args.keep_fitted and args.doc:
        print("compare: --keep-fitted is a cross-call check (--results); the --doc method describes a held-out "
              "table", file=sys.stderr)
        return 2
    if args.keep_fitted:  # another call's runs of the fit configurations are unseen by the fit
        # by the call's folder name (date and commit): the fit runs' recorded paths may predate a move
        same = sorted(r for r in fit_runs if Path(r).parent.name == runs_dir.resolve().name)
        if same:
            print(f"compare: --keep-fitted: the profile's runtime costs were fitted on runs in {runs_dir} "
                  f"({', '.join(Path(r).name for r in same)}); it is for another call's runs", file=sys.stderr)
            return 2
        fitted = set()
    fitted |= {c for c in (args.exclude or "").split(",") if c}
    held_out_dirs = [rd for rd in run_dirs if rd.name.split(REPEAT_SEP)[0] not in fitted]
    sim_root = Path(args.sim_out) if args.sim_out else default_sim_root(runs_dir)
    rows = []
    for rd in held_out_dirs:
        try:
            rows.append(simulate_run(rd, args.profile, settings, sim_root))
        except Exception as exc:
            print(f"compare: {rd.name}: {exc!r}", file=sys.stderr)
            rows.append({"name": rd.name, "error": repr(exc)})
    good = [r for r in rows if "error" not in r]
    # run_notes.json sits next to the runtime/ folder (validate.py run) or inside a committed runs folder
    notes_path = next((p for p in (runs_dir.parent / "run_notes.json", runs_dir / "run_notes.json") if p.is_file()),
                      None)
    notes = json.loads(notes_path.read_text()) if notes_path is not None else {}
    try:
        ac = autoconfig_check(run_dirs, args.profile, settings, notes, fitted)
    except Exception as exc:
        ac = {"note": f"autoconfig check failed: {exc!r}"}
    today = datetime.date.today().isoformat()
    json_path = Path(args.results or REPO_ROOT / "runs" / "validate" / f"validation_{today}.json")
    result = {
        "date": today, "git_sha": sha, "profile": args.profile, "sim_settings": settings,
        "gpu": good[0]["gpu"] if good else None, "runs": str(runs_dir), "sim_runs": str(sim_root),
        "profile_cost_model": good[0]["cost_model"] if good else None, "json": str(json_path),
        "held_out": ("the profile's operators are fitted from operator traces"
                     + (f"; its runtime costs on the runs of {sorted(fitted)}, left out of this table" if fitted
                        else "; its runtime costs on another call's runs of some of these configurations"
                        if args.keep_fitted and fit_runs else "; no validation run enters the fit")),
        "fitted_configs": sorted(fitted),
        "fitted_run_folders": sorted({str(Path(r).parent) for r in fit_runs}),
        "rows": good, "errors": [r for r in rows if "error" in r],
        "summary": {k: error_summary(good, k) for k in ("tokens_per_s", "iteration_time_s", "verify_time_s",
                                                   "expand_per_forward_s")},
        "run_to_run_tokens_per_s": run_to_run(good), "autoconfig": ac, "run_notes": notes,
    }
    atomic_write_json(json_path, result)
    if args.doc:
        write_doc(Path(args.doc), result)
    if args.figure:
        proc = subprocess.run([sys.executable, str(REPO_ROOT / "analysis" / "fig04_parity.py"), str(runs_dir),
                               str(sim_root), "--out", args.figure], capture_output=True, text=True, cwd=REPO_ROOT)
        print(proc.stdout[-800:] + proc.stderr[-800:])
    for r in good:
        print(f"{r['name']:<28} tok/s meas {fmt(r['tokens_per_s']['measured'], 1, 1):>8} sim "
              f"{fmt(r['tokens_per_s']['simulated'], 1, 1):>8} err {pct(r['tokens_per_s']['error']):>7}   iter err "
              f"{pct(r['iteration_time_s']['error']):>7}")
    print(json.dumps({"json": str(json_path), "configs": len(good), "errors": len(rows) - len(good),
                      "summary": result["summary"]}))
    return 0 if good else 1


def main(argv: list[str] | None = None) -> int:
    """CLI: run | compare."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="measured runs (GPU; --smoke: tiny model on CPU)")
    r.add_argument("--out", required=True, help="folder; run dirs go to OUT/runtime/<config>")
    r.add_argument("--profile", default=None, help="profile for the autoconfig pick (added to the runs)")
    r.add_argument("--report", default=None, help="calibration report (default: next to the profile)")
    r.add_argument("--budget-s", type=float, default=230.0, help="wall-clock budget of all runs")
    r.add_argument("--no-tp2", dest="tp2", action="store_false", help="skip the TP-2 launch")
    r.add_argument("--no-warmup", action="store_true", help="measure the first run (compile time included)")
    r.add_argument("--repeats", type=int, default=2, help="measured runs per configuration (noise floor)")
    r.add_argument("--smoke", action="store_true", help="tiny model on CPU: tests the code paths")
    r.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="Hydra override added to every oracle-pair configuration, TP-2 included, not the real pair's "
                        "(repeatable), e.g. trace.graph_events=true")
    c = sub.add_parser("compare", help="simulate the measured runs, write the validation table (CPU)")
    c.add_argument("--runs", required=True, help="folder of measured run dirs (OUT/runtime)")
    c.add_argument("--profile", default=None, help="profile JSON (none: the analytic prior)")
    c.add_argument("--report", default=None, help="calibration report (default: next to the profile)")
    c.add_argument("--no-settings", action="store_true", help="ignore the report's suggested sim settings")
    c.add_argument("--exclude", default="", help="comma-separated configurations to leave out (fitted on); "
                   "the report's runtime.runs are left out anyway")
    c.add_argument("--keep-fitted", action="store_true",
                   help="keep the configurations the profile's runtime costs were fitted on: for another call's runs "
                        "(refused when the fit runs sit in RUNS)")
    c.add_argument("--sim-out", default=None, help="simulated run dirs (default: RUNS/../sim; for runs under "
                   "data/measured/, runs/validate/<RUNS name>/sim)")
    c.add_argument("--results", default=None, help="JSON (default: runs/validate/validation_<date>.json)")
    c.add_argument("--doc", default=None, help="write this markdown table (e.g. docs/VALIDATION.md)")
    c.add_argument("--figure", default=None, help="parity plot stem (e.g. docs/figures/fig04_parity_h200)")
    c.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    return cmd_run(args) if args.cmd == "run" else cmd_compare(args)


if __name__ == "__main__":
    sys.exit(main())
