"""Figure 3: throughput under interconnect scenarios (NVLink, PCIe, cross-node InfiniBand) per mode.

Input: run dirs that differ in `interconnect=...` (metrics key `interconnect`, the scenario name), usually
the async-tree and serial-tree modes. Left: grouped bars of tokens/s, one bar per mode in each scenario.
Right: the same relative to the mode's first scenario in SCENARIO_ORDER (NVLink when present), showing how
much of the link cost each mode hides. Repeats of one point are averaged.

Usage: python analysis/fig03_interconnect.py RUN_DIR_OR_GLOB... --out docs/figures/fig03_interconnect
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from analysis import cli, style
from analysis.figdata import FigureData, Panel
from analysis.runs import Run, RunDirError, mean_by, require

KEYS = ("mode", "model", "source", "interconnect", "tokens_per_s")
SCENARIO_ORDER = ("nvlink", "pcie5", "pcie4", "cross_node_ib")
SCENARIO_LABELS = {"nvlink": "NVLink 4", "pcie5": "PCIe 5", "pcie4": "PCIe 4",
                   "cross_node_ib": "cross-node\n(IB NDR)"}


def scenario_sort_key(name: str) -> tuple[int, str]:
    """Known scenarios first, fastest link first; unknown ones after, by name."""
    return (SCENARIO_ORDER.index(name) if name in SCENARIO_ORDER else len(SCENARIO_ORDER), name)


@style.styled
def make_figure(runs: Sequence[Run]) -> tuple[Figure, FigureData]:
    """Tokens/s per interconnect scenario (grouped bars per mode) and the same relative to NVLink."""
    if not runs:
        raise RunDirError("fig03: no runs given")
    require(runs, KEYS)
    name = style.mode_series_namer(runs)
    with_model = len({r.metric("model") for r in runs}) > 1

    runs = sorted(runs, key=lambda r: (style.mode_sort_key(str(r.metric("mode"))), str(r.metric("model")),
                                       scenario_sort_key(str(r.metric("interconnect")))))
    scenarios = sorted({str(r.metric("interconnect")) for r in runs}, key=scenario_sort_key)
    tput = Panel(xlabel="interconnect scenario", ylabel="throughput (tokens/s)", title="throughput")
    ref_label = SCENARIO_LABELS.get(scenarios[0], scenarios[0]).replace("\n", " ")
    rel = Panel(xlabel=tput.xlabel, ylabel=f"relative throughput (x {ref_label})",
                title=f"relative to {ref_label}")
    modes: dict[str, str] = {}
    for (series, scenario), (mean, group) in mean_by(runs, lambda r: (name(r), str(r.metric("interconnect"))),
                                                     lambda r: r.number("tokens_per_s")).items():
        modes[series] = str(group[0].metric("mode"))
        tput.series_for(series).add(scenario, mean, runs=[str(r.path) for r in group])
    for series, s in tput.series.items():
        if s.x[0] != scenarios[0]:  # runs are sorted by scenario, so s.x[0] is the series' fastest link
            rel.notes.append(f"{series}: no {ref_label} run")
            continue
        for x, y in zip(s.x, s.y):
            rel.series_for(series).add(x, y / s.y[0])
    data = FigureData(title="Throughput under interconnect scenarios", panels={"tokens_per_s": tput, "relative": rel})

    fig, axes = style.new_figure(1, 2)
    colours = style.palette(modes.values())
    width = 0.8 / max(1, len(tput.series))
    for ax, p in zip(axes, (tput, rel)):
        for i, (series, s) in enumerate(p.series.items()):
            xs = [scenarios.index(x) - 0.4 + width * (i + 0.5) for x in s.x]
            hatch = "//" if with_model and i % 2 else None
            ax.bar(xs, s.y, width=width * 0.95, color=colours[modes[series]], label=series, hatch=hatch)
        ax.set_xticks(range(len(scenarios)), [SCENARIO_LABELS.get(s, s) for s in scenarios])
        ax.set_xlabel(p.xlabel)
        ax.set_ylabel(p.ylabel)
        ax.set_title(p.title)
        style.notes(ax, p.notes)
    axes[1].axhline(1.0, color="#555555", linestyle=":", linewidth=1.0)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=len(names))
    fig.suptitle(data.title)
    return fig, data


if __name__ == "__main__":
    raise SystemExit(cli.run_script(make_figure, __doc__, "docs/figures/fig03_interconnect"))
