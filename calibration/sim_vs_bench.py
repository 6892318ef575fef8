"""The simulator against a runtime benchmark (CPU): simulate every row of our runtime in a `bench/bench_runtime.py`
results file with a profile, and compare tokens/s, iteration and verify time, accepted length.

    python -m calibration.sim_vs_bench data/measured/runtime_shape_realistic_<date>_<sha>.json [more files ...]
        [--profile profiles/h200.json] [--requests 4] [--seeds 3] [--acceptance smollm2] [--max-new-tokens N]
        [--out FILE]

Each of our rows (system swiftspec, status ok) becomes one simulation per seed (`workload.seed` 0..seeds-1), of the
results file's workload (model, prompt length, new tokens, kernels, its experiment overrides: e.g. the acceptance
table the oracle was fed) with `--requests` requests, in the row's mode and shape (chain gamma; bs, w, d of the
trees; a d auto runs the runtime's depth tuner, `sim.d_rule=runtime`, as calibration/validate.py compare does, except
a serial_tree row recorded before the serial tuner (no `d_rule`), which ran and is simulated at the breadth rule's d).
The medians over the seeds are compared with the measured medians. Peers' rows are skipped: the simulator models
our runtime only. So are draft rows of a run without the acceptance oracle (the real pair) unless `--acceptance`
names a table for them; the prompt length is the measured prompts' mean.

Unlike calibration/validate.py compare, which replays a measured run's own verify outcomes, this draws acceptance from
the table: it checks the profile on the benchmark's workload (e.g. workload a's 1K-token prompts, which no
validation run has) and the acceptance model together. Writes a JSON (git SHA, date, profile, every row) and
prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from calibration.compare import error_summary, relative_error  # noqa: E402
from calibration.report import fmt, pct  # noqa: E402
from conf import compose_config  # noqa: E402
from conf.retired import drop_retired_overrides  # noqa: E402
from conf.rundir import BENCH_DIR, atomic_write_json, git_sha  # noqa: E402

OURS = "swiftspec"
METRICS = ("tokens_per_s", "iteration_time_s", "verify_time_s", "mean_accept_len")
WORKLOAD_KEYS = ("model", "kernels", "prompt_tokens", "max_new_tokens", "experiment_overrides")


def parse_shape(mode: str, label: str) -> list[str]:
    """Overrides for a row's speculation shape from its label ("gamma 4", "bs 8 w 16 d 3", "bs 8 w 8 d auto=3")."""
    words = label.split()
    fields = dict(zip(words[::2], words[1::2]))
    if mode == "autoregressive":
        return []
    if mode == "chain":
        if "gamma" not in fields:
            raise ValueError(f"chain row: spec label {label!r} has no 'gamma N'")
        return [f"spec.gamma={int(fields['gamma'])}"]
    if mode in ("serial_tree", "async_tree"):
        missing = [k for k in ("bs", "w", "d") if k not in fields]
        if missing:
            raise ValueError(f"{mode} row: spec label {label!r} lacks {', '.join(missing)} (expected 'bs B w W d D')")
        d = fields["d"].split("=")[0]  # "auto=3": configured auto, used 3
        return [f"spec.bs={int(fields['bs'])}", f"spec.w={int(fields['w'])}", f"spec.d={d}"]
    raise ValueError(f"unknown mode {mode!r}")


def row_overrides(workload: dict[str, Any], row: dict[str, Any], requests: int, max_new_tokens: int | None,
                  profile: str, prompt_tokens: int, acceptance: str | None = None,
                  kernels: dict[str, Any] | None = None) -> list[str]:
    """Hydra overrides of the `simulate` config for one of our benchmark rows (`acceptance`: a conf/acceptance
    name for a run whose draft modes had no oracle, e.g. the real pair's measured table `smollm2`). `kernels`: the
    run's recorded kernels config (the results' experiment_config): a kernels=graphs workload whose run did not
    replay prefill graphs (the switch absent before it existed: an eager prefill) gets
    kernels.ablate=[prefill_graph]."""
    mode = row["mode"]
    target, _, draft = str(workload.get("parallel") or f"{row.get('target_tp') or 1}x1").partition("x")
    ov = [f"model={workload['model']}", f"parallel={int(target)}x{0 if mode == 'autoregressive' else int(draft)}",
          f"kernels={workload['kernels']}", f"workload.prompt_tokens={prompt_tokens}",
          f"workload.max_new_tokens={int(max_new_tokens or workload['max_new_tokens'])}",
          f"workload.num_requests={requests}", f"sim.profile={profile}", "trace.enabled=false",
          *drop_retired_overrides(workload.get("experiment_overrides", [])),
          *([f"acceptance={acceptance}"] if acceptance else []),
          f"spec={mode}", *parse_shape(mode, row.get("spec", ""))]
    if mode == "serial_tree" and "spec.d=auto" in ov and "d_rule" not in row:
        # recorded before the serial depth tuner (no d_rule in the row): it ran the breadth rule, pinned here
        from policy.depth_tuner import breadth_d

        bs, w = (int(next(o for o in ov if o.startswith(k)).split("=")[1]) for k in ("spec.bs=", "spec.w="))
        ov[ov.index("spec.d=auto")] = f"spec.d={breadth_d(bs, w)}"
    if mode in ("async_tree", "serial_tree") and "spec.d=auto" in ov:
        ov.append("sim.d_rule=runtime")
    if kernels is not None and workload["kernels"] == "graphs" and not _prefill_graph(kernels):
        ov.append("kernels.ablate=[prefill_graph]")
    return ov


def _prefill_graph(kernels: dict[str, Any]) -> bool:
    """Whether a recorded kernels config replayed prefill graphs: a preset one (kernels.preset, kernels.ablate) or
    an older one's switch (absent before it existed: eager prefills)."""
    if "preset" in kernels:
        return kernels["preset"] == "graphs" and "prefill_graph" not in kernels.get("ablate", [])
    return bool(kernels.get("prefill_graph", False))


def simulate_row(overrides: list[str], seeds: int) -> dict[str, Any]:
    """Median metrics of one row's simulations over `seeds` workload seeds."""
    from simulator.metrics import metrics_of
    from simulator.simulation import simulate

    runs, d_used = [], []
    for seed in range(seeds):
        cfg = compose_config("simulate", [*overrides, f"workload.seed={seed}"])
        sim = simulate(cfg, record_events=False)
        runs.append(metrics_of(cfg, sim.tally, sim.d_used, sim.costs.source))
        d_used.append(sim.d_used)
    out = {k: statistics.median(r[k] for r in runs) for k in METRICS if all(r.get(k) is not None for r in runs)}
    out["d_used"] = d_used
    out["cost_model"] = runs[0].get("cost_model")
    return out


def load_results(path: Path) -> dict[str, Any]:
    """A bench_runtime results file, checked for what this needs."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"{path}: not a readable JSON results file ({e})") from None
    missing = [k for k in ("workload_config", "rows") if k not in data]
    if missing:
        raise SystemExit(f"{path}: no {', '.join(missing)} (expected a bench/bench_runtime.py results file)")
    lacking = [k for k in WORKLOAD_KEYS if k not in data["workload_config"]]
    if lacking:
        raise SystemExit(f"{path}: workload_config lacks {', '.join(lacking)}")
    return data


def compare(paths: list[Path], profile: str, requests: int, seeds: int, max_new_tokens: int | None,
            acceptance: str | None = None) -> tuple[list[dict], list[dict]]:
    """(compared rows, skipped rows with the reason)."""
    rows, skipped = [], []
    for path in paths:
        data = load_results(path)
        lengths = data.get("prompt_tokens")  # the measured prompts' lengths (text prompts differ from the config)
        prompt_tokens = (round(statistics.fmean(lengths)) if isinstance(lengths, list) and lengths
                         else int(data["workload_config"]["prompt_tokens"]))
        for row in data["rows"]:
            if row.get("system") != OURS or row.get("status") != "ok":
                continue
            if row["mode"] != "autoregressive" and not row.get("oracle") and acceptance is None:
                skipped.append({"file": str(path), "mode": row["mode"], "reason": "no acceptance oracle in the run: "
                                "pass --acceptance (e.g. smollm2, the real pair's measured table)"})
                continue
            extra = None if row.get("oracle") else acceptance
            ov = row_overrides(data["workload_config"], row, requests, max_new_tokens, profile, prompt_tokens, extra,
                               (data.get("experiment_config") or {}).get("kernels"))
            sim = simulate_row(ov, seeds)
            out = {"file": str(path), "mode": row["mode"], "spec": row.get("spec", ""), "overrides": ov,
                   "measured_repeats": row.get("tokens_per_s_repeats"), "sim_d_used": sim["d_used"]}
            for key in METRICS:
                meas, simv = row.get(key), sim.get(key)
                out[key] = {"measured": meas, "simulated": simv, "error": relative_error(simv, meas)}
            rows.append(out)
    return rows, skipped


def table(rows: list[dict]) -> str:
    lines = ["| mode | shape | tok/s meas | tok/s sim | err | iter ms meas | sim | verify ms meas | sim "
             "| accept meas/sim |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t, it, v, a = (r[k] for k in METRICS)
        lines.append(f"| {r['mode']} | {r['spec'] or '-'} | {fmt(t['measured'], 1, 1)} | {fmt(t['simulated'], 1, 1)} "
                     f"| {pct(t['error'])} | {fmt(it['measured'], 1e3)} | {fmt(it['simulated'], 1e3)} | "
                     f"{fmt(v['measured'], 1e3)} | {fmt(v['simulated'], 1e3)} | "
                     f"{fmt(a['measured'])}/{fmt(a['simulated'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="bench/bench_runtime.py results JSON files")
    ap.add_argument("--profile", default="profiles/h200.json", help="calibrated profile")
    ap.add_argument("--requests", type=int, default=4, help="requests per simulation")
    ap.add_argument("--seeds", type=int, default=3, help="simulations per row (workload seeds 0..N-1), medians")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="override the workload's new tokens (tests)")
    ap.add_argument("--acceptance", default=None,
                    help="conf/acceptance table for draft rows run without the oracle (e.g. smollm2 for the real "
                         "pair); without it those rows are skipped")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON (default runs/bench/sim_vs_bench_<date>_<first file's stem>.json)")
    args = ap.parse_args(argv)
    if args.requests < 1 or args.seeds < 1:
        raise SystemExit(f"--requests and --seeds must be >= 1, got {args.requests} and {args.seeds}")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise SystemExit(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if not Path(args.profile).is_file():
        raise SystemExit(f"--profile: {args.profile} is not a file (a calibrated profile, e.g. profiles/h200.json)")
    for p in args.results:
        if not p.is_file():
            raise SystemExit(f"{p}: no such results file")
    sha = git_sha()
    rows, skipped = compare(args.results, args.profile, args.requests, args.seeds, args.max_new_tokens,
                            args.acceptance)
    today = datetime.date.today().isoformat()
    out = args.out or BENCH_DIR / f"sim_vs_bench_{today}_{args.results[0].stem}.json"
    result = {"benchmark": "sim_vs_bench", "date": today, "git_sha": sha, "profile": args.profile,
              "config": {"requests": args.requests, "seeds": args.seeds, "max_new_tokens": args.max_new_tokens,
                         "acceptance": args.acceptance,
                         "results": [str(p) for p in args.results]},
              "rows": rows, "skipped": skipped, "summary": error_summary(rows, "tokens_per_s"), "json": str(out)}
    atomic_write_json(out, result)
    print(table(rows))
    for sk in skipped:
        print(f"skipped {sk['mode']} ({sk['file']}): {sk['reason']}")
    s = result["summary"]
    if s["n"]:
        print(f"tokens/s: {s['n']} rows, median |error| {s['median_abs_error'] * 100:.1f}%, "
              f"max {s['max_abs_error'] * 100:.1f}%; {out}")
    return result


if __name__ == "__main__":
    main()
