"""The one place figure style is set: fonts, sizes, colours per decoding mode and per GPU group, saving.

Figures are built as `matplotlib.figure.Figure` objects (no pyplot, no GUI backend, no global figure
registry), so scripts and tests behave the same on a headless machine. Colours are the Okabe-Ito
colour-blind-safe palette; a mode keeps its colour in every figure.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure

MODE_ORDER = ("autoregressive", "chain", "serial_tree", "async_tree")
MODE_LABELS = {"autoregressive": "AR", "chain": "chain", "serial_tree": "serial tree", "async_tree": "async tree"}

# Okabe & Ito (2008), "Color Universal Design": distinguishable under the common colour-vision deficiencies.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
MODE_COLOURS = {"autoregressive": "#7f7f7f", "chain": "#E69F00", "serial_tree": "#0072B2",
                "async_tree": "#D55E00"}
GROUP_COLOURS = {"target": "#0072B2", "draft": "#D55E00", "link": "#7f7f7f"}
STEP_COLOURS = {"step.prefill": "#9ecae1", "step.verify": "#0072B2", "step.expand": "#D55E00",
                "step.reroot": "#CC79A7", "msg": "#7f7f7f"}
SOURCE_LABELS = {"sim": "simulated", "runtime": "measured"}

SINGLE_COLUMN_IN = 3.4
"""Width of a one-column figure in inches (two-column paper layout)."""
DOUBLE_COLUMN_IN = 7.0
"""Width of a full-width figure in inches."""
PANEL_HEIGHT_IN = 2.5
DPI = 200

RC = {
    "font.family": "DejaVu Sans",
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.4,
    "lines.markersize": 4,
    "legend.frameon": False,
    "pdf.fonttype": 42,  # embed TrueType, so the PDF text stays editable and searchable
    "savefig.bbox": "tight",
}


F = TypeVar("F", bound=Callable[..., Any])


def styled(make: F) -> F:
    """Decorator for `make_figure`: everything it draws picks up the shared style (RC) without touching the
    caller's global matplotlib settings."""

    @functools.wraps(make)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with matplotlib.rc_context(RC):
            return make(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def mode_label(mode: str) -> str:
    """Readable name of a decoding mode (unknown modes pass through)."""
    return MODE_LABELS.get(mode, mode)


def mode_colour(mode: str) -> str:
    """The colour of a decoding mode in every figure."""
    return MODE_COLOURS.get(mode, "#000000")


def mode_sort_key(mode: str) -> tuple[int, str]:
    """Order modes as AR, chain, serial tree, async tree, then anything else by name."""
    return (MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER), mode)


def palette(names: Iterable[str]) -> dict[str, str]:
    """A colour per name, in order, from the Okabe-Ito palette (modes, by key or label, keep their colour)."""
    out: dict[str, str] = {}
    free = iter(c for c in OKABE_ITO if c not in MODE_COLOURS.values())
    by_label = {label: MODE_COLOURS[mode] for mode, label in MODE_LABELS.items()}
    for name in names:
        out[name] = MODE_COLOURS.get(name) or by_label.get(name) or next(free, "#000000")
    return out


def new_figure(nrows: int = 1, ncols: int = 1, width_in: float = DOUBLE_COLUMN_IN,
               panel_height_in: float = PANEL_HEIGHT_IN, **subplot_kw: Any) -> tuple[Figure, list[Axes]]:
    """A styled figure with a flat list of axes, row-major."""
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width_in, panel_height_in * nrows), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False, **subplot_kw)
    return fig, [ax for row in axes for ax in row]


def notes(ax: Axes, texts: Iterable[str]) -> None:
    """Write caveats (e.g. "no measured runs") in the middle of an axes, one per line, over a white box."""
    text = "\n".join(texts)
    if text:
        ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=8, color="#555555",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})


def legend_below(fig: Figure, ax: Axes) -> None:
    """`ax`'s legend entries in one small frameless row under the panels."""
    handles, names = ax.get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncol=len(names), fontsize=7, frameon=False)


def save_figure(fig: Figure, out_stem: str | Path) -> list[Path]:
    """Write `<out_stem>.png` and `<out_stem>.pdf`, each atomically (temporary file + rename)."""
    stem = Path(out_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for ext in ("png", "pdf"):
        path = stem.with_name(stem.name + "." + ext)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            # No creation date / software version in the files, so regenerating unchanged data is a no-op diff.
            metadata = {"CreationDate": None} if ext == "pdf" else {"Software": None}
            with matplotlib.rc_context(RC):
                fig.savefig(tmp, format=ext, dpi=DPI, metadata=metadata)
            os.chmod(tmp, 0o644)  # mkstemp creates 0600; figures are meant to be read by everyone
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(path)
    return written


def config_label(metrics: Mapping[str, Any], keys: Iterable[str]) -> str:
    """Readable label of a configuration from its metrics, e.g. "async tree, llama3-70b / llama3.2-1b, 6:2".

    `mode`, `method` and `model` are shown by name, target_gpus/draft_gpus as the split "T:D" (either key shows it),
    interconnect and source by name, anything else as key=value.
    """
    parts: list[str] = []
    for k in keys:
        v = metrics.get(k)
        if k == "mode":
            parts.append(mode_label(str(v)))
        elif k == "method":  # already readable (e.g. "async tree + kernels")
            parts.append(str(v))
        elif k == "model":
            parts.append(model_label(str(v)))
        elif k in ("target_gpus", "draft_gpus"):
            split = f"{metrics.get('target_gpus')}:{metrics.get('draft_gpus')} GPUs"
            if split not in parts:
                parts.append(split)
        elif k == "source":
            parts.append(source_label(str(v)))
        elif k == "interconnect":
            parts.append(str(v))
        elif k == "acceptance_scale":
            parts.append(f"acceptance x{v}")
        else:
            parts.append(f"{k}={v}")
    return ", ".join(parts)


def model_label(name: str) -> str:
    """Readable model pair: "llama3-70b_llama3.2-1b" -> "llama3-70b / llama3.2-1b" (target / draft)."""
    return name.replace("_", " / ")


def source_label(source: str) -> str:
    """"sim" -> "simulated", "runtime" -> "measured"."""
    return SOURCE_LABELS.get(source, source)


def mode_series_namer(runs: Iterable[Any]) -> Callable[[Any], str]:
    """Series name of a run: its mode, plus the model / source only when the runs differ in them."""
    runs = list(runs)
    with_model = len({r.metric("model") for r in runs}) > 1
    with_source = len({r.metric("source") for r in runs}) > 1

    def name(r: Any) -> str:
        n = mode_label(str(r.metric("mode")))
        if with_model:
            n += f", {model_label(str(r.metric('model')))}"
        if with_source:
            n += f" ({source_label(str(r.metric('source')))})"
        return n

    return name
