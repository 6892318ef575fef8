"""Figure 7: acceptance-length histograms and the re-root hit rate per configuration.

Input: run dirs with metrics `accept_len_hist` ({"1": n, "2": n, ...}: verify steps that emitted that many
tokens, bonus included) and `hit_rate` (fraction of async-tree iterations whose re-root found the accepted
path in the draft tree; null where the mode does not re-root). Left: the histograms, normalised to the
fraction of verify steps, one bar set per configuration. Right: the hit rate per configuration; modes
without re-rooting show "n/a" (and are listed in the panel's notes). Autoregressive runs are left out
(every step emits exactly one token). Labels name the method (mode, plus "+ kernels" for Triton kernels)
and then only the metrics needed to tell the runs apart.

Usage: python analysis/fig07_acceptance_hist.py RUN_DIR_OR_GLOB... --out docs/figures/fig07_acceptance_hist
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from analysis import cli, style
from analysis.figdata import FigureData, Panel
from analysis.runs import Run, RunDirError, require

LABEL_KEYS = ("source", "model", "target_gpus", "acceptance_scale", "interconnect", "bs", "w", "d")
"""Metrics a label may add after the method, in this order, each only if it separates more runs."""


def histogram(run: Run) -> dict[int, int]:
    """accept_len_hist as {length: count}, checked (integer keys >= 1, counts >= 0, not all zero)."""
    raw = run.metric("accept_len_hist")
    if not isinstance(raw, dict) or not raw:
        raise RunDirError(f"{run.path}: metrics.json accept_len_hist is {raw!r}, not a non-empty object")
    try:
        hist = {int(k): int(v) for k, v in raw.items()}
    except (TypeError, ValueError) as e:
        raise RunDirError(f"{run.path}: metrics.json accept_len_hist has a non-integer entry ({e})") from e
    if min(hist) < 1 or min(hist.values()) < 0 or sum(hist.values()) == 0:
        raise RunDirError(f"{run.path}: metrics.json accept_len_hist {raw} needs lengths >= 1 and counts > 0")
    return dict(sorted(hist.items()))


def method(run: Run) -> str:
    """"async tree + kernels" for async_tree with the Triton kernels (`Run.kernels_backend`; a run that records no
    kernels counts as reference), else the mode's name."""
    recorded = run.has_setting("kernels.preset") or run.has_setting("kernels.backend")
    kernels = recorded and run.kernels_backend() == "triton"
    return style.mode_label(str(run.metric("mode"))) + (" + kernels" if kernels else "")


def labels(runs: Sequence[Run]) -> list[str]:
    """One legend label per run: the method, then greedily the LABEL_KEYS that separate more runs; the run
    dir name breaks remaining ties."""
    values = [{"method": method(r), **r.metrics} for r in runs]
    keys = ["method"]
    for k in LABEL_KEYS:
        distinct = len({tuple(str(v.get(x)) for x in keys) for v in values})
        if distinct == len(runs):
            break
        if len({tuple(str(v.get(x)) for x in (*keys, k)) for v in values}) > distinct:
            keys.append(k)
    out = [style.config_label(v, keys) for v in values]
    for label in {lab for lab in out if out.count(lab) > 1}:
        out = [f"{lab} [{r.path.name}]" if lab == label else lab for lab, r in zip(out, runs)]
    return out


@style.styled
def make_figure(runs: Sequence[Run]) -> tuple[Figure, FigureData]:
    """Normalised acceptance-length histograms and re-root hit rates, one entry per run."""
    if not runs:
        raise RunDirError("fig07: no runs given")
    require(runs, ("mode", "accept_len_hist", "hit_rate", "mean_accept_len"))
    skipped = [r for r in runs if r.metric("mode") == "autoregressive"]
    runs = sorted((r for r in runs if r not in skipped),
                  key=lambda r: (style.mode_sort_key(str(r.metric("mode"))), method(r), str(r.path)))
    if not runs:
        raise RunDirError(f"fig07: all {len(skipped)} runs are autoregressive (no acceptance to show), "
                          f"e.g. {skipped[0].path}")
    names = labels(runs)
    hist_panel = Panel(xlabel="acceptance length (tokens emitted per verify step)",
                       ylabel="fraction of verify steps", title="acceptance length")
    hit_panel = Panel(xlabel="configuration", ylabel="re-root hit rate (fraction of iterations)",
                      title="re-root hit rate")
    hit = hit_panel.series_for("hit rate")
    if skipped:
        hist_panel.notes.append(f"{len(skipped)} autoregressive runs left out")
    for name, r in zip(names, runs):
        hist = histogram(r)
        total = sum(hist.values())
        s = hist_panel.series_for(name)
        for length, count in hist.items():
            s.add(length, count / total, count=count)
        s.extra["mean_accept_len"] = [r.number("mean_accept_len")] * len(s.x)
        rate = r.metric("hit_rate")
        if rate is None:
            hit_panel.notes.append(f"{name}: n/a (no re-rooting)")
        else:
            hit.add(name, r.number("hit_rate"), run=str(r.path))
    data = FigureData(title="Acceptance lengths and re-root hit rate",
                      panels={"hist": hist_panel, "hit_rate": hit_panel})

    fig, axes = style.new_figure(1, 2, panel_height_in=2.8)
    colours = style.palette(hist_panel.series)
    width = 0.8 / len(hist_panel.series)
    for i, (name, s) in enumerate(hist_panel.series.items()):
        mean = s.extra["mean_accept_len"][0]
        axes[0].bar([x - 0.4 + width * (i + 0.5) for x in s.x], s.y, width=width * 0.95, color=colours[name],
                    label=f"{name} (mean {mean:.2f})")
    lengths = sorted({x for s in hist_panel.series.values() for x in s.x})
    axes[0].set_xticks(lengths)
    axes[0].legend(loc="upper right")
    # Every configuration gets a slot; those without re-rooting show "n/a" instead of a bar.
    slots = list(hist_panel.series)
    if hit.x:
        bars = axes[1].bar([slots.index(n) for n in hit.x], hit.y, color=[colours[n] for n in hit.x])
        axes[1].bar_label(bars, labels=[f"{v:.2f}" for v in hit.y], fontsize=6, padding=1)
    for i, n in enumerate(slots):
        if n not in hit.x:
            axes[1].text(i, 0.02, "n/a", ha="center", va="bottom", fontsize=7, color="#555555")
    tilt = len(slots) > 2  # long labels side by side overlap
    axes[1].set_xticks(range(len(slots)), slots, rotation=20 if tilt else 0, ha="right" if tilt else "center")
    axes[1].set_xlim(-0.6, len(slots) - 0.4)
    axes[1].set_ylim(0, 1.05)
    for ax, p in zip(axes, (hist_panel, hit_panel)):
        ax.set_xlabel(p.xlabel)
        ax.set_ylabel(p.ylabel)
        ax.set_title(p.title)
    fig.suptitle(data.title)
    return fig, data


if __name__ == "__main__":
    raise SystemExit(cli.run_script(make_figure, __doc__, "docs/figures/fig07_acceptance_hist"))
