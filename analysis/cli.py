"""The command line every figure script shares: `python analysis/figNN_x.py RUN_DIR_OR_GLOB... --out STEM`.

Loads the run dirs, calls the script's `make_figure(runs, **options)`, and writes `STEM.png`, `STEM.pdf`
and `STEM.json` (the plotted data). Errors about run dirs end the script with the message and exit code 2,
not a traceback. The last stdout line is one JSON object (the files written), for scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from analysis.figdata import FigureData
from analysis.runs import Run, RunDirError, load_runs
from analysis.style import save_figure
from conf.rundir import atomic_write_json

MakeFigure = Callable[..., tuple[Figure, FigureData]]


def parser(doc: str | None, default_out: str) -> argparse.ArgumentParser:
    """The shared arguments; a script adds its own options before calling `main`."""
    p = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR_OR_GLOB",
                   help="run dirs, folders above run dirs, or globs (quote them to let Python expand **)")
    p.add_argument("--out", default=default_out, help=f"output stem, no extension (default: {default_out})")
    return p


def main(make_figure: MakeFigure, args: argparse.Namespace, options: dict[str, Any] | None = None) -> int:
    """Load `args.runs`, draw, save PNG + PDF + JSON at `args.out`; returns the exit code."""
    try:
        runs: list[Run] = load_runs(args.runs)
        fig, data = make_figure(runs, **(options or {}))
    except RunDirError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    paths = save_figure(fig, args.out)
    json_path = Path(str(args.out) + ".json")
    atomic_write_json(json_path, data.to_dict())
    os.chmod(json_path, 0o644)  # readable like the PNG/PDF (atomic writes start from a private 0600 file)
    paths.append(json_path)
    print(f"{data.title}: {len(runs)} run dirs -> {', '.join(str(p) for p in paths)}")
    print(json.dumps({"figure": str(args.out), "runs": len(runs), "files": [str(p) for p in paths]}))
    return 0


def run_script(make_figure: MakeFigure, doc: str | None, default_out: str,
               argv: Sequence[str] | None = None, *, skip: int | None = None) -> int:
    """Entry point of a figure script: no options of its own, or (`skip`: its default) `--skip N`, the iterations
    each run leaves out at its start, passed on as `make_figure(runs, skip=N)`."""
    p = parser(doc, default_out)
    if skip is not None:
        p.add_argument("--skip", type=int, default=skip, help=f"iterations left out at the start (default {skip})")
    args = p.parse_args(argv)
    return main(make_figure, args, {"skip": args.skip} if skip is not None else None)
