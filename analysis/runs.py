"""Find and load run directories for the figure scripts.

A run dir is a folder holding `config.json` (resolved ExperimentConfig + `meta`) and `metrics.json` (the
metrics contract, docs/CONTRACTS.md); `iterations.csv` and `traces.jsonl` are read when a figure needs them.
Inputs are paths or globs: a run dir itself, or any folder above run dirs (a Hydra sweep dir, `runs/`).

Every error names the folder and the missing file or key, so a figure that cannot be drawn says which run
is at fault. This module only reads; it never writes into a run dir and never re-runs anything.
"""

from __future__ import annotations

import csv
import glob
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conf.rundir import read_run
from conf.trace import TRACE_FILE, TraceRecord, read_traces

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"
ITERATIONS_FILE = "iterations.csv"

TEXT_COLUMNS = ("ranks",)
"""iterations.csv columns that are not numbers: `ranks`, dot-joined draft ranks ("3.-1"; "1.1" is two ranks, not
1.1; runtime/metrics.py)."""
PARITY_KEYS = ("mode", "model", "target_gpus", "draft_gpus", "bs", "w", "d")
"""Metrics that identify one configuration when pairing simulated and measured runs."""
CONFIGURED_KEYS = {"bs": "spec.bs", "w": "spec.w", "d": "spec.d"}
"""Parity keys taken from the resolved config when it has them. The metrics report the values a run *used*,
and the writers differ there: the simulator reports the resolved d (e.g. 11 for d: auto) and chain's
effective bs = gamma + 1 and w = 1, the runtime reports "auto" and the configured widths. Runs pair when
they were configured alike."""


class RunDirError(ValueError):
    """A path is not a usable run dir, or lacks a file or key a figure needs; the message names both."""


@dataclass(frozen=True)
class Run:
    """One loaded run dir: resolved config, metadata and metrics (iterations and traces read on demand)."""

    path: Path
    config: dict[str, Any]
    meta: dict[str, Any]
    metrics: dict[str, Any]

    def metric(self, key: str) -> Any:
        """The metrics.json value of `key`; RunDirError naming the folder if it is absent."""
        if key not in self.metrics:
            raise RunDirError(f"{self.path}: {METRICS_FILE} has no key {key!r} (keys: {sorted(self.metrics)})")
        return self.metrics[key]

    def number(self, key: str) -> float:
        """A numeric metric as float; RunDirError if it is absent, null or not a finite number."""
        value = self.metric(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise RunDirError(f"{self.path}: {METRICS_FILE} key {key!r} is {value!r}, not a finite number")
        return float(value)

    def setting(self, dotted: str) -> Any:
        """A resolved config value by dotted name (e.g. "kernels.preset"); RunDirError if absent."""
        node: Any = self.config
        for i, part in enumerate(dotted.split(".")):
            if not isinstance(node, dict) or part not in node:
                where = ".".join(dotted.split(".")[:i]) or "top level"
                raise RunDirError(f"{self.path}: {CONFIG_FILE} has no {dotted!r} (missing {part!r} at {where})")
            node = node[part]
        return node

    def kernels_backend(self) -> str:
        """The kernels backend the run used, reference | triton, from config.json: `kernels.preset` (runs since the
        presets: conf/kernels_config.py PRESETS) or an older run's `kernels.backend`; RunDirError if it has neither."""
        from conf.kernels_config import PRESETS

        if self.has_setting("kernels.preset"):
            preset = self.setting("kernels.preset")
            if preset not in PRESETS:
                raise RunDirError(f"{self.path}: {CONFIG_FILE} kernels.preset {preset!r} is not one of "
                                  f"{', '.join(PRESETS)}")
            return PRESETS[preset].backend
        if not self.has_setting("kernels.backend"):
            raise RunDirError(f"{self.path}: {CONFIG_FILE} has no 'kernels.preset' (nor an older run's "
                              f"'kernels.backend')")
        return str(self.setting("kernels.backend"))

    def key(self, keys: Sequence[str] = PARITY_KEYS) -> tuple[str, ...]:
        """Metric values of `keys` as strings (so 6 and "6", "auto" compare the way a reader expects)."""
        return tuple(str(self.metric(k)) for k in keys)

    def parity_key(self, keys: Sequence[str] = PARITY_KEYS) -> tuple[str, ...]:
        """Like `key`, but bs, w and d come from the resolved config when present (see CONFIGURED_KEYS)."""
        out = []
        for k in keys:
            dotted = CONFIGURED_KEYS.get(k)
            if dotted is not None and self.has_setting(dotted):
                out.append(str(self.setting(dotted)))
            else:
                out.append(str(self.metric(k)))
        return tuple(out)

    def has_setting(self, dotted: str) -> bool:
        """Whether the resolved config has `dotted` (e.g. "spec.d")."""
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    @property
    def has_iterations(self) -> bool:
        """Whether the run wrote a per-iteration breakdown."""
        return (self.path / ITERATIONS_FILE).is_file()

    @property
    def has_traces(self) -> bool:
        """Whether the run wrote trace records."""
        return (self.path / TRACE_FILE).is_file()

    def iterations(self) -> list[dict[str, Any]]:
        """Rows of iterations.csv with numeric values (empty cells become NaN); TEXT_COLUMNS stay strings."""
        p = self.path / ITERATIONS_FILE
        if not p.is_file():
            raise RunDirError(f"{self.path}: {ITERATIONS_FILE} is missing")
        with p.open(newline="") as f:
            rows = list(csv.DictReader(f))
        out = []
        for i, row in enumerate(rows, start=2):  # line 1 is the header
            try:
                out.append({k: (v or "") if k in TEXT_COLUMNS else float(v) if v not in ("", None) else math.nan
                            for k, v in row.items()})
            except ValueError as e:
                raise RunDirError(f"{p}:{i}: non-numeric value ({e})") from e
        return out

    def traces(self) -> list[TraceRecord]:
        """Trace records of traces.jsonl (conf/trace.py schema)."""
        p = self.path / TRACE_FILE
        if not p.is_file():
            raise RunDirError(f"{self.path}: {TRACE_FILE} is missing")
        return read_traces(p)


def is_run_dir(path: Path) -> bool:
    """A folder with both config.json and metrics.json."""
    return (path / CONFIG_FILE).is_file() and (path / METRICS_FILE).is_file()


def _check_complete(folder: Path) -> None:
    """Raise if `folder` holds one of the two required files but not the other (a torn or partial run)."""
    has = {name: (folder / name).is_file() for name in (CONFIG_FILE, METRICS_FILE)}
    if any(has.values()) and not all(has.values()):
        missing = next(name for name, ok in has.items() if not ok)
        raise RunDirError(f"{folder}: not a complete run dir, {missing} is missing")


def _run_dirs_in(path: Path) -> list[Path]:
    """`path` itself if it is a run dir, else the run dirs below it (hidden folders such as .hydra skipped)."""
    if path.is_file():  # a glob such as runs/*/metrics.json names files inside run dirs
        path = path.parent
    _check_complete(path)
    if is_run_dir(path):
        return [path]
    below = set()
    for marker in [*path.rglob(METRICS_FILE), *path.rglob(CONFIG_FILE)]:
        if not any(part.startswith(".") for part in marker.relative_to(path).parts):
            _check_complete(marker.parent)
            below.add(marker.parent)
    return sorted(below)


def find_run_dirs(patterns: Iterable[str | Path]) -> list[Path]:
    """Run dirs named by `patterns` (paths or globs, `**` allowed), each a run dir or a folder above some.

    Raises RunDirError when a pattern matches nothing, when it names no run dir (in or below what it
    matches), or when a folder has only one of config.json / metrics.json.
    """
    found: dict[Path, None] = {}
    for pattern in patterns:
        text = str(pattern)
        matches = sorted(glob.glob(text, recursive=True)) if glob.has_magic(text) else [text]
        matches = [m for m in matches if Path(m).exists()]
        if not matches:
            raise RunDirError(f"{text}: no such run dir (nothing matches)")
        dirs = [d for m in matches for d in _run_dirs_in(Path(m))]
        if not dirs:
            raise RunDirError(f"{text}: no run dir ({CONFIG_FILE} + {METRICS_FILE}) in or below it")
        found.update(dict.fromkeys(dirs))
    return list(found)


def load_run(path: str | Path) -> Run:
    """Load one run dir; RunDirError naming the folder if a required file is missing or not valid JSON."""
    path = Path(path)
    _check_complete(path)
    try:
        raw = read_run(path)
    except (FileNotFoundError, ValueError) as e:
        raise RunDirError(str(e)) from e
    for name, part in (("config", raw["config"]), ("metrics", raw["metrics"])):
        if not isinstance(part, dict) or not part:
            raise RunDirError(f"{path}: {name} in {name}.json is empty or not a JSON object")
    return Run(path=path, config=raw["config"], meta=raw["meta"], metrics=raw["metrics"])


def load_runs(patterns: Iterable[str | Path]) -> list[Run]:
    """Find (see `find_run_dirs`) and load every run dir, in path order."""
    return [load_run(p) for p in find_run_dirs(patterns)]


def require(runs: Iterable[Run], keys: Iterable[str]) -> None:
    """Check up front that every run has every metric in `keys` (the first gap raises, naming both)."""
    keys = list(keys)
    for run in runs:
        for k in keys:
            run.metric(k)


def varying_keys(runs: Sequence[Run], keys: Sequence[str]) -> list[str]:
    """The subset of `keys` whose metric values differ between `runs` (what a legend must show)."""
    return [k for k in keys if len({str(r.metrics.get(k)) for r in runs}) > 1]


def mean_by(runs: Iterable[Run], key: Callable[[Run], Hashable], value: Callable[[Run], float]
            ) -> dict[Hashable, tuple[float, list[Run]]]:
    """Group runs by `key` and average `value` over each group (repeats of one config, e.g. seeds).

    Returns {key: (mean, runs of the group)} in first-seen order.
    """
    groups: dict[Hashable, list[Run]] = {}
    for r in runs:
        groups.setdefault(key(r), []).append(r)
    return {k: (sum(value(r) for r in rs) / len(rs), rs) for k, rs in groups.items()}
