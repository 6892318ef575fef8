"""Sweep summary: one table and one plot for the job dirs of a Hydra multirun (`simulate.py` or `generate.py`).

`python simulate.py --multirun ...` ends by writing, into the sweep dir (`hydra.sweep.dir`):

    summary.csv   one row per job: `job`, the swept overrides (columns named as overridden, e.g. `parallel`,
                  `spec.w`), the main metrics (METRICS), `speedup_vs_ar` where the sweep has an autoregressive
                  job to compare with, `error` (a failed job's exception, one line) and `run_dir`
    summary.md    the same table, the best job, and, where a seed was swept (a key whose last part is `seed`),
                  every other combination's median and spread (max - min) over its seeds
    summary.png   the first metric against the first swept parameter, one line per combination of the
                  others (seeds drawn as the median with a min-max bar)

The `SweepSummary` Hydra callback (`hydra.callbacks.sweep_summary` in conf/simulate.yaml and conf/generate.yaml)
writes them when the multirun ends, and prints one line per job as it ends naming the job's swept values.
`python -m analysis.sweep SWEEP_DIR` writes the same files afterwards (e.g. after a sweep killed midway, or a
SLURM one). The files depend only on the job dirs, so both give the same bytes.

What counts as a job: a folder below the sweep dir with Hydra's `.hydra/overrides.yaml`, a `metrics.json` or an
`error.txt` (hidden folders such as `.submitit` are skipped); ordered by `hydra.job.num`. A job's swept values
come from its overrides; the swept keys are those given as sweeps on the command line or in
`hydra.sweeper.params` (read from `multirun.yaml`) plus any key whose value differs between jobs. Job dirs
written with `hydra.output_subdir=null` have no overrides: their swept values are the resolved-config keys
(dotted, from `config.json`) that differ between jobs.

A failed job: Hydra runs every job of a batch and then raises the first failure, so the multirun's
`on_multirun_end` never comes. The callback writes the exception into the job's dir (`error.txt`) as the job
ends, and the summary is written when the sweep process exits all the same. A job without metrics and without
`error.txt` (killed) is a row whose error says so.

`speedup_vs_ar`: a job's tokens/s over that of the autoregressive jobs at the same shapes: those whose resolved
config equals the job's outside `spec`, `parallel`, `acceptance` and `run_name` (autoregressive decoding uses
neither a draft nor acceptance); of several, the fastest (the strongest baseline, as in fig02).
"""

from __future__ import annotations

import atexit
import csv
import io
import json
import math
import os
import re
import statistics
import sys
import tempfile
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from conf.rundir import atomic_write_text

SUMMARY_CSV, SUMMARY_MD, SUMMARY_PNG = "summary.csv", "summary.md", "summary.png"
ERROR_FILE = "error.txt"
OVERRIDES_FILE = Path(".hydra") / "overrides.yaml"
HYDRA_FILE = Path(".hydra") / "hydra.yaml"
METRICS = ("tokens_per_s", "mean_accept_len", "iteration_time_s", "verify_time_s", "draft_busy_fraction",
           "hit_rate")
"""Summary columns, in order; the first is the one plotted. `draft_busy_fraction` is metrics.json's
`busy_fraction.draft`; the others are metrics.json keys of the same name (docs/CONTRACTS.md)."""
SPEEDUP = "speedup_vs_ar"
AR = "autoregressive"
NOT_SHAPES = ("spec", "parallel", "acceptance", "run_name")
"""Resolved-config sections that may differ between a job and its autoregressive baseline."""


class SweepError(ValueError):
    """A folder is not a sweep dir (no job in it) or one of its files cannot be read; the message names it."""


@dataclass
class Job:
    """One job dir of a sweep: its overrides (key -> value as overridden) and its metrics or its error."""

    path: Path
    num: int | None
    overrides: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    error: str = ""


def override_key_value(text: str) -> tuple[str, str]:
    """`spec.w=8` -> ("spec.w", "8"); `+a.b=1` -> ("a.b", "1"); `~a.b` -> ("a.b", "")."""
    key, _, value = text.partition("=")
    return key.lstrip("+~"), value


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SweepError(f"{path}: cannot read it as JSON ({e})") from e


def _job_num(job_dir: Path) -> int | None:
    """Hydra's job number from `.hydra/hydra.yaml`, else the leading digits of the folder name, else None."""
    hydra_file = job_dir / HYDRA_FILE
    if hydra_file.is_file():
        num = OmegaConf.select(OmegaConf.load(hydra_file), "hydra.job.num", default=None)
        if isinstance(num, int):
            return num
    match = re.match(r"(\d+)(_|$)", job_dir.name)
    return int(match.group(1)) if match else None


def _is_job_dir(path: Path) -> bool:
    return (path / OVERRIDES_FILE).is_file() or (path / "metrics.json").is_file() or (path / ERROR_FILE).is_file()


def load_job(job_dir: Path) -> Job:
    """Read one job dir: overrides, metrics, resolved config, and the error of a failed or killed job."""
    job = Job(path=job_dir, num=_job_num(job_dir))
    if (job_dir / OVERRIDES_FILE).is_file():
        listed = OmegaConf.to_container(OmegaConf.load(job_dir / OVERRIDES_FILE))
        if not isinstance(listed, list):
            raise SweepError(f"{job_dir / OVERRIDES_FILE}: expected a list of overrides, got {type(listed).__name__}")
        job.overrides = dict(override_key_value(str(o)) for o in listed)
    if (job_dir / "config.json").is_file():
        job.config = _read_json(job_dir / "config.json").get("config")
    if (job_dir / ERROR_FILE).is_file():
        text = (job_dir / ERROR_FILE).read_text().strip()
        job.error = text.splitlines()[0] if text else f"failed (empty {ERROR_FILE})"
    elif (job_dir / "metrics.json").is_file():
        job.metrics = _read_json(job_dir / "metrics.json")
    else:
        job.error = "no metrics.json and no error.txt (the job did not finish)"
    return job


def load_jobs(sweep_dir: str | Path) -> list[Job]:
    """Every job dir below `sweep_dir`, in job-number order (SweepError if there is none)."""
    root = Path(sweep_dir)
    if not root.is_dir():
        raise SweepError(f"{root}: no such sweep dir")
    found = set()
    for pattern in (str(OVERRIDES_FILE), "metrics.json", ERROR_FILE):
        for marker in root.rglob(pattern):
            job_dir = marker.parent.parent if pattern == str(OVERRIDES_FILE) else marker.parent
            rel = job_dir.relative_to(root).parts
            if rel and not any(p.startswith(".") for p in rel) and _is_job_dir(job_dir):
                found.add(job_dir)
    if not found:
        raise SweepError(f"{root}: no job dir in it (a folder with .hydra/overrides.yaml, metrics.json or "
                         f"{ERROR_FILE}); is it a multirun's hydra.sweep.dir?")
    jobs = [load_job(p) for p in found]
    return sorted(jobs, key=lambda j: (j.num is None, j.num or 0, str(j.path)))


def declared_keys(cfg: DictConfig) -> list[str]:
    """Keys a multirun config gives as sweeps: `hydra.sweeper.params`, then the command line's sweep overrides.

    `cfg` is the multirun's config (live, or read back from the sweep dir's multirun.yaml).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    texts: list[str] = []
    params = OmegaConf.select(cfg, "hydra.sweeper.params", default=None)
    if isinstance(params, DictConfig):
        texts += [f"{k}={v}" for k, v in OmegaConf.to_container(params, resolve=False).items()]
    task = OmegaConf.select(cfg, "hydra.overrides.task", default=None)
    if task is not None:
        texts += [str(t) for t in OmegaConf.to_container(task, resolve=False)]
    parser = OverridesParser.create()
    keys = []
    for text in texts:
        try:
            swept = parser.parse_override(text).is_sweep_override()
        except Exception:  # noqa: BLE001 - a value Hydra itself refused; the differing-values rule still applies
            swept = False
        if swept:
            keys.append(override_key_value(text)[0])
    return keys


def sweep_level_keys(sweep_dir: Path) -> list[str]:
    """`declared_keys` of the sweep dir's multirun.yaml; [] without it."""
    path = sweep_dir / "multirun.yaml"
    return declared_keys(OmegaConf.load(path)) if path.is_file() else []


def _flatten(node: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(node, dict):
        out: dict[str, str] = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: json.dumps(node) if isinstance(node, (list, type(None), bool)) else str(node)}


def swept_keys(jobs: Sequence[Job], declared: Sequence[str] = ()) -> list[str]:
    """The swept keys, in the order the jobs' overrides name them: `declared` ones plus any that differ.

    Jobs without overrides (written with hydra.output_subdir=null) take their values from config.json: those
    jobs' overrides become the resolved-config keys that differ between them.
    """
    bare = [j for j in jobs if not j.overrides and j.config is not None]
    if len(bare) > 1:
        flat = [_flatten(j.config) for j in bare]
        keys = [k for k in flat[0] if k != "run_name" and len({f.get(k) for f in flat}) > 1]
        keys += [k for f in flat[1:] for k in f if k not in flat[0] and k not in keys]
        for j, f in zip(bare, flat):
            j.overrides = {k: f.get(k, "") for k in keys}
    order: list[str] = []
    for j in jobs:
        order += [k for k in j.overrides if k not in order]
    return [k for k in order if k in declared or len({j.overrides.get(k) for j in jobs}) > 1]


def is_seed(key: str) -> bool:
    """A repeat knob (seed, workload.seed, ...): aggregated over in summary.md and the plot."""
    return key.split(".")[-1] == "seed"


def _number(text: str) -> Any:
    """An override value as int or float where it is one, else the text."""
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        return value if math.isfinite(value) else text
    return text


def metric_values(metrics: dict[str, Any]) -> dict[str, Any]:
    """The METRICS of one job's metrics.json (None where it has none)."""
    busy = metrics.get("busy_fraction")
    out = {k: metrics.get(k) for k in METRICS if k != "draft_busy_fraction"}
    out["draft_busy_fraction"] = busy.get("draft") if isinstance(busy, dict) else None
    return {k: out[k] for k in METRICS}


def _shape_key(config: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in config.items() if k not in NOT_SHAPES}, sort_keys=True)


def ar_speedups(jobs: Sequence[Job]) -> list[float | None] | None:
    """Each job's tokens/s over its fastest autoregressive job at the same shapes; None where there is none."""
    def tps(j: Job) -> float | None:
        v = (j.metrics or {}).get("tokens_per_s")
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None

    best: dict[str, float] = {}
    for j in jobs:
        if j.metrics and j.config is not None and j.metrics.get("mode") == AR and tps(j) is not None:
            key = _shape_key(j.config)
            best[key] = max(best.get(key, 0.0), tps(j))  # type: ignore[arg-type]
    if not best:
        return None
    out: list[float | None] = []
    for j in jobs:
        base = best.get(_shape_key(j.config)) if j.config is not None else None
        value = tps(j)
        out.append(value / base if base and value is not None else None)
    return out


@dataclass
class Summary:
    """A sweep's table: the swept keys, the columns and one row (column -> value) per job."""

    keys: list[str]
    columns: list[str]
    rows: list[dict[str, Any]]


def summarize(sweep_dir: str | Path) -> Summary:
    """Read the sweep dir's jobs into rows (nothing is written)."""
    root = Path(sweep_dir)
    jobs = load_jobs(root)
    keys = swept_keys(jobs, sweep_level_keys(root))
    speedups = ar_speedups(jobs)
    columns = ["job", *keys, *METRICS, *([SPEEDUP] if speedups is not None else []), "error", "run_dir"]
    rows = []
    for i, j in enumerate(jobs):
        row: dict[str, Any] = {"job": j.num if j.num is not None else i}
        row.update({k: j.overrides.get(k) for k in keys})  # as overridden (text); the plot reads numbers
        row.update(metric_values(j.metrics) if j.metrics else dict.fromkeys(METRICS))
        if speedups is not None:
            row[SPEEDUP] = speedups[i]
        row["error"] = j.error
        row["run_dir"] = j.path.relative_to(root).as_posix()
        rows.append(row)
    return Summary(keys, columns, rows)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v).replace("|", "\\|")


def _md_table(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return lines


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def seed_groups(summary: Summary) -> tuple[list[str], list[str], dict[tuple, list[dict[str, Any]]]]:
    """(seed keys, other keys, finished rows grouped by the other keys' values in first-seen order)."""
    seeds = [k for k in summary.keys if is_seed(k)]
    others = [k for k in summary.keys if not is_seed(k)]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in summary.rows:
        if not r["error"]:
            groups.setdefault(tuple(r[k] for k in others), []).append(r)
    return seeds, others, groups


def markdown(summary: Summary) -> str:
    """summary.md: the jobs' table, the best job and, with a swept seed, median and spread per combination."""
    failed = sum(1 for r in summary.rows if r["error"])
    n = len(summary.rows)
    lines = ["# Sweep summary", "",
             f"{n} jobs ({n - failed} finished, {failed} failed); swept: "
             f"{', '.join(f'`{k}`' for k in summary.keys) or 'nothing'}. "
             "Written by `python -m analysis.sweep SWEEP_DIR` (and at the end of the multirun).", ""]
    metric_cols = [c for c in summary.columns if c in METRICS or c == SPEEDUP]
    lines += _md_table([c for c in summary.columns if c != "run_dir"], summary.rows)
    ok = [r for r in summary.rows if _finite(r[METRICS[0]])]
    if ok:
        best = max(ok, key=lambda r: r[METRICS[0]])
        values = " ".join(f"{k}={_fmt(best[k])}" for k in summary.keys)
        lines += ["", f"Best {METRICS[0]}: {_fmt(best[METRICS[0]])}, job {best['job']} ({values or 'no swept value'};"
                  f" `{best['run_dir']}`)."]
    seeds, others, groups = seed_groups(summary)
    if seeds:
        lines += ["", f"## Over {', '.join(f'`{k}`' for k in seeds)}: median [spread = max - min] of n jobs", ""]
        agg_rows = []
        for values, rows in groups.items():
            row: dict[str, Any] = dict(zip(others, values))
            row["n"] = len(rows)
            for c in metric_cols:
                xs = [r[c] for r in rows if _finite(r[c])]
                row[c] = f"{_fmt(statistics.median(xs))} [{_fmt(max(xs) - min(xs))}]" if xs else "-"
            agg_rows.append(row)
        lines += _md_table([*others, "n", *metric_cols], agg_rows)
    return "\n".join(lines) + "\n"


def plot(summary: Summary, path: Path) -> None:
    """summary.png: METRICS[0] against the first swept parameter, one line per combination of the others."""
    import matplotlib

    from analysis import style

    metric = METRICS[0]
    seeds, others, _ = seed_groups(summary)
    x_key = others[0] if others else (seeds[0] if seeds else "job")
    line_keys = [k for k in others if k != x_key]
    rows = [r for r in summary.rows if _finite(r[metric])]
    xs_all = list(dict.fromkeys(r[x_key] for r in rows))
    numeric = all(_finite(_number(str(x))) for x in xs_all)
    position = {x: _number(str(x)) if numeric else i for i, x in enumerate(xs_all)}
    lines: dict[tuple, dict[Any, list[float]]] = {}
    for r in rows:
        lines.setdefault(tuple(r[k] for k in line_keys), {}).setdefault(r[x_key], []).append(r[metric])
    with matplotlib.rc_context(style.RC):
        fig = _draw(summary, metric, x_key, line_keys, lines, xs_all, position, numeric)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            fig.savefig(tmp, format="png", dpi=style.DPI, metadata={"Software": None})
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _draw(summary: Summary, metric: str, x_key: str, line_keys: list[str], lines: dict[tuple, dict[Any, list[float]]],
          xs_all: list[Any], position: dict[Any, Any], numeric: bool) -> Any:
    from analysis import style

    fig, (ax,) = style.new_figure(width_in=style.SINGLE_COLUMN_IN * 1.6, panel_height_in=style.PANEL_HEIGHT_IN * 1.2)
    colours = style.OKABE_ITO
    for i, (combo, points) in enumerate(lines.items()):
        xs = sorted(points, key=lambda x: position[x])
        med = [statistics.median(points[x]) for x in xs]
        err = [[m - min(points[x]) for x, m in zip(xs, med)], [max(points[x]) - m for x, m in zip(xs, med)]]
        label = ", ".join(f"{k}={_fmt(v)}" for k, v in zip(line_keys, combo)) or None
        ax.errorbar([position[x] for x in xs], med, yerr=err if any(map(any, err)) else None, marker="o",
                    color=colours[i % len(colours)], label=label, capsize=2)
    if not numeric:
        ax.set_xticks(range(len(xs_all)), [_fmt(x) for x in xs_all])
    ax.set_xlabel(x_key)
    ax.set_ylabel(metric)
    failed = sum(1 for r in summary.rows if r["error"])
    ax.set_title(f"{metric} vs {x_key}" + (f" ({failed} failed jobs not drawn)" if failed else ""))
    if not lines:
        style.notes(ax, ["no job finished"])
    if 1 < len(lines) <= 12:
        ax.legend(fontsize=6)
    elif len(lines) > 12:
        style.notes(ax, [f"{len(lines)} lines: too many to label (see summary.md)"])
    return fig


def write_summary(sweep_dir: str | Path) -> tuple[Summary, list[Path]]:
    """Write summary.csv, summary.md and summary.png into `sweep_dir` (atomically); returns them."""
    root = Path(sweep_dir)
    summary = summarize(root)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=summary.columns, lineterminator="\n")
    writer.writeheader()
    for r in summary.rows:
        writer.writerow({k: "" if v is None else v for k, v in r.items()})
    atomic_write_text(root / SUMMARY_CSV, buf.getvalue())
    atomic_write_text(root / SUMMARY_MD, markdown(summary))
    plot(summary, root / SUMMARY_PNG)
    for name in (SUMMARY_CSV, SUMMARY_MD):
        os.chmod(root / name, 0o644)
    return summary, [root / SUMMARY_CSV, root / SUMMARY_MD, root / SUMMARY_PNG]


def read_summary_csv(path: str | Path) -> list[dict[str, str]]:
    """summary.csv's rows as written (strings; empty = none)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _report(sweep_dir: Path) -> None:
    summary, paths = write_summary(sweep_dir)
    failed = sum(1 for r in summary.rows if r["error"])
    table = _md_table([c for c in summary.columns if c not in ("run_dir",)], summary.rows)
    print("\n".join(table))
    print(f"sweep summary ({len(summary.rows)} jobs, {failed} failed): " + ", ".join(str(p) for p in paths),
          flush=True)


def job_line(num: Any, values: dict[str, str], run_dir: Path, error: BaseException | None = None) -> str:
    """The line printed as a job ends: its number, its swept values, then its headline metrics or its error."""
    named = " ".join(f"{k}={v}" for k, v in values.items())
    head = f"job {num}" + (f" [{named}]" if named else "")
    if error is not None:
        return f"{head}: FAILED {type(error).__name__}: {error}"
    metrics_path = Path(run_dir) / "metrics.json"
    if not metrics_path.is_file():
        return f"{head}: done, no metrics.json in {run_dir}"
    m = metric_values(json.loads(metrics_path.read_text()))
    parts = [f"{_fmt(m['tokens_per_s'])} tok/s", f"accept {_fmt(m['mean_accept_len'])}"]
    if _finite(m["iteration_time_s"]):
        parts.append(f"iteration {m['iteration_time_s'] * 1e3:.3g} ms")
    if _finite(m["hit_rate"]):
        parts.append(f"hit {m['hit_rate']:.3g}")
    return f"{head}: {', '.join(parts)} ({run_dir})"


class SweepSummary(Callback):
    """Hydra callback: per-job line and error.txt as each job ends; the summary files when the multirun ends.

    Does nothing in a single run. Picklable (joblib and submitit ship it to the job processes).
    """

    def __init__(self) -> None:
        self.sweep_dir: str | None = None
        self.declared: list[str] = []

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_dir = str(config.hydra.sweep.dir)
        self.declared = declared_keys(config)
        atexit.register(self._finish, self.sweep_dir)  # a failed job makes Hydra raise before on_multirun_end

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus
        from hydra.types import RunMode

        if config.hydra.mode != RunMode.MULTIRUN:
            return
        run_dir = Path(config.hydra.runtime.output_dir)
        overrides = dict(override_key_value(str(o)) for o in job_return.overrides or [])
        values = {k: v for k, v in overrides.items() if k in self.declared} or overrides
        error: BaseException | None = None
        if job_return.status == JobStatus.FAILED:
            try:
                job_return.return_value  # raises the job's exception  # noqa: B018
            except Exception as e:  # noqa: BLE001 - any job failure becomes its row's error
                error = e
        (run_dir / ERROR_FILE).unlink(missing_ok=True)  # a job dir reused by a later sweep
        if error is not None:
            text = "".join(traceback.format_exception_only(type(error), error)).strip().replace("\n", " ")
            tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            atomic_write_text(run_dir / ERROR_FILE, f"{text}\n\n{tb}")
        print(job_line(config.hydra.job.num, values, run_dir, error), flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        atexit.unregister(self._finish)
        self._finish(str(config.hydra.sweep.dir))

    @staticmethod
    def _finish(sweep_dir: str) -> None:
        try:
            _report(Path(sweep_dir))
        except SweepError as e:
            print(f"sweep summary: {e}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m analysis.sweep SWEEP_DIR...`: write each sweep dir's summary files; exit 2 on a bad dir."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[0] + "\n\nUsage: python -m analysis.sweep SWEEP_DIR...")
        return 0 if args else 2
    for sweep_dir in args:
        try:
            _report(Path(sweep_dir))
        except SweepError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
