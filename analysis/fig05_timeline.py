"""Figure 5: iteration timeline: target and draft Gantt charts for the first few iterations of one config.

Input: run dirs with traces.jsonl (conf/trace.py records). Drawn records: `step.*` (step.prefill and
step.verify on the target group, step.expand and step.reroot on the draft group) and `msg.*` (the draft <->
target messages, group "link"), from the lowest rank of each group (the leader: the other ranks of a TP
group repeat its steps); `op.*` records are left out. The window runs from the first drawn record to the
end of the N-th verify step; time 0 is its start. Bars shorter than 0.4% of the window (messages,
re-roots: microseconds next to milliseconds) are drawn at that width so they stay visible; the plotted
data keeps the true durations.

Two stacked panels share the time axis: the measured run (source "runtime") on top and the simulated run
(source "sim") below, for the same configuration (`Run.parity_key`, as in fig04). The config is the first one,
async tree first, that has traces from both sources; otherwise the first simulated one with traces, and
the runtime panel says "no measured runs" (or "no measured run of this config" when runtime traces exist
but none matches a simulated config). When the run has iterations.csv, each verify bar is labelled with
the tokens that iteration emitted.

Usage: python analysis/fig05_timeline.py RUN_DIR_OR_GLOB... [--iterations 4] --out docs/figures/fig05_timeline
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from analysis import cli, style
from analysis.figdata import FigureData, Panel
from analysis.runs import PARITY_KEYS, Run, RunDirError, require
from conf.trace import TraceRecord

ROWS = ("target", "draft", "link")
"""Gantt rows, top to bottom (TraceRecord.group values)."""
SOURCES = (("runtime", "measured (runtime)"), ("sim", "simulated"))
RECORD_LABELS = {"step.prefill": "prefill", "step.verify": "verify (target)", "step.expand": "expand (draft)",
                 "step.reroot": "re-root (draft)"}
MIN_BAR_FRACTION = 0.004
"""Narrowest drawn bar as a fraction of the window (drawing only; the data keeps true durations)."""
MS_PER_S = 1e3


def is_drawn(rec: TraceRecord) -> bool:
    """Steps and messages (prefill included), not per-operator records."""
    return rec.name.startswith("step.") or rec.name.startswith("msg.")


def window(records: Sequence[TraceRecord], iterations: int) -> list[TraceRecord]:
    """Leader-rank step/msg records from the first drawn record to the end of the `iterations`-th verify."""
    drawn = [r for r in records if is_drawn(r)]
    leader = {g: min(r.rank for r in drawn if r.group == g) for g in {r.group for r in drawn}}
    drawn = sorted((r for r in drawn if r.rank == leader[r.group]), key=lambda r: (r.start_s, r.name))
    verifies = [r for r in drawn if r.name == "step.verify"]
    if not verifies:
        return []
    end = verifies[min(iterations, len(verifies)) - 1]
    t_end = end.start_s + end.duration_s
    return [r for r in drawn if r.start_s < t_end]


def emitted_per_iteration(run: Run) -> dict[int, int]:
    """{iteration: tokens emitted} from iterations.csv (first request when iteration numbers restart per
    request); empty without the file."""
    if not run.has_iterations:
        return {}
    rows = run.iterations()
    iters = [int(r["iteration"]) for r in rows]
    if len(set(iters)) < len(iters) and rows:  # numbered per request: the window is the first request's
        first = min(r["request"] for r in rows)
        rows = [r for r in rows if r["request"] == first]
    return {int(r["iteration"]): int(r["emitted"]) for r in rows if r["emitted"] == r["emitted"]}  # skip NaN


def record_colour(name: str) -> str:
    """Colour of a step or message kind (all msg.* share one)."""
    return style.STEP_COLOURS.get(name, style.STEP_COLOURS["msg"] if name.startswith("msg.") else "#999999")


def pick_runs(runs: Sequence[Run]) -> dict[str, Run | None]:
    """{"runtime": run or None, "sim": run or None} of one config, as described in the module docstring."""
    traced = [r for r in runs if r.has_traces]
    if not traced:
        raise RunDirError(f"fig05: none of the {len(runs)} run dirs has a traces.jsonl "
                          f"(first: {runs[0].path})" if runs else "fig05: no runs given")
    require(traced, ("source", *PARITY_KEYS))
    by_source: dict[str, dict[tuple[str, ...], Run]] = {"runtime": {}, "sim": {}}
    for r in traced:
        by_source.setdefault(str(r.metric("source")), {}).setdefault(r.parity_key(), r)

    def order(key: tuple[str, ...]) -> tuple[int, tuple[str, ...]]:
        return (-style.mode_sort_key(key[0])[0], key)  # async tree first: the figure is about overlap

    both = sorted(set(by_source["runtime"]) & set(by_source["sim"]), key=order)
    if both:
        return {"runtime": by_source["runtime"][both[0]], "sim": by_source["sim"][both[0]]}
    if by_source["sim"]:
        return {"runtime": None, "sim": by_source["sim"][min(by_source["sim"], key=order)]}
    return {"runtime": by_source["runtime"][min(by_source["runtime"], key=order)], "sim": None}


@style.styled
def make_figure(runs: Sequence[Run], iterations: int = 4) -> tuple[Figure, FigureData]:
    """Runtime and simulator Gantt charts of the first `iterations` iterations of one config."""
    if iterations < 1:
        raise ValueError(f"iterations: must be >= 1, got {iterations}")
    chosen = pick_runs(runs)
    ref = chosen["sim"] or chosen["runtime"]
    assert ref is not None  # pick_runs returns at least one run
    any_measured = any(r.has_traces and r.metrics.get("source") == "runtime" for r in runs)
    missing = {"runtime": "no measured run of this config" if any_measured else "no measured runs",
               "sim": "no simulated run of this config"}
    panels: dict[str, Panel] = {}
    for source, title in SOURCES:
        run = chosen[source]
        panel = Panel(xlabel="time since the window start (ms)", ylabel="group", title=title)
        panels[source] = panel
        if run is None:
            panel.notes.append(missing[source])
            continue
        panel.title = f"{title}: {run.path.name}"
        recs = window(run.traces(), iterations)
        if not recs:
            panel.notes.append("no step.verify records in traces.jsonl")
            continue
        t0 = recs[0].start_s
        emitted = emitted_per_iteration(run)
        for r in recs:
            try:
                extra = json.loads(r.extra) if r.extra else {}
            except json.JSONDecodeError:
                extra = {"text": r.extra}
            panel.series_for(r.name).add((r.start_s - t0) * MS_PER_S, r.duration_s * MS_PER_S,
                                         row=r.group, iteration=r.iteration, tokens=r.tokens,
                                         emitted=emitted.get(r.iteration), extra=extra)
    config = style.config_label(ref.metrics, ("mode", "model", "target_gpus", "bs", "w", "d"))
    title = f"Iteration timeline, first {iterations} iterations: {config}"
    if chosen["runtime"] is None:
        title += f" ({missing['runtime']})"
    data = FigureData(title=title, panels=panels)

    fig, axes = style.new_figure(2, 1, panel_height_in=1.6, sharex=True)
    names: dict[str, None] = {}
    span = max((x + w for p in panels.values() for s in p.series.values() for x, w in zip(s.x, s.y)), default=1.0)
    for ax, panel in zip(axes, panels.values()):
        for name, s in panel.series.items():
            names[name] = None
            for row in ROWS:
                bars = [(x, max(w, MIN_BAR_FRACTION * span)) for x, w, g in zip(s.x, s.y, s.extra["row"])
                        if g == row]
                if bars:
                    y = len(ROWS) - 1 - ROWS.index(row)
                    ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=record_colour(name),
                                   edgecolor="white", linewidth=0.3)
            if name == "step.verify":  # tokens each verify emitted (iterations.csv), inside its bar
                for x, w, k in zip(s.x, s.y, s.extra["emitted"]):
                    if k is not None:
                        ax.text(x + w / 2, len(ROWS) - 1, f"+{k}", ha="center", va="center", fontsize=6,
                                color="white")
        ax.set_yticks(range(len(ROWS)), list(reversed(ROWS)))
        ax.set_ylim(-0.6, len(ROWS) - 0.4)
        ax.set_ylabel(panel.ylabel)
        ax.set_title(panel.title, loc="left")
        ax.grid(axis="y", visible=False)
        style.notes(ax, panel.notes)
    axes[-1].set_xlabel(panels["sim"].xlabel)
    order = list(RECORD_LABELS)
    steps = sorted((n for n in names if not n.startswith("msg.")),
                   key=lambda n: (order.index(n) if n in order else len(order), n))
    handles = [Patch(color=record_colour(n), label=RECORD_LABELS.get(n, n)) for n in steps]
    if any(n.startswith("msg.") for n in names):
        handles.append(Patch(color=record_colour("msg"), label="message (link)"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles))
    fig.suptitle(data.title)
    return fig, data


if __name__ == "__main__":
    parser = cli.parser(__doc__, "docs/figures/fig05_timeline")
    parser.add_argument("--iterations", type=int, default=4, help="verify steps to show (default: 4)")
    args = parser.parse_args()
    raise SystemExit(cli.main(make_figure, args, {"iterations": args.iterations}))
