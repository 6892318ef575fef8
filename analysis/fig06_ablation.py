"""Figure 6: ablation: AR, chain, serial tree, async tree, async tree + kernels (tokens/s, speedup over AR).

Input: run dirs of the steps of the ablation. A bar's category is the decoding mode (metrics `mode`) plus
" + kernels" when the run used the Triton kernels (config.json `kernels.preset` triton or graphs, or an older run's
`kernels.backend == "triton"`: `Run.kernels_backend`), so any mode with either backend gets its own bar; the paper's
ladder is AR, chain, serial tree, async tree (all reference kernels) and async tree + kernels. One bar group per model
pair (and source, if mixed); each bar is labelled with its speedup over the group's AR bar (reference kernels when
present). Repeats averaged.

Usage: python analysis/fig06_ablation.py RUN_DIR_OR_GLOB... --out docs/figures/fig06_ablation
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from analysis import cli, style
from analysis.figdata import FigureData, Panel
from analysis.runs import Run, RunDirError, mean_by, require

KEYS = ("mode", "model", "source", "tokens_per_s")
KERNELS_SUFFIX = " + kernels"


def uses_kernels(run: Run) -> bool:
    """Whether the run used the Triton kernels (`Run.kernels_backend`)."""
    return run.kernels_backend() == "triton"


def category(run: Run) -> str:
    """Bar label: "async tree + kernels", "serial tree", "AR", ..."""
    return style.mode_label(str(run.metric("mode"))) + (KERNELS_SUFFIX if uses_kernels(run) else "")


def category_sort_key(run: Run) -> tuple[tuple[int, str], bool]:
    """Ablation order: by mode (AR, chain, serial tree, async tree), reference kernels before Triton."""
    return (style.mode_sort_key(str(run.metric("mode"))), uses_kernels(run))


@style.styled
def make_figure(runs: Sequence[Run]) -> tuple[Figure, FigureData]:
    """Tokens/s per ablation step, one bar group per model pair, bars labelled with speedup over AR."""
    if not runs:
        raise RunDirError("fig06: no runs given")
    require(runs, KEYS)
    for r in runs:
        r.kernels_backend()
    with_source = len({r.metric("source") for r in runs}) > 1

    def group(r: Run) -> str:
        g = style.model_label(str(r.metric("model")))
        return g + (f" ({style.source_label(str(r.metric('source')))})" if with_source else "")

    runs = sorted(runs, key=lambda r: (group(r), category_sort_key(r)))
    categories = list(dict.fromkeys(category(r) for r in sorted(runs, key=category_sort_key)))
    panel = Panel(xlabel="decoding method", ylabel="throughput (tokens/s)")
    for (series, cat), (mean, rs) in mean_by(runs, lambda r: (group(r), category(r)),
                                             lambda r: r.number("tokens_per_s")).items():
        panel.series_for(series).add(cat, mean, mode=str(rs[0].metric("mode")), kernels=uses_kernels(rs[0]),
                                     runs=[str(r.path) for r in rs])
    ar = style.mode_label("autoregressive")
    for s in panel.series.values():
        base_cat = ar if ar in s.x else ar + KERNELS_SUFFIX if ar + KERNELS_SUFFIX in s.x else None
        base = s.y[s.x.index(base_cat)] if base_cat else None
        s.extra["speedup"] = [y / base if base else None for y in s.y]
    if not any(style.mode_label("autoregressive") in c for c in categories):
        panel.notes.append("no AR runs: no speedup labels")
    data = FigureData(title="Ablation: throughput per decoding method", panels={"ablation": panel})

    fig, (ax,) = style.new_figure(width_in=style.DOUBLE_COLUMN_IN * 0.7)
    colours = style.palette(panel.series)
    width = 0.8 / max(1, len(panel.series))
    for i, (series, s) in enumerate(panel.series.items()):
        xs = [categories.index(x) - 0.4 + width * (i + 0.5) for x in s.x]
        if len(panel.series) == 1:  # one group: colour bars by mode, hatch the Triton-kernel bars
            colour = [style.mode_colour(m) for m in s.extra["mode"]]
            hatch = ["//" if k else "" for k in s.extra["kernels"]]
        else:
            colour, hatch = [colours[series]] * len(s.x), ["//" if k else "" for k in s.extra["kernels"]]
        bars = ax.bar(xs, s.y, width=width * 0.95, color=colour, hatch=hatch, edgecolor="white", label=series)
        labels = [f"{v:.2f}x" if v is not None else "" for v in s.extra["speedup"]]
        ax.bar_label(bars, labels=labels, fontsize=6, padding=1)
    ax.set_xticks(range(len(categories)), categories)
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    ax.set_title(data.title + " (labels: speedup over AR)")
    ax.margins(y=0.12)
    style.notes(ax, panel.notes)
    if len(panel.series) > 1:
        ax.legend(loc="upper left")
    return fig, data


if __name__ == "__main__":
    raise SystemExit(cli.run_script(make_figure, __doc__, "docs/figures/fig06_ablation"))
