"""Figure 9: what a miss costs: the target's idle time before a verify, by the previous re-root's outcome.

Input: run dirs of tree modes (async_tree, serial_tree, chain) with iterations.csv (`request`, `target_idle_s`,
`hit`, and `refills` where recorded: the runtime and the simulator write the same columns). A hit keeps the
subtree the draft grew during the verify; a miss starts a new tree at the bonus token, whose first expansion (the
refill) runs before the next proposal can leave: the target waits for it. A hit on a node whose subtree was
smaller than bs (e.g. a never-expanded leaf) refills too (`refills` > 0): a "refilled hit", which costs what a miss
does. Per run, over the iterations after the first `skip` of each request, each iteration is classed by the
previous iteration's outcome (same request): the median idle after a hit, a refilled hit and a miss, their shares,
and the mean idle per iteration split into the three (share x mean idle). Runs without the `refills` column (before
2026-11-30's fourteenth session) class every hit as a hit.

Left: median idle after each outcome per configuration. Right: the mean idle per iteration, stacked by the previous
outcome (the part a faster refill or a higher ready-hit rate can remove). Measured (`source` runtime) and simulated
(`source` sim) runs of one configuration pair by `Run.parity_key` and stand side by side (hatched: simulated);
repeats are averaged.

Usage: python analysis/fig09_miss_cost.py RUN_DIR_OR_GLOB... [--skip 10] --out docs/figures/fig09_miss_cost
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from matplotlib.figure import Figure

from analysis import cli, style
from analysis.figdata import FigureData, Panel
from analysis.runs import Run, RunDirError, require

TREE_MODES = ("async_tree", "serial_tree", "chain")
SKIP = 10
"""Iterations left out at the start of each request (the first tree, the depth tuner's trials)."""
LABEL_KEYS = ("mode", "bs", "w", "d")
OUTCOMES = ("hit", "refilled", "miss")
"""Classes of the previous re-root: a hit whose subtree was ready, a hit that still refilled, a miss."""
OUTCOME_LABELS = {"hit": "a hit", "refilled": "a refilled hit", "miss": "a miss"}
COLOURS = {"hit": "#4C72B0", "refilled": "#8172B3", "miss": "#DD8452"}


def _outcome(row: dict) -> str:
    """The re-root outcome of an iterations.csv row with a hit (numbers, NaN for empty cells: `Run.iterations`)."""
    if row["hit"] < 0.5:
        return "miss"
    return "refilled" if row.get("refills", math.nan) > 0 else "hit"


def idle_by_outcome(run: Run, skip: int = SKIP) -> dict[str, float]:
    """Per outcome o in OUTCOMES: "<o>_idle_s" (median; NaN without such iterations), "<o>_share", "mean_idle_<o>_s"
    (its part of the mean idle per iteration); "mean_idle_s", "iterations", "refills_recorded" (1.0 if the file
    has the `refills` column, else 0.0: its hits are not split)."""
    rows = run.iterations()
    for col in ("request", "target_idle_s", "hit"):
        if rows and col not in rows[0]:
            raise RunDirError(f"{run.path}: iterations.csv has no column {col!r} (columns: {sorted(rows[0])})")
    after: dict[str, list[float]] = {o: [] for o in OUTCOMES}
    seen: dict[float, int] = {}
    prev: dict[float, str] = {}
    for row in rows:
        req = row["request"]
        k = seen.get(req, 0)
        seen[req] = k + 1
        if k >= skip and req in prev and not math.isnan(row["target_idle_s"]):
            after[prev[req]].append(row["target_idle_s"])
        if not math.isnan(row["hit"]):
            prev[req] = _outcome(row)
        else:
            prev.pop(req, None)
    n = sum(len(v) for v in after.values())
    if n == 0:
        raise RunDirError(f"{run.path}: iterations.csv has no iteration after the first {skip} of a request "
                          f"with a recorded previous re-root (hit); lower --skip or pass a longer run")
    out: dict[str, float] = {"iterations": float(n), "refills_recorded": float("refills" in rows[0])}
    for o, xs in after.items():
        out[f"{o}_idle_s"] = statistics.median(xs) if xs else math.nan
        out[f"{o}_share"] = len(xs) / n
        out[f"mean_idle_{o}_s"] = sum(xs) / n
    out["mean_idle_s"] = sum(out[f"mean_idle_{o}_s"] for o in OUTCOMES)
    return out


def run_label(run: Run) -> str:
    """A tree configuration's label: mode, then gamma (chain) or bs, w and d (the run's own settings)."""
    m = run.metrics
    parts = [style.mode_label(str(m["mode"]))]
    if m["mode"] == "chain":
        parts.append(f"gamma {run.setting('spec.gamma') if run.has_setting('spec.gamma') else m.get('bs')}")
    else:
        d = run.setting("spec.d") if run.has_setting("spec.d") else m.get("d")
        parts.append(f"bs {run.parity_key(('bs',))[0]} w {run.parity_key(('w',))[0]} d {d}")
    return ", ".join(parts)


@style.styled
def make_figure(runs: Sequence[Run], skip: int = SKIP) -> tuple[Figure, FigureData]:
    """Idle after hits and misses, per configuration and source."""
    if not runs:
        raise RunDirError("fig09: no runs given")
    if skip < 0:
        raise RunDirError(f"fig09: --skip must be >= 0, got {skip}")
    require(runs, ("source", "mode", *LABEL_KEYS))
    tree = [r for r in runs if r.metric("mode") in TREE_MODES]
    if not tree:
        raise RunDirError(f"fig09: none of the {len(runs)} runs is a tree mode ({', '.join(TREE_MODES)}); "
                          f"e.g. {runs[0].path} is {runs[0].metric('mode')}")
    stats = {r.path: idle_by_outcome(r, skip) for r in tree}
    groups: dict[tuple[str, str], list[Run]] = {}
    for r in sorted(tree, key=lambda r: (style.mode_sort_key(str(r.metric("mode"))), str(r.path))):
        groups.setdefault((run_label(r), str(r.metric("source"))), []).append(r)
    labels = list(dict.fromkeys(label for label, _ in groups))
    sources = [s for s in ("runtime", "sim") if any(src == s for _, src in groups)]
    median_panel = Panel(xlabel="configuration", ylabel="idle before a verify (ms, median)",
                         title="idle after a hit / a refilled hit / a miss")
    mean_panel = Panel(xlabel="configuration", ylabel="mean idle per iteration (ms)",
                       title="where the idle comes from (label: refill share)")
    outcomes = OUTCOMES if any(s["refills_recorded"] for s in stats.values()) else ("hit", "miss")
    for (label, source), rs in groups.items():
        avg = {key: statistics.fmean(stats[r.path][key] for r in rs)  # repeats of one configuration
               for o in OUTCOMES for key in (f"{o}_idle_s", f"{o}_share", f"mean_idle_{o}_s")}
        src = style.source_label(source)
        runs_col = [str(r.path) for r in rs]
        refill_share = avg["miss_share"] + avg["refilled_share"]
        for o in outcomes:
            name = f"after {OUTCOME_LABELS[o]} ({src})"
            median_panel.series_for(name).add(label, avg[f"{o}_idle_s"] * 1e3, run=runs_col,
                                              share=avg[f"{o}_share"])
            mean_panel.series_for(name).add(label, avg[f"mean_idle_{o}_s"] * 1e3, run=runs_col,
                                            share=avg[f"{o}_share"], refill_share=refill_share)
    if skip:
        median_panel.notes.append(f"first {skip} iterations per request left out")
    data = FigureData(title="What a miss costs: the target's idle before a verify",
                      panels={"median": median_panel, "mean": mean_panel})

    fig, axes = style.new_figure(1, 2, panel_height_in=3.0)
    per = len(outcomes)
    width = 0.8 / (per * len(sources))
    for si, source in enumerate(sources):
        src = style.source_label(source)
        hatch = "//" if source == "sim" else None
        for oi, o in enumerate(outcomes):
            s = median_panel.series.get(f"after {OUTCOME_LABELS[o]} ({src})")
            if s is None:
                continue
            xs = [labels.index(x) - 0.4 + width * (per * si + oi + 0.5) for x in s.x]
            axes[0].bar(xs, s.y, width=width * 0.95, color=COLOURS[o], hatch=hatch, edgecolor="white",
                        label=f"after {OUTCOME_LABELS[o]} ({src})")
        stack = [mean_panel.series.get(f"after {OUTCOME_LABELS[o]} ({src})") for o in outcomes]
        if any(s is None for s in stack):
            continue
        xs = [labels.index(x) - 0.4 + per * width * (si + 0.5) for x in stack[0].x]
        bottom = [0.0] * len(xs)
        bars = None
        for o, s in zip(outcomes, stack):
            bars = axes[1].bar(xs, s.y, bottom=bottom, width=per * width * 0.9, color=COLOURS[o], hatch=hatch,
                               edgecolor="white", label=f"after {OUTCOME_LABELS[o]} ({src})")
            bottom = [b + y for b, y in zip(bottom, s.y)]
        axes[1].bar_label(bars, labels=[f"{100 * m:.0f}%" for m in stack[-1].extra["refill_share"]], fontsize=6,
                          padding=1)
    tilt = len(labels) > 2
    for ax, p in zip(axes, (median_panel, mean_panel)):
        ax.set_xticks(range(len(labels)), labels, rotation=20 if tilt else 0, ha="right" if tilt else "center")
        ax.set_xlim(-0.6, len(labels) - 0.4)
        ax.set_xlabel(p.xlabel + (f" ({median_panel.notes[0]})" if median_panel.notes else ""))
        ax.set_ylabel(p.ylabel)
        ax.set_title(p.title)
        ax.margins(y=0.12)  # room for the refill-share labels
    style.legend_below(fig, axes[0])
    fig.suptitle(data.title)
    return fig, data


if __name__ == "__main__":
    raise SystemExit(cli.run_script(make_figure, __doc__, "docs/figures/fig09_miss_cost", skip=SKIP))
