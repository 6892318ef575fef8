"""Validation of the simulator against the runtime: measured runs, the same runs simulated, autoconfig check.

    python -m calibration.validate run --out OUT/validation [--profile profiles/h200.json] [--budget-s 230]   # GPU
    python -m calibration.validate compare --runs RUN_DIR_OR_FOLDER... --profile profiles/h200.json [--out DIR]  # CPU
    python -m calibration.validate run --smoke --out /tmp/val && python -m calibration.validate compare --smoke ...

`run` (2 GPUs): decodes each configuration of `CONFIGS` (mode x bs x w x d on the Llama-3-8B target +
Llama-3.2-1B draft pair, random weights, acceptance oracle, 1 request of 512 prompt + 256 new tokens; plus
the autoconfig pick when --profile is given, and TP-2 runs if the budget allows) with the real runtime
(`runtime.launch` spawns the ranks once; the models are built once per process and reused across
configurations), each once to warm up (Triton JIT, allocator) and once measured, and writes one run dir per
configuration (the runtime's own `write_run_dir`: config.json, metrics.json, iterations.csv, traces.jsonl).

`compare` (CPU, calibration/compare.py): simulates every measured run dir and writes the table, the decision
agreement, the parity plot and validation.json.

The profile is fitted from operator traces only (calibration/profile_ops.py -> calibrate.py); no run made here
enters the fit, so every configuration validated is held out by construction. The draft's tree bookkeeping per
round (`tree_op_s`) is the profile's, measured on the same operator traces.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from calibration.compare import REPEAT_SEP, autoconfig_pick, cmd_compare  # noqa: E402
from conf.rundir import REPO_ROOT, atomic_write_json, atomic_write_text  # noqa: E402

PAIR = "llama3-8b_llama3.2-1b"
BASE = ["workload=default", "model=llama3-8b_llama3.2-1b", "kernels=graphs", "spec.oracle=true",
        "workload.prompt_tokens=512", "workload.max_new_tokens=256", "workload.num_requests=1",
        "workload.max_seq_len_tokens=1024", "parallel.timeout_s=60", "trace.chrome=false"]
"""Every measured configuration: the oracle pair on 1 + 1 GPUs, kernels=graphs (Triton kernels + CUDA graphs),
the draft growing its tree by the oracle table's belief (as the simulator's autoconfig search assumes; older runs
grew by the random draft's flat log-probs, replayed with uniform belief). 256 new tokens: shorter runs spread too
much between repeats (docs/LOG.md)."""


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
REAL_BASE = ["workload=default", "model=smollm2", "kernels=graphs",
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
            key = (mcfg.preset, mcfg.dtype, self.cfg.seed, mcfg.checkpoint, str(self.ctx.device), self.ctx.group_size,
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
            best, _ = autoconfig_pick(jobs[-1][1], args.profile)
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
    c.add_argument("--runs", required=True, nargs="+", metavar="RUN_DIR_OR_FOLDER",
                   help="measured runtime run dirs, or folders of them (e.g. OUT/runtime)")
    c.add_argument("--out", default=None, help="folder for everything compare writes: sim/ (simulated run dirs), "
                   "validation.json, validation.md, fig04_parity.{png,pdf} (the flags below override each)")
    c.add_argument("--profile", default=None, help="profile JSON (none: the analytic prior)")
    c.add_argument("--report", default=None, help="calibration report (default: next to the profile)")
    c.add_argument("--exclude", default="", help="comma-separated configurations to leave out (fitted on); "
                   "the report's runtime.runs are left out anyway")
    c.add_argument("--keep-fitted", action="store_true",
                   help="keep the configurations the profile's runtime costs were fitted on: for another call's runs "
                        "(refused when the fit runs sit in RUNS)")
    c.add_argument("--sim-out", default=None, help="simulated run dirs (default: OUT/sim, else RUNS/../sim; for runs "
                   "under data/measured/, runs/validate/<RUNS name>/sim)")
    c.add_argument("--results", default=None, help="JSON (default: OUT/validation.json, else "
                   "runs/validate/validation_<date>.json)")
    c.add_argument("--doc", default=None, help="docs/VALIDATION.md format (method, table, known limits) to this file")
    c.add_argument("--figure", default=None, help="parity plot stem (default: OUT/fig04_parity; e.g. "
                   "docs/figures/fig04_parity_h200)")
    c.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    return cmd_run(args) if args.cmd == "run" else cmd_compare(args)


if __name__ == "__main__":
    sys.exit(main())
