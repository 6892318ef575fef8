"""Re-derive a runtime run dir's iterations.csv from its traces.jsonl, with today's columns.

iterations.csv is a function of the leaders' spans (`runtime.engine.iteration_rows`); a run dir written before a
column existed (e.g. `refills`) gains it here. Every column the file already has must come out equal,
cell for cell, else nothing is written and the error names the run dir, the row and the column. The file is
replaced atomically.

    python -m runtime.rebuild_iterations RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Sequence
from pathlib import Path

from conf.rundir import ITERATIONS_FILE, atomic_write_text
from conf.trace import TRACE_FILE, read_traces
from runtime.engine import iteration_rows
from runtime.metrics import iterations_csv
from runtime.parallel import leader_ranks


class RebuildError(ValueError):
    """A run dir whose iterations.csv cannot be re-derived; the message names the file and what differs."""


def rebuild(run_dir: str | Path) -> int:
    """Rewrite `run_dir`/iterations.csv from its traces; returns the rows written."""
    run_dir = Path(run_dir)
    paths = {name: run_dir / name for name in ("config.json", TRACE_FILE, ITERATIONS_FILE)}
    for name, path in paths.items():
        if not path.is_file():
            raise RebuildError(f"{run_dir}: {name} is missing (a runtime run dir has config.json, {TRACE_FILE} "
                               f"and {ITERATIONS_FILE})")
    config = json.loads(paths["config.json"].read_text())
    meta, parallel = config.get("meta", {}), config.get("config", {}).get("parallel", {})
    if meta.get("source", "runtime") != "runtime":
        raise RebuildError(f"{run_dir}: a {meta.get('source')!r} run; only runtime run dirs derive their rows from "
                           f"their spans")
    target, draft = int(parallel.get("target_gpus", 1)), int(parallel.get("draft_gpus", 0))
    text = iterations_csv(iteration_rows(read_traces(paths[TRACE_FILE]), set(leader_ranks(target, draft)),
                                         colocated=draft == 0))
    new = list(csv.DictReader(text.splitlines()))
    with paths[ITERATIONS_FILE].open(newline="") as f:
        old = list(csv.DictReader(f))
    if len(old) != len(new):
        raise RebuildError(f"{paths[ITERATIONS_FILE]}: {len(old)} rows, its traces give {len(new)}")
    for i, (o, n) in enumerate(zip(old, new), start=2):  # line 1 is the header
        for col, cell in o.items():
            if col not in n:
                raise RebuildError(f"{paths[ITERATIONS_FILE]}: column {col!r} is not derived from the traces")
            if n[col] != cell:
                raise RebuildError(f"{paths[ITERATIONS_FILE]}:{i}: column {col!r} is {cell!r}, its traces give "
                                   f"{n[col]!r}; left as it was")
    atomic_write_text(paths[ITERATIONS_FILE], text)
    return len(new)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+", type=Path)
    args = p.parse_args(argv)
    for d in args.run_dirs:
        print(f"{d}: {rebuild(d)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
