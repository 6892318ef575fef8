"""What a figure plotted: every `make_figure(runs)` returns a `FigureData` next to the matplotlib figure.

Tests check these values against the run dirs they wrote, and each figure script saves them as JSON
next to the PNG/PDF, so a number in the paper can be traced to the runs it came from.

    FigureData(title, panels={panel_name: Panel(xlabel, ylabel, series={series_name: Series(x, y)})})

`Series.extra` carries per-point columns a plot needs beyond x and y (Gantt rows, run paths, error bars).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Series:
    """One plotted line, bar group or set of boxes: x and y of equal length."""

    x: list[Any] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    extra: dict[str, list[Any]] = field(default_factory=dict)
    """Per-point extra columns, each as long as x (e.g. "row" of a Gantt bar, "run" paths)."""

    def add(self, x: Any, y: float, **extra: Any) -> None:
        """Append one point (and its extra columns)."""
        self.x.append(x)
        self.y.append(y)
        for k, v in extra.items():
            self.extra.setdefault(k, []).append(v)


@dataclass
class Panel:
    """One axes: labels (with units), the series drawn on it, and notes shown to the reader."""

    xlabel: str
    ylabel: str
    title: str = ""
    series: dict[str, Series] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """Caveats drawn on the axes (e.g. "no measured runs")."""

    def series_for(self, name: str) -> Series:
        """The series called `name`, created empty on first use."""
        return self.series.setdefault(name, Series())


@dataclass
class FigureData:
    """All panels of one figure, plus its title."""

    title: str
    panels: dict[str, Panel] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return asdict(self)
