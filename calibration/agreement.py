"""Decision agreement: does the simulator order configurations as the runtime measured them?

A user picks the faster of two configurations; the simulator is useful for that when it orders them alike. Rows
(one per measured run, calibration/compare.py) are grouped by what makes two runs comparable: the model pair and the
GPU (`model`, `gpu`) and the workload (`workload`). Repeats of one configuration (run dirs NAME, NAME__r1, ...) are
averaged first: ordering a configuration against its own repeat is noise, not a decision. Within a group every pair
of configurations is one decision: agreed when the measured and the simulated tokens/s order the pair alike,
flipped otherwise (a measured tie is agreed whatever the simulator says, as no choice is wrong there).
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

REPEAT_SEP = "__"
"""Run dir of repeat k > 0 of configuration NAME: NAME__rk."""


def config_means(rows: list[dict[str, Any]], key: str = "tokens_per_s") -> dict[tuple, dict[str, dict[str, float]]]:
    """group -> configuration -> {"measured", "simulated"}: means over the configuration's repeats of `key`
    (rows of {key: {"measured", "simulated"}}); rows missing either value are left out."""
    values: dict[tuple, dict[str, list[tuple[float, float]]]] = {}
    for r in rows:
        m, s = r[key]["measured"], r[key]["simulated"]
        if m is None or s is None or m <= 0:
            continue
        group = (r.get("model"), r.get("gpu"), r.get("workload"))
        values.setdefault(group, {}).setdefault(r["name"].split(REPEAT_SEP)[0], []).append((m, s))
    return {g: {c: {"measured": statistics.fmean(m for m, _ in v), "simulated": statistics.fmean(s for _, s in v)}
                for c, v in configs.items()} for g, configs in values.items()}


def decision_agreement(rows: list[dict[str, Any]], key: str = "tokens_per_s") -> dict[str, Any]:
    """{"pairs": decisions, "agreed": how many the simulator orders as measured, "flipped": [each flipped pair: the
    measured faster `faster` and slower `slower` configuration, their measured and simulated `key`, errors
    (simulated / measured - 1) and the measured gap (faster / slower - 1)], "groups": [model, gpu, workload, configs]}.
    """
    pairs = agreed = 0
    flipped: list[dict[str, Any]] = []
    groups = []
    for (model, gpu, workload), configs in sorted(config_means(rows, key).items(), key=lambda kv: str(kv[0])):
        groups.append({"model": model, "gpu": gpu, "workload": workload, "configs": len(configs)})
        for (a, va), (b, vb) in itertools.combinations(sorted(configs.items()), 2):
            pairs += 1
            measured_gap = va["measured"] - vb["measured"]
            if measured_gap == 0 or measured_gap * (va["simulated"] - vb["simulated"]) > 0:
                agreed += 1
                continue
            (fast, vf), (slow, vs) = ((a, va), (b, vb)) if measured_gap > 0 else ((b, vb), (a, va))
            flipped.append({"model": model, "gpu": gpu, "workload": workload, "faster": fast, "slower": slow,
                            "measured": [vf["measured"], vs["measured"]],
                            "simulated": [vf["simulated"], vs["simulated"]],
                            "errors": [vf["simulated"] / vf["measured"] - 1.0, vs["simulated"] / vs["measured"] - 1.0],
                            "measured_gap": vf["measured"] / vs["measured"] - 1.0})
    flipped.sort(key=lambda f: -f["measured_gap"])
    return {"key": key, "pairs": pairs, "agreed": agreed, "flipped": flipped, "groups": groups}
