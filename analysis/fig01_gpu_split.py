"""Figure 1: decoding throughput (tokens/s) against the GPU split (target:draft GPUs) for several model pairs.

Input: run dirs of one node (the paper's 8 GPUs), typically a simulator sweep such as
`python simulate.py --multirun parallel=4x4,6x2,7x1 model=...`. One line per model pair (and per mode or
source when the inputs mix them); x is the split "T:D" ordered by draft GPUs; repeats of one point are
averaged. The best split of each line is starred. When the runs mix drafts of different strength (e.g. the
measured pair's table and `acceptance=strong`), each line also names its draft's top-1 acceptance (metrics key
`acceptance_top1`). Reads metrics.json only.

Usage: python analysis/fig01_gpu_split.py RUN_DIR_OR_GLOB... --out docs/figures/fig01_gpu_split
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from analysis import cli, style
from analysis.figdata import FigureData, Panel
from analysis.runs import Run, RunDirError, mean_by, require

KEYS = ("model", "mode", "source", "target_gpus", "draft_gpus", "tokens_per_s")


def split_label(run: Run) -> str:
    """"6:2" for 6 target GPUs and 2 draft GPUs."""
    return f"{int(run.number('target_gpus'))}:{int(run.number('draft_gpus'))}"


def _series_name(run: Run, with_mode: bool, with_source: bool, with_draft: bool = False) -> str:
    name = style.model_label(str(run.metric("model")))
    if with_draft:
        top1 = run.metrics.get("acceptance_top1")
        name += f", draft top-1 {top1:.2f}" if isinstance(top1, (int, float)) else ", draft: replay"
    if with_mode:
        name += f", {style.mode_label(str(run.metric('mode')))}"
    if with_source:
        name += f" ({style.source_label(str(run.metric('source')))})"
    return name


@style.styled
def make_figure(runs: Sequence[Run]) -> tuple[Figure, FigureData]:
    """Tokens/s per GPU split, one series per model pair; returns the figure and the plotted data."""
    if not runs:
        raise RunDirError("fig01: no runs given")
    require(runs, KEYS)
    with_mode = len({r.metric("mode") for r in runs}) > 1
    with_source = len({r.metric("source") for r in runs}) > 1
    with_draft = len({r.metrics.get("acceptance_top1") for r in runs}) > 1
    totals = sorted({int(r.number("target_gpus") + r.number("draft_gpus")) for r in runs})
    sources = sorted({style.source_label(str(r.metric("source"))) for r in runs})

    # Categorical x: every split present, fewest draft GPUs first.
    splits = sorted({(int(r.number("draft_gpus")), int(r.number("target_gpus"))) for r in runs})
    order = [f"{t}:{d}" for d, t in splits]
    points = mean_by(runs, lambda r: (_series_name(r, with_mode, with_source, with_draft), split_label(r)),
                     lambda r: r.number("tokens_per_s"))

    panel = Panel(xlabel="GPU split (target GPUs : draft GPUs)", ylabel="throughput (tokens/s)")
    for (name, split), (mean, group) in sorted(points.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        panel.series_for(name).add(split, mean, n=len(group), runs=[str(r.path) for r in group])
    gpus = "/".join(str(t) for t in totals)
    data = FigureData(title=f"Throughput vs GPU split ({gpus} GPUs, {', '.join(sources)})", panels={"split": panel})

    fig, (ax,) = style.new_figure(width_in=style.SINGLE_COLUMN_IN * 1.4)
    colours = style.palette(panel.series)
    for name, s in panel.series.items():
        xs = [order.index(x) for x in s.x]
        ax.plot(xs, s.y, marker="o", color=colours[name], label=name)
        best = max(range(len(s.y)), key=s.y.__getitem__)
        ax.plot(xs[best], s.y[best], marker="*", markersize=10, color=colours[name], linestyle="none")
    ax.set_xticks(range(len(order)), order)
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    ax.set_ylim(bottom=0)
    ax.set_title(data.title)
    ax.legend(loc="best")
    return fig, data


if __name__ == "__main__":
    raise SystemExit(cli.run_script(make_figure, __doc__, "docs/figures/fig01_gpu_split"))
