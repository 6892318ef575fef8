"""Run directories: what every run (simulate, generate, bench, calibrate) writes, and how it is read back.

Layout of a run dir:
    config.json       resolved ExperimentConfig (plus `meta`: git SHA, seed, date, command, device, oracle)
    metrics.json      summary metrics (one flat-ish JSON object)
    metrics.csv       the same summary as a one-row CSV
    iterations.csv    per-iteration breakdown (optional)
    outputs.jsonl     runtime runs: one line per request (OUTPUTS_FILE: prompt size, generated ids, text, stop)
    traces.jsonl      trace records (conf/trace.py), chrome_trace.json
Every file is written atomically (temporary file + rename), so a crash never leaves a torn result, and readable by
everyone (0644). The entry points log to the console only: no log file (what a run produced is in the files above).

Where results go: entry points and benchmarks write under `runs/` (ignored by git; BENCH_DIR for benchmarks).
What figures, tests and validation read is a curated copy under `data/measured/` (MEASURED_DIR), each entry listed
in its MANIFEST.json; `python -m bench.promote` is the one way in.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import os
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO_ROOT / "runs" / "bench"
"""Default output folder of the benchmarks and probes (bench/): ignored by git, like every run."""
MEASURED_DIR = REPO_ROOT / "data" / "measured"
"""Curated measured results that figures, tests and validation read (tracked; bench/promote.py adds to it)."""
FILE_MODE = 0o644
"""Mode of every result file (mkstemp's 0600 would survive the rename)."""

OUTPUTS_FILE = "outputs.jsonl"
"""A runtime run dir's generated outputs, one JSON object per request, in request order:
{"request": i, "prompt_tokens": n, "tokens": [generated ids], "text": decoded text or null (no tokenizer),
"stop": "eos" | "max_new_tokens" | "max_seq_len"} (runtime/controller.py `stop_reason`)."""

ITERATIONS_FILE = "iterations.csv"
ITERATION_COLUMNS = (
    "request", "iteration", "start_s", "end_s", "verify_s", "expand_s", "reroot_s", "message_s",
    "target_idle_s", "draft_idle_s", "accepted", "emitted", "hit", "ranks", "refills",
)
"""Columns of iterations.csv, one row per verify step, written by the runtime (runtime/metrics.py) and the simulator
(simulator/records.py documents each cell as it records them; docs/CONTRACTS.md "Metrics contract"). `ranks`: the
verified path's draft ranks, dot-joined: one per accepted token, then the bonus token's (-1: not a child in the draft
tree, a miss); empty where it does not apply (autoregressive, simulated runs). The simulator's replay of the run
(`acceptance.kind=replay`) follows them; the runtime's replay oracle does not read them. `refills`: the draft forwards
the next proposal of the request waited for after this verify's re-root (the refill to bs nodes: every miss, and a hit
whose subtree was smaller, e.g. a never-expanded leaf); 0: the subtree was ready; empty for autoregressive runs and a
request's last verify. Older run dirs lack it (runtime/rebuild_iterations.py adds it from their traces)."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and an atomic rename (mode FILE_MODE)."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and an atomic rename (mode FILE_MODE)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    """JSON-encode `obj` (dataclasses allowed) and write it atomically."""
    atomic_write_text(path, json.dumps(_plain(obj), indent=2, sort_keys=False) + "\n")


def atomic_write_csv(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write dict rows as CSV (header = union of keys in first-seen order), atomically."""
    rows = list(rows)
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    for r in rows:
        w.writerow({k: _plain(v) for k, v in r.items()})
    atomic_write_text(path, buf.getvalue())


def _plain(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return {k: _plain(v) for k, v in asdict(obj).items() if not k.startswith("_")}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items() if not str(k).startswith("_")}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


GIT_SHA_ENV = "SWIFTSPEC_GIT_SHA"


def git_sha(repo: Path = REPO_ROOT) -> str:
    """The checkout's commit (with `-dirty` if the tree has changes), or 'unknown' outside git.

    `SWIFTSPEC_GIT_SHA` overrides it: a copied working tree whose `.git` is stale (the GPU machine's copy
    kept reporting an old HEAD) records the commit its caller names.
    """
    if os.environ.get(GIT_SHA_ENV):
        return os.environ[GIT_SHA_ENV]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_meta(seed: int, command: str, device: str, **extra: Any) -> dict[str, Any]:
    """Metadata every run dir records next to its resolved config."""
    return {"git_sha": git_sha(), "seed": seed, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(),
            "command": command, "device": device, **extra}


def write_run(run_dir: Path, config: Any, meta: dict[str, Any], metrics: dict[str, Any]) -> None:
    """Write config.json (config + meta), metrics.json and metrics.csv into `run_dir`."""
    run_dir = Path(run_dir)
    atomic_write_json(run_dir / "config.json", {"config": config, "meta": meta})
    atomic_write_json(run_dir / "metrics.json", metrics)
    flat = {k: v for k, v in _plain(metrics).items() if not isinstance(v, (dict, list))}
    atomic_write_csv(run_dir / "metrics.csv", [flat])


def config_from_dict(data: dict[str, Any]) -> Any:
    """An ExperimentConfig (not yet validated, mutable) from a run dir's config.json `config` object. Fields since
    removed are dropped where they hold a value the code still runs, else refused naming the field
    (conf/retired.py); the kernels switches of an older run map to its preset and ablation list
    (`conf.kernels_config.kernels_from_recorded`)."""
    from omegaconf import OmegaConf

    from conf.kernels_config import kernels_from_recorded
    from conf.retired import strip_retired
    from conf.schema import ExperimentConfig

    data = strip_retired(data)
    if isinstance(data.get("kernels"), dict):
        data["kernels"] = kernels_from_recorded(data["kernels"])
    merged = OmegaConf.merge(OmegaConf.structured(ExperimentConfig), data)
    return OmegaConf.to_object(merged)


def read_run(run_dir: str | Path) -> dict[str, Any]:
    """Read a run dir's config.json and metrics.json: {"config", "meta", "metrics", "path"}."""
    run_dir = Path(run_dir)
    out: dict[str, Any] = {"path": str(run_dir)}
    for name in ("config.json", "metrics.json"):
        p = run_dir / name
        if not p.exists():
            raise FileNotFoundError(f"{run_dir} is not a run dir: {name} is missing")
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}: not valid JSON ({e})") from e
        if name == "config.json":
            out["config"], out["meta"] = data.get("config", {}), data.get("meta", {})
        else:
            out["metrics"] = data
    return out
