"""Figure 2: throughput and speedup over autoregressive decoding (AR) as the draft gets stronger.

Input: simulator run dirs of an acceptance sweep for several modes (presets `acceptance=weak,default,paper_qwen2,
strong`, a family parameter such as `acceptance.top1=...`, or `acceptance.scale=...`), plus AR runs of the same
model. x is the draft's top-1 acceptance at depth 0 (metrics key `acceptance_top1`, scale included: the acceptance
family's `top1`, docs/ACCEPTANCE.md). Left: tokens/s per mode against it. Right: speedup
= tokens/s / AR tokens/s, where the AR baseline of a run is the fastest AR run with the same model, source,
GPU type and interconnect (AR does not depend on acceptance, so the strongest AR configuration is the
fair baseline). Without AR runs the right panel says so. Repeats of one point are averaged.

Usage: python analysis/fig02_acceptance.py RUN_DIR_OR_GLOB... --out docs/figures/fig02_acceptance
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from matplotlib.figure import Figure

from analysis import cli, style
from analysis.figdata import FigureData, Panel
from analysis.runs import Run, RunDirError, mean_by, require

KEYS = ("mode", "model", "source", "gpu", "interconnect", "acceptance_top1", "tokens_per_s")
AR = "autoregressive"


def baseline_key(run: Run) -> tuple[str, ...]:
    """What an AR baseline must share with a run: model, source, GPU type, interconnect."""
    return run.key(("model", "source", "gpu", "interconnect"))


def ar_baselines(runs: Sequence[Run]) -> dict[Hashable, float]:
    """Fastest AR tokens/s per `baseline_key` (repeats of one AR configuration averaged first)."""
    ar = [r for r in runs if r.metric("mode") == AR]
    per_config = mean_by(ar, lambda r: (baseline_key(r), r.key(("target_gpus", "draft_gpus"))),
                         lambda r: r.number("tokens_per_s"))
    best: dict[Hashable, float] = {}
    for (bkey, _), (mean, _) in per_config.items():
        best[bkey] = max(best.get(bkey, 0.0), mean)
    return best


@style.styled
def make_figure(runs: Sequence[Run]) -> tuple[Figure, FigureData]:
    """Tokens/s and speedup over AR against acceptance_top1, one series per mode."""
    if not runs:
        raise RunDirError("fig02: no runs given")
    require(runs, KEYS)
    name = style.mode_series_namer(runs)

    runs = sorted(runs, key=lambda r: (style.mode_sort_key(str(r.metric("mode"))), str(r.metric("model"))))
    tput = Panel(xlabel="draft top-1 acceptance at depth 0", ylabel="throughput (tokens/s)",
                 title="throughput")
    speed = Panel(xlabel=tput.xlabel, ylabel="speedup over AR (x)", title="speedup over AR")
    baselines = ar_baselines(runs)
    points = mean_by(runs, lambda r: (name(r), round(r.number("acceptance_top1"), 4)),
                     lambda r: r.number("tokens_per_s"))
    modes: dict[str, str] = {}
    for (series, scale), (mean, group) in points.items():  # runs are in mode order, so series are too
        modes[series] = str(group[0].metric("mode"))
        tput.series_for(series).add(scale, mean, runs=[str(r.path) for r in group])
        base = baselines.get(baseline_key(group[0]))
        if base and modes[series] != AR:
            speed.series_for(series).add(scale, mean / base, ar_tokens_per_s=base)
    for p in (tput, speed):  # x ascending within every series
        for s in p.series.values():
            order = sorted(range(len(s.x)), key=s.x.__getitem__)
            s.x, s.y = [s.x[i] for i in order], [s.y[i] for i in order]
            s.extra = {k: [v[i] for i in order] for k, v in s.extra.items()}
    if not baselines:
        speed.notes.append("no AR runs: speedup not available")
    data = FigureData(title="Throughput and speedup over AR vs draft acceptance",
                      panels={"tokens_per_s": tput, "speedup": speed})

    fig, axes = style.new_figure(1, 2)
    colours = style.palette(modes.values())
    for ax, p in zip(axes, (tput, speed)):
        for series, s in p.series.items():
            mode = modes[series]
            if mode == AR and len(set(s.y)) == 1:  # AR ignores acceptance: one level across the whole sweep
                ax.axhline(s.y[0], color=colours[mode], linestyle="--", label=series)
            else:
                ax.plot(s.x, s.y, marker="o", color=colours[mode], label=series,
                        linestyle="--" if mode == AR else "-")
        style.notes(ax, p.notes)
        ax.set_xlabel(p.xlabel)
        ax.set_ylabel(p.ylabel)
        ax.set_title(p.title)
        ax.set_ylim(bottom=0)
    if speed.series:
        axes[1].axhline(1.0, color=style.mode_colour(AR), linestyle=":", linewidth=1.0, label="AR = 1x")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=len(names))
    fig.suptitle(data.title)
    return fig, data


if __name__ == "__main__":
    raise SystemExit(cli.run_script(make_figure, __doc__, "docs/figures/fig02_acceptance"))
