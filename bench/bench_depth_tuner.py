"""The DepthTuner's auto d against the best fixed d, in simulation (CPU): how often each trial policy finds it.

    python bench/bench_depth_tuner.py [--seeds 16] [--profile profiles/h200.json] [--policies a,b] [--out DIR]

For each case (model pair, GPU split, bs, w) it simulates async_tree at every fixed d, then `seeds` runs with
`spec.d=auto sim.d_rule=runtime` (the runtime's DepthTuner on simulated time, runtime/depth_tuner.py) under each
trial policy of `POLICIES` (the DepthTuner's ALTERNATE / EXPECTED / CREDIT_GROWN / TRIAL): `before`, the policy
before the fifth session of 2026-11-30 (4 rounds of r, then 4 of r + 1, each rated by the tokens emitted by the
proposal it verified), and variants that credit a round with the proposal it grew, rated by emitted or expected
tokens. One request of 512 new tokens after a 1K prompt (the 70B case: 512), the calibrated profile; the best
fixed d by its mean over the same seeds. Writes `<out>/depth_tuner_<date>.json` (git SHA, date, config, per
case: fixed-d tokens/s, per policy: the d chosen per seed and the mean tokens/s) and prints a table. Simulated,
not measured.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from conf import compose_config  # noqa: E402
from conf.rundir import atomic_write_json, git_sha  # noqa: E402
from runtime.depth_tuner import DepthTuner  # noqa: E402
from simulator.simulation import simulate  # noqa: E402

CASES = [  # (label, overrides)
    ("8B+1B 1x1 bs8 w8", ["model=llama3-8b_llama3.2-1b", "parallel=1x1", "spec.bs=8", "spec.w=8"]),
    ("8B+1B 1x1 bs8 w16", ["model=llama3-8b_llama3.2-1b", "parallel=1x1", "spec.bs=8", "spec.w=16"]),
    ("8B+1B 1x1 bs16 w8", ["model=llama3-8b_llama3.2-1b", "parallel=1x1", "spec.bs=16", "spec.w=8"]),
    ("8B+1B 1x1 bs4 w8", ["model=llama3-8b_llama3.2-1b", "parallel=1x1", "spec.bs=4", "spec.w=8"]),
    ("70B+1B 7x1 bs16 w4", ["model=llama3-70b_llama3.2-1b", "parallel=7x1", "spec.bs=16", "spec.w=4",
                            "spec.max_tree_nodes=128", "workload.prompt_tokens=512"]),
]
BASE = ["spec=async_tree", "workload=shape_realistic", "workload.num_requests=1", "workload.max_new_tokens=512",
        "kernels=graphs", "acceptance=smollm2", "trace.enabled=false"]
POLICIES = {  # (ALTERNATE, EXPECTED, CREDIT_GROWN, TRIAL) of runtime.depth_tuner.DepthTuner
    "before": (False, False, False, 4),  # the policy before 2026-11-30's fifth session
    "emitted x16": (False, False, True, 16),
    "alternate expected x16": (True, True, True, 16),
    "expected x4": (False, True, True, 4),
    "expected x16": (False, True, True, 16),  # the default
}
KNOBS = ("ALTERNATE", "EXPECTED", "CREDIT_GROWN", "TRIAL")
FIXED_D = range(1, 10)


def _tokens_per_s(overrides: list[str]) -> tuple[float, int]:
    sim = simulate(compose_config("simulate", overrides), record_events=False)
    chosen = sim.tuner.chosen if sim.tuner is not None else sim.d
    return sim.tally.generated_tokens / sim.tally.wall_s, chosen


def run_case(label: str, overrides: list[str], seeds: int, profile: str, policies: list[str]) -> dict:
    """Fixed-d tokens/s (mean over the seeds) and, per policy, the d chosen by each seed and the mean tokens/s."""
    ov = [*BASE, *overrides, f"sim.profile={profile}"]
    fixed: dict[int, float] = {}
    for d in FIXED_D:
        try:
            fixed[d] = statistics.fmean(_tokens_per_s([*ov, f"spec.d={d}", f"seed={s}"])[0] for s in range(seeds))
        except ValueError:  # d beyond what the tree holds
            break
    best = max(fixed, key=fixed.get)
    out = {"case": label, "overrides": ov, "fixed_tokens_per_s": fixed, "best_fixed_d": best, "policies": {}}
    saved = {k: getattr(DepthTuner, k) for k in KNOBS}
    try:
        for name in policies:
            for knob, value in zip(KNOBS, POLICIES[name]):
                setattr(DepthTuner, knob, value)
            runs = [_tokens_per_s([*ov, "spec.d=auto", "sim.d_rule=runtime", f"seed={s}"]) for s in range(seeds)]
            chosen = [d for _, d in runs]
            out["policies"][name] = {"chosen": chosen, "best_share": chosen.count(best) / seeds,
                                     "mean_tokens_per_s": statistics.fmean(t for t, _ in runs)}
    finally:
        for knob, value in saved.items():
            setattr(DepthTuner, knob, value)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=16, help="simulated runs per case and policy")
    ap.add_argument("--profile", default="profiles/h200.json", help="calibrated profile (sim.profile)")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results", help="results folder")
    ap.add_argument("--cases", type=int, default=len(CASES), help="the first N cases only (tests)")
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma-separated names of POLICIES")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        raise SystemExit(f"--seeds: need at least 1, got {args.seeds}")
    policies = args.policies.split(",")
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise SystemExit(f"--policies: unknown {unknown}; known: {', '.join(POLICIES)}")
    if not Path(args.profile).is_file():
        raise SystemExit(f"--profile: {args.profile} is not a file (a calibrated profile, e.g. profiles/h200.json)")
    results = [run_case(label, ov, args.seeds, args.profile, policies) for label, ov in CASES[:args.cases]]
    record = {"benchmark": "depth_tuner", "git_sha": git_sha(), "date": datetime.date.today().isoformat(),
              "device": "simulated (no GPU)",
              "config": {"seeds": args.seeds, "profile": args.profile, "base": BASE, "knobs": KNOBS,
                         "policies": {p: POLICIES[p] for p in policies}}, "cases": results}
    path = args.out / f"depth_tuner_{record['date']}.json"
    atomic_write_json(path, record)
    print("| case | best fixed d (tok/s) | " + " | ".join(f"{p}: chosen d, best share, mean tok/s" for p in policies)
          + " |\n|---|---|" + "---|" * len(policies))
    for r in results:
        cells = []
        for p in policies:
            pol = r["policies"][p]
            counts = ", ".join(f"{d}x{n}" for d, n in sorted(Counter(pol["chosen"]).items()))
            cells.append(f"{counts}; {pol['best_share']:.0%}; {pol['mean_tokens_per_s']:.1f}")
        best = r["best_fixed_d"]
        print(f"| {r['case']} | {best} ({r['fixed_tokens_per_s'][best]:.1f}) | " + " | ".join(cells) + " |")
    print(f"-> {path}")
    return record


if __name__ == "__main__":
    main(sys.argv[1:])
