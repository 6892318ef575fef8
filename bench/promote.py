"""Promote a measured result into data/measured/, the curated results that figures, tests and validation read.

    python -m bench.promote runs/bench/runtime_shape_realistic_2026-12-04_abc1234.json \
        --what "workload a, six modes, 2 x H200" --command "python bench/bench_runtime.py preset=shape_realistic"
    python -m bench.promote runs/validate/runtime --to runtime_runs_2026-12-04_abc1234 --what "..." --command "..."
    python -m bench.promote --check                  # every file listed in MANIFEST.json, every listed file there

Benchmarks, probes and entry points write under runs/ (ignored by git). A result that a figure, a test, a
validation or a doc needs is copied here by this one command, which also writes its MANIFEST.json entry:
path (relative to data/measured/), what, device, date, commit, the command that made it, where it came from,
and its files. Device, date and commit are read from the result where it records them (a results JSON's
`device` / `date` / `git_sha`, a run dir's config.json `meta`, a trace's `<stem>.meta.json`); the flags override
them, and a value found nowhere is an error naming the flag.

What is copied: a file (with its `<stem>.meta.json` beside it, if any), or a folder (a run dir or a folder of
run dirs) without its Chrome traces (`chrome_trace.json`: the traces.jsonl beside it holds the same spans),
hidden entries (`.hydra/`, temporary files), empty files and what `--exclude` names (globs on the paths inside
the folder, e.g. the traces of repeats that nothing reads). Files are written 0644. The copy is made in a
temporary folder and renamed into place, then the manifest is replaced atomically; if the manifest cannot be
written the copy is removed again.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from conf.rundir import FILE_MODE, MEASURED_DIR, atomic_write_json  # noqa: E402
from conf.trace import CHROME_FILE  # noqa: E402

MANIFEST = "MANIFEST.json"
ENTRY_KEYS = ("path", "kind", "what", "device", "date", "commit", "command", "source", "files")
ABOUT = ("Curated measured results read by figures (make figures), tests, validation (calibration/validate.py compare) "
         "and docs. One entry per result: its path under data/measured/, what it is, the device, date and commit "
         "it was measured on, the command that made it, where it was copied from, and its files. Add to it only "
         "with `python -m bench.promote` (which writes this file); raw runs stay under runs/ (ignored by git). "
         "Results cited as bench/results/... that are not here are in git history (commit 5ced2b87).")


class PromoteError(ValueError):
    """A result that cannot be promoted as asked; the message names the path or the flag."""


def load_manifest(measured: Path) -> dict[str, Any]:
    """MANIFEST.json of `measured` ({"about", "entries": []} when there is none yet)."""
    path = measured / MANIFEST
    if not path.is_file():
        return {"about": ABOUT, "entries": []}
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PromoteError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise PromoteError(f'{path}: expected an object with an "entries" list')
    return doc


def check_manifest(measured: Path = MEASURED_DIR) -> list[str]:
    """Problems of `measured`'s manifest: files under it that no entry lists, listed files that are missing,
    entries without a field of ENTRY_KEYS. Empty: the manifest and the folder agree."""
    doc = load_manifest(measured)
    problems, listed = [], set()
    for i, entry in enumerate(doc["entries"]):
        missing = [k for k in ENTRY_KEYS if not entry.get(k)]
        if missing:
            problems.append(f"{MANIFEST} entry {i} ({entry.get('path')}): no {', '.join(missing)}")
            continue
        for rel in entry_files(entry):
            listed.add(rel)
            if not (measured / rel).is_file():
                problems.append(f"{MANIFEST} entry {entry['path']}: listed file {rel} does not exist")
    present = {p.relative_to(measured).as_posix() for p in measured.rglob("*") if p.is_file()} - {MANIFEST}
    problems += [f"{rel}: under {measured} but in no {MANIFEST} entry" for rel in sorted(present - listed)]
    return problems


def _kept(rel: Path, full: Path) -> bool:
    return (full.is_file() and rel.name != CHROME_FILE and full.stat().st_size > 0
            and not any(part.startswith(".") for part in rel.parts))


def files_of(src: Path, exclude: Sequence[str] = ()) -> list[str]:
    """What promoting `src` copies: for a file its name and its `<stem>.meta.json` beside it (if any); for a
    folder its kept files (see the module doc) that match no `exclude` glob, relative to it."""
    if src.is_file():
        meta = src.with_suffix(".meta.json")
        return [src.name] + ([meta.name] if src.suffix == ".jsonl" and meta.is_file() else [])
    return sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if _kept(p.relative_to(src), p)
                  and not any(fnmatch.fnmatchcase(p.relative_to(src).as_posix(), g) for g in exclude))


def entry_files(entry: dict[str, Any]) -> list[str]:
    """An entry's files as paths relative to data/measured/ (a file entry's files lie beside it)."""
    base = Path(entry["path"])
    folder = base.parent if entry.get("kind") == "file" else base
    return [(folder / name).as_posix() for name in entry["files"]]


def _meta_of(src: Path) -> dict[str, Any]:
    """The provenance a result records: a JSON's top level, a trace's meta file, a run dir's (or its first run
    dir's) config.json `meta`."""
    candidates: list[Path] = []
    if src.is_file():
        candidates = [src.with_suffix(".meta.json"), src] if src.suffix == ".jsonl" else [src]
    else:
        candidates = [src / "config.json", *sorted(src.glob("*/config.json"))]
    for path in candidates:
        if not path.is_file() or path.suffix != ".json":
            continue
        try:
            doc = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(doc, dict):
            meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else doc
            return {"device": meta.get("device") or meta.get("gpu"), "date": meta.get("date"),
                    "commit": meta.get("git_sha") or meta.get("commit"), "command": meta.get("command")}
    return {}


def _inside(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip("/") + "/")


def promote(src: Path, *, what: str, command: str | None = None, to: str | None = None, device: str | None = None,
            date: str | None = None, commit: str | None = None, source: str | None = None, replace: bool = False,
            exclude: Sequence[str] = (), measured: Path = MEASURED_DIR) -> dict[str, Any]:
    """Copy `src` to `measured`/`to` (default: its name) and add or replace its manifest entry; returns the entry."""
    src = Path(src)
    if not src.exists():
        raise PromoteError(f"{src}: no such file or folder")
    rel = Path(to or src.name).as_posix().strip("/")
    if not rel or rel.startswith(".") or ".." in Path(rel).parts or rel == MANIFEST:
        raise PromoteError(f"--to: {rel!r} is not a path inside {measured}")
    recorded = _meta_of(src)
    values = {"device": device or recorded.get("device"), "date": date or recorded.get("date"),
              "commit": commit or recorded.get("commit"), "command": command or recorded.get("command")}
    missing = [k for k, v in values.items() if not v]
    if missing:
        raise PromoteError(f"{src}: records no {', '.join(missing)}; pass "
                           + " ".join(f"--{k}" for k in missing))
    if not what.strip():
        raise PromoteError("--what: say what the result is")
    files = files_of(src, exclude)
    if not files:
        raise PromoteError(f"{src}: nothing to copy (only Chrome traces, hidden or empty files)")
    kind = "file" if src.is_file() else "folder"
    entry = {"path": rel, "kind": kind, "what": what.strip(), "device": values["device"],
             "date": str(values["date"])[:10], "commit": values["commit"], "command": values["command"],
             "source": source or str(src), "files": files if kind == "folder" else [Path(rel).name, *files[1:]]}
    doc = load_manifest(measured)
    entries = doc["entries"]
    mine = set(entry_files(entry))
    clash = [e["path"] for e in entries if e["path"] != rel and (
        _inside(rel, e["path"]) or _inside(e["path"], rel) or mine & set(entry_files(e)))]
    if clash:
        raise PromoteError(f"--to {rel}: overlaps the manifest entries {clash}")
    dest = measured / rel
    if (any(e["path"] == rel for e in entries) or dest.exists()) and not replace:
        raise PromoteError(f"{dest} exists (pass --replace to replace it and its manifest entry)")

    measured.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=measured, prefix=".promote-"))
    aside = stage / "old"
    try:
        # (source file, staged file, final path) for every file; a folder moves into place as one rename
        if kind == "file":
            finals = [dest] + [dest.with_name(name) for name in files[1:]]
            plan = [(src.with_name(name), stage / "new" / final.name, final) for name, final in zip(files, finals)]
            moves = [(staged, final) for _, staged, final in plan]
        else:
            plan = [(src / name, stage / "new" / name, dest / name) for name in files]
            moves = [(stage / "new", dest)]
        for source_file, staged, _ in plan:
            staged.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source_file, staged)
            os.chmod(staged, FILE_MODE)
        dest.parent.mkdir(parents=True, exist_ok=True)
        aside.mkdir()
        for i, (_, final) in enumerate(moves):
            if final.exists() or final.is_symlink():
                os.replace(final, aside / str(i))
        for staged, final in moves:
            os.replace(staged, final)
        doc["entries"] = sorted([e for e in entries if e["path"] != rel] + [entry], key=lambda e: e["path"])
        doc["about"] = doc.get("about") or ABOUT
        try:
            atomic_write_json(measured / MANIFEST, doc)
        except BaseException:
            for i, (_, final) in enumerate(moves):  # the manifest is unchanged: put back what was there
                shutil.rmtree(final) if final.is_dir() else final.unlink(missing_ok=True)
                if (aside / str(i)).exists():
                    os.replace(aside / str(i), final)
            raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return entry


def main(argv: list[str] | None = None) -> int:
    """CLI: promote one result, or --check the manifest."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", nargs="?", type=Path, help="result file or folder (run dir, folder of run dirs)")
    ap.add_argument("--what", default="", help="what the result is (required to promote)")
    ap.add_argument("--command", default=None, help="the command that made it (default: the one it records)")
    ap.add_argument("--to", default=None, help="path under data/measured/ (default: the source's name)")
    ap.add_argument("--device", default=None, help="device (default: the one it records)")
    ap.add_argument("--date", default=None, help="date (default: the one it records)")
    ap.add_argument("--commit", default=None, help="git commit (default: the one it records)")
    ap.add_argument("--source", default=None, help="where it came from (default: SRC)")
    ap.add_argument("--replace", action="store_true", help="replace an existing entry of the same path")
    ap.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                    help="leave out a folder's files matching GLOB (relative to it; repeatable)")
    ap.add_argument("--measured", type=Path, default=MEASURED_DIR, help=argparse.SUPPRESS)
    ap.add_argument("--check", action="store_true", help="check MANIFEST.json against the files; promote nothing")
    args = ap.parse_args(argv)
    if args.check:
        problems = check_manifest(args.measured)
        print("\n".join(problems) or f"{args.measured / MANIFEST}: every file listed, every listed file present")
        return 1 if problems else 0
    if args.src is None:
        ap.error("SRC is required (or --check)")
    try:
        entry = promote(args.src, what=args.what, command=args.command, to=args.to, device=args.device,
                        date=args.date, commit=args.commit, source=args.source, replace=args.replace,
                        exclude=args.exclude, measured=args.measured)
    except PromoteError as e:
        print(f"promote: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: entry[k] for k in ENTRY_KEYS if k != "files"} | {"files": len(entry["files"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
