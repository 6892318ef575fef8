"""Figure 4: simulator parity: simulated against measured throughput, with ±5% and ±10% error bands.

Input: run dirs of both sources. Measured runs have metrics `source == "runtime"`, simulated runs
`source == "sim"`; a pair shares every key in PARITY_KEYS (mode, model, target_gpus, draft_gpus, bs, w,
d; bs, w and d as configured, from config.json: `Run.parity_key`). Repeats on either side are averaged.
One marker per pair, coloured by mode; the title gives how many pairs fall inside each band. Without
measured runs the figure is drawn empty and its title says "no measured runs": measured numbers only
ever come from runtime run dirs.

Usage: python analysis/fig04_parity.py RUN_DIR_OR_GLOB... --out docs/figures/fig04_parity
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from analysis import cli, style
from analysis.figdata import FigureData, Panel
from analysis.runs import PARITY_KEYS, Run, RunDirError, mean_by, require

BANDS = (0.05, 0.10)
"""Relative error bands drawn around y = x."""


@style.styled
def make_figure(runs: Sequence[Run], keys: Sequence[str] = PARITY_KEYS) -> tuple[Figure, FigureData]:
    """Pair measured and simulated runs by `keys`; plot simulated vs measured tokens/s per mode."""
    if not runs:
        raise RunDirError("fig04: no runs given")
    require(runs, ("source", "mode", "tokens_per_s", *keys))
    measured = mean_by([r for r in runs if r.metric("source") == "runtime"], lambda r: r.parity_key(keys),
                       lambda r: r.number("tokens_per_s"))
    simulated = mean_by([r for r in runs if r.metric("source") == "sim"], lambda r: r.parity_key(keys),
                        lambda r: r.number("tokens_per_s"))

    panel = Panel(xlabel="measured throughput (tokens/s)", ylabel="simulated throughput (tokens/s)")
    errors = []
    for key in sorted(measured, key=lambda k: (style.mode_sort_key(k[0]), k)):
        if key not in simulated:
            continue
        meas, meas_runs = measured[key]
        sim, sim_runs = simulated[key]
        err = sim / meas - 1.0
        errors.append(err)
        mode = str(meas_runs[0].metric("mode"))
        panel.series_for(style.mode_label(mode)).add(
            meas, sim, rel_error=err, mode=mode, key=dict(zip(keys, key)),
            measured_runs=[str(r.path) for r in meas_runs], simulated_runs=[str(r.path) for r in sim_runs])
    unmatched = [k for k in measured if k not in simulated]
    if not measured:
        status = "no measured runs"
    elif not errors:
        status = f"no simulated run matches any of the {len(measured)} measured configs"
    else:
        inside = ", ".join(f"{sum(abs(e) <= b for e in errors)}/{len(errors)} within ±{b:.0%}" for b in BANDS)
        status = f"{len(errors)} pairs: {inside}"
        if unmatched:
            status += f"; {len(unmatched)} measured configs unmatched"
    if unmatched:
        panel.notes.append(f"unmatched measured configs: {len(unmatched)}")
    data = FigureData(title=f"Simulated vs measured throughput ({status})", panels={"parity": panel})

    fig, (ax,) = style.new_figure(width_in=style.SINGLE_COLUMN_IN * 1.3, panel_height_in=3.2)
    values = [v for s in panel.series.values() for v in (*s.x, *s.y)]
    hi = max(values) * 1.15 if values else 1.0
    line = [0.0, hi]
    ax.plot(line, line, color="#333333", linewidth=0.8, label="y = x")
    for band, alpha in zip(BANDS, (0.25, 0.12)):
        ax.fill_between(line, [v * (1 - band) for v in line], [v * (1 + band) for v in line],
                        color="#0072B2", alpha=alpha, linewidth=0, label=f"±{band:.0%}")
    for name, s in panel.series.items():
        mode = s.extra["mode"][0]
        ax.scatter(s.x, s.y, color=style.mode_colour(mode), label=name, zorder=3, s=18)
    if not measured:
        style.notes(ax, ["no measured runs"])
    ax.set_xlim(0, hi)
    ax.set_ylim(0, hi)
    ax.set_aspect("equal")
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    ax.set_title(data.title.replace(" (", "\n("), fontsize=7)
    ax.legend(loc="upper left")
    return fig, data


if __name__ == "__main__":
    raise SystemExit(cli.run_script(make_figure, __doc__, "docs/figures/fig04_parity"))
