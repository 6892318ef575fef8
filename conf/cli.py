"""How the entry points (simulate.py, generate.py) meet the user: one line per bad input, unique run directories.

- `run_entry(main)` calls a `@hydra.main` function. A user error (a bad override, an unknown key, a value the schema
  rejects, a missing or malformed file) prints ONE line on stderr, `error: <field or file>: <what was expected>`, and
  exits with code 2; Ctrl-C prints one line and exits with code 130. Anything else is a bug and keeps its traceback.
  `SWIFTSPEC_DEBUG=1` (or Hydra's own `HYDRA_FULL_ERROR=1`) shows the traceback of every error.
- `entry_config(cfg, *checks)` is what an entry point validates with (the tests call it too): the schema's
  `build_config`, which also refuses keys the schema does not have (`+spec.bss=2`), then the entry's own checks.
- Run directories: the default names (conf/<entry>.yaml `hydra.run.dir` / `hydra.sweep.dir`) end in `${run_uid:}`,
  unique among the processes of a host and the runs of a process, so runs started together never share one; a
  folder given as `hydra.run.dir` (or `hydra.sweep.dir`) that already holds a run is refused before anything is
  written; a run that fails before it starts removes the folder Hydra made for it (`discard_unstarted`).
docs/ERRORS.md lists each kind of bad input and its message.
"""

from __future__ import annotations

import difflib
import itertools
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from conf.frozen import ConfigError
from conf.retired import check_overrides

DEBUG_ENV = "SWIFTSPEC_DEBUG"
USER_ERROR_EXIT = 2
INTERRUPTED_EXIT = 130

_FIELD_MESSAGE = re.compile(r"^[A-Za-z_][\w.\[\]+/ -]*: \S")  # "<field or file>: <what>", the house format
_HYDRA_BOOKKEEPING = (".hydra",)  # what Hydra writes into a run dir before the task starts (plus its *.log)


def debug_on() -> bool:
    """Whether tracebacks are wanted (SWIFTSPEC_DEBUG or HYDRA_FULL_ERROR set to anything but empty / 0)."""
    return any(os.environ.get(k, "") not in ("", "0") for k in (DEBUG_ENV, "HYDRA_FULL_ERROR"))


# ---- unknown keys --------------------------------------------------------------------------------------------------

def nearest(name: str, choices: list[str]) -> str | None:
    """The choice closest to `name` (difflib), or None when nothing is close."""
    found = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    return found[0] if found else None


def check_known_keys(node: Any, prefix: str = "") -> None:
    """Raise ConfigError for a key of a composed config (DictConfig) that its schema dataclass does not have, naming
    the nearest valid key: Hydra's `+key=value` adds such keys to a structured config, and converting it to the
    dataclass would drop them silently."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(node, DictConfig):
        return
    schema = OmegaConf.get_type(node)
    if schema is None or not is_dataclass(schema):
        return
    names = [f.name for f in fields(schema) if not f.name.startswith("_")]
    for key in list(node):
        key = str(key)
        if key not in names:
            close = nearest(key, names)
            hint = f"did you mean {prefix}{close}?" if close else f"valid keys: {', '.join(names)}"
            raise ConfigError(f"{prefix}{key}: no such field ({hint})")
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none():
            check_known_keys(child, f"{prefix}{key}.")


def _schema_field_names(path: str) -> tuple[str, list[str]] | None:
    """For a dotted key `a.b.c`: the prefix `a.b.` and the field names of the schema at `a.b` (None if unknown)."""
    import typing

    from conf.schema import ExperimentConfig

    cls: Any = ExperimentConfig
    parts = path.split(".")
    for part in parts[:-1]:
        hints = typing.get_type_hints(cls) if is_dataclass(cls) else {}
        t = hints.get(part)
        args = [a for a in typing.get_args(t) if a is not type(None)] if t is not None else []
        t = args[0] if args and not is_dataclass(t) else t
        if t is None or not is_dataclass(t):
            return None
        cls = t
    return ".".join(parts[:-1]) + ("." if len(parts) > 1 else ""), [f.name for f in fields(cls)]


# ---- one line per user error ---------------------------------------------------------------------------------------

def _first_line(text: str) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def hydra_error_line(exc: BaseException) -> str | None:
    """One line for Hydra's / OmegaConf's errors about the command line or the config files; None for others."""
    from hydra.errors import HydraException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(exc, MissingConfigException) and exc.options is not None:
        m = re.search(r"Could not find '([^']+)'", str(exc))
        missing = m.group(1) if m else str(exc.missing_cfg_file)
        group, _, option = missing.rpartition("/")
        options = [o for o in exc.options if not o.endswith("_schema")]  # the schema nodes are no choice
        close = nearest(option, options)
        return (f"{group or 'config'}: no option {option!r}" + (f" (did you mean {close}?)" if close else "")
                + f"; available: {', '.join(options)}")
    if not isinstance(exc, (HydraException, OmegaConfBaseException)):
        return None
    if isinstance(exc, OverrideParseException):
        return f"{exc.override}: not a valid override ({_first_line(exc.message)})"
    text, cause = str(exc), exc.__cause__
    m = re.match(r"(?:Could not override|Error merging override) '?([^'\s=]+)", text)
    key = m.group(1) if m else None
    if key is not None and cause is not None:
        detail = _first_line(str(cause))
        if re.match(r"Key '[^']+' (?:is )?not in", detail) or "not in struct" in detail:
            known = _schema_field_names(key.lstrip("+~"))
            if known is not None:
                prefix, names = known
                close = nearest(key.rsplit(".", 1)[-1], names)
                hint = f"did you mean {prefix}{close}?" if close else f"valid keys: {', '.join(names)}"
                return f"{key}: no such field ({hint})"
            return f"{key}: no such field"
        return f"{key}: {detail}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if cause is not None and isinstance(cause, OmegaConfBaseException):
        lines.append(_first_line(str(cause)))
    return "; ".join(lines) or type(exc).__name__


def error_line(exc: BaseException) -> str | None:
    """The one line a user error prints, or None when `exc` is not a user error (a bug keeps its traceback).

    User errors: ConfigError; Hydra's and OmegaConf's errors about overrides and config files; a missing file; and
    the ValueErrors that name a field or a file first (`<field or file>: <what was expected>`, the house format of
    every check of a config value or an input file)."""
    if isinstance(exc, ConfigError):
        return str(exc).replace("\n", " ")
    line = hydra_error_line(exc)
    if line is not None:
        return line
    if isinstance(exc, FileNotFoundError):
        return str(exc) if not exc.filename else f"{exc.filename}: {exc.strerror or 'not found'}"
    if isinstance(exc, ValueError) and _FIELD_MESSAGE.match(str(exc)):
        return " ".join(str(exc).split("\n"))
    if isinstance(exc, RuntimeError) and re.match(r"rank \d+ \(\w+\) failed: ", str(exc)):
        return _first_line(str(exc))  # the root cause once; SWIFTSPEC_DEBUG=1 shows every rank and the traceback
    return None


# ---- validation: what an entry point runs before it starts ---------------------------------------------------------

def entry_config(cfg: Any, *checks: Callable[[Any], None]) -> Any:
    """Validate and freeze a composed config (`conf.build_config`: unknown keys, the schema's rules), then run the
    entry's own `checks` on it; returns the frozen ExperimentConfig. The entry points and tests/conf/test_errors.py
    call this."""
    from conf import build_config

    config = build_config(cfg)
    for check in checks:
        check(config)
    return config


# ---- run directories -----------------------------------------------------------------------------------------------

_COUNTER = itertools.count()


def run_uid() -> str:
    """`${run_uid:}` in a run dir's name: this process's id, and a count of the runs it has named before (pids are
    unique among running processes; Hydra caches the value per composed config, so one run keeps one name)."""
    n = next(_COUNTER)
    return f"{os.getpid()}" if n == 0 else f"{os.getpid()}-{n}"


def register_resolvers() -> None:
    """Register `${run_uid:}` with OmegaConf (idempotent)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("run_uid"):
        OmegaConf.register_new_resolver("run_uid", run_uid, use_cache=True)


_STATE: dict[str, Any] = {"existed": set()}


def _given_dirs(argv: list[str]) -> dict[str, Path]:
    """hydra.run.dir / hydra.sweep.dir given on the command line."""
    out = {}
    for arg in argv:
        m = re.match(r"^\+{0,2}hydra\.(run|sweep)\.dir=(.+)$", arg)
        if m:
            out[m.group(1)] = Path(m.group(2).strip("'\""))
    return out


def check_given_dirs(argv: list[str]) -> None:
    """Refuse a `hydra.run.dir` that holds a run already, or a `hydra.sweep.dir` whose jobs' folders hold runs: a run
    is never overwritten. Runs before Hydra writes anything."""
    given = _given_dirs(argv)
    run = given.get("run")
    if run is not None and any((run / name).exists() for name in ("config.json", "metrics.json")):
        raise ConfigError(f"hydra.run.dir: {run} already holds a run (config.json); give a new folder, or leave "
                          "hydra.run.dir unset for a unique one under runs/")
    sweep = given.get("sweep")
    if sweep is not None and sweep.is_dir() and any(sweep.glob("*/config.json")):
        raise ConfigError(f"hydra.sweep.dir: {sweep} already holds the runs of a sweep; give a new folder, or "
                          "leave hydra.sweep.dir unset for a unique one under runs/")


def _snapshot(argv: list[str]) -> set[Path]:
    """Folders that existed before this run: the given run dirs and their parents, and runs/ and its subfolders."""
    cwd = Path.cwd()
    existed = {p.resolve() for p in (cwd / "runs", *(cwd / "runs").glob("*")) if p.is_dir()}
    for path in _given_dirs(argv).values():
        p = (cwd / path).resolve()
        existed |= {q for q in (p, *p.parents) if q.is_dir()}
    return existed


def discard_unstarted(run_dir: Path) -> None:
    """Remove the folder Hydra made for a run that failed before it started: only when it did not exist before this
    run and holds nothing but Hydra's bookkeeping (.hydra/, *.log); then its parents this run made, now empty."""
    run_dir = Path(run_dir).resolve()
    existed: set[Path] = _STATE["existed"]
    cwd = Path.cwd().resolve()
    if run_dir in existed or run_dir == cwd or cwd.is_relative_to(run_dir) or not run_dir.is_dir():
        return
    entries = list(run_dir.iterdir())
    if any(e.name not in _HYDRA_BOOKKEEPING and not (e.is_file() and e.suffix == ".log") for e in entries):
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    parent = run_dir.parent
    while parent != cwd and parent not in existed and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


def discard_rank_dir(run_dir: Path) -> None:
    """Under a launcher, a rank other than 0 writes no results: remove the folder Hydra made for it, unless the
    folder was given on the command line (then rank 0 shares it)."""
    given = {(Path.cwd() / p).resolve() for p in _given_dirs(sys.argv[1:]).values()}
    if Path(run_dir).resolve() not in given:
        discard_unstarted(run_dir)


def run_dir_of_hydra() -> Path:
    """The current Hydra job's output folder."""
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def prepare(cfg: Any, *checks: Callable[[Any], None]) -> tuple[Any, Path]:
    """In a `@hydra.main` task: `entry_config(cfg, *checks)` and the run dir. Should the run then fail (here or
    later) with nothing written in its folder, `run_entry` removes the folder Hydra made for it: a run that fails
    before it starts writes no directory."""
    run_dir = run_dir_of_hydra()
    _STATE["run_dir"] = run_dir
    return entry_config(cfg, *checks), run_dir


# ---- the entry -----------------------------------------------------------------------------------------------------

class _QuietHydraStderr:
    """sys.stderr without the line Hydra writes before re-raising a job's error ("Error executing job with
    overrides: [...]"): the error's own one line follows."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if text.startswith("Error executing job with overrides: "):
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _run(main: Callable[[], Any], argv: list[str]) -> None:
    """Call `main` with Hydra re-raising errors; remove the run dir of a run that failed with nothing written."""
    saved = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises instead of printing its own multi-line report
    _STATE["run_dir"] = None
    stderr, sys.stderr = sys.stderr, _QuietHydraStderr(sys.stderr)
    try:
        check_given_dirs(argv)
        _STATE["existed"] = _snapshot(argv)
        main()
    except BaseException:
        if _STATE["run_dir"] is not None:
            discard_unstarted(_STATE["run_dir"])
        raise
    finally:
        sys.stderr = stderr
        if saved is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved


def run_entry(main: Callable[[], Any], argv: list[str] | None = None) -> None:
    """Run a `@hydra.main` function as a command: user errors -> one stderr line, exit 2; Ctrl-C -> one line, exit
    130; other errors keep their traceback. With SWIFTSPEC_DEBUG=1 (or HYDRA_FULL_ERROR=1) every traceback shows."""
    argv = sys.argv[1:] if argv is None else argv
    debug = debug_on()
    try:
        check_overrides(argv)  # a removed field gets its own message (conf/retired.py), not "no such field"
        _run(main, argv)
    except KeyboardInterrupt:
        if debug:
            raise
        print("interrupted (Ctrl-C): every rank stopped", file=sys.stderr)
        sys.exit(INTERRUPTED_EXIT)
    except Exception as e:  # noqa: BLE001 - classified below; anything not a user error is re-raised
        line = error_line(e)
        if line is None or debug:
            raise
        print(f"error: {line}", file=sys.stderr, flush=True)
        sys.exit(USER_ERROR_EXIT if not str(line).startswith("rank ") else 1)
