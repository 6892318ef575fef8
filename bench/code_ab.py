"""Summarise an interleaved A/B of two source trees (`scripts/gpu.sh ab`): medians per side and their ratio.

    python bench/code_ab.py WORK --out OUT [--source a=DESC --source b=DESC] [--command TEXT]

WORK holds, per side (a, b) and round r, what `scripts/gpu.sh ab` ran in that tree:
  <side>_r<r>_steps.json     bench/step_replay.py's record (the step replays, one row per case)
  <side>_r<r>_runtime.json   bench/bench_runtime.py's results (workload a with the draft colocated: one row per mode)
A missing or unreadable file is a failed run: it is listed under `missing` and the rest is summarised.

Per step case and side: every round's replay median, their median, and b / a. Per mode and side: every measured
repeat's tokens/s (`tokens_per_s_repeats`) of every round, their median, b / a of the medians, and the median of the
paired ratios (round r repeat k of b over the same of a: the same oracle seed on both sides); iteration and verify
time the medians of the rounds' medians. Writes OUT/ab.json and prints the table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from conf.rundir import atomic_write_json  # noqa: E402

SIDES = ("a", "b")
_FILE = re.compile(r"^(?P<side>[ab])_r(?P<round>\d+)_(?P<kind>steps|runtime)\.json$")
OURS = "swiftspec"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _ratio(b: float | None, a: float | None) -> float | None:
    return b / a if a and b is not None else None


def read_work(work: Path) -> tuple[dict, list[str]]:
    """{(side, kind): {round: record}} of WORK's files, and the files that did not parse."""
    found: dict[tuple[str, str], dict[int, Any]] = {}
    bad = []
    for path in sorted(work.iterdir()):
        m = _FILE.match(path.name)
        if not m:
            continue
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            bad.append(f"{path.name}: {type(e).__name__}: {e}")
            continue
        found.setdefault((m["side"], m["kind"]), {})[int(m["round"])] = record
    return found, bad


def summarise_steps(found: dict) -> dict:
    """{case: {a: {rounds, median_s}, b: {...}, b_over_a}} over the step_replay records."""
    out: dict[str, dict] = {}
    for side in SIDES:
        for rnd, rec in sorted(found.get((side, "steps"), {}).items()):
            for row in rec.get("results", []):
                case = f"{row['preset']} {row['role']} rows {row['rows']}"
                cell = out.setdefault(case, {}).setdefault(side, {"rounds": {}, "floor_s": row.get("floor_s")})
                cell["rounds"][f"r{rnd}"] = row["replay_s"]
    for cell in out.values():
        for side in SIDES:
            if side in cell:
                cell[side]["median_s"] = _median(list(cell[side]["rounds"].values()))
        cell["b_over_a"] = _ratio(cell.get("b", {}).get("median_s"), cell.get("a", {}).get("median_s"))
    return out


def summarise_runtime(found: dict) -> dict:
    """{mode: {a: {...}, b: {...}, b_over_a, paired_b_over_a}} over our rows of the bench_runtime results."""
    out: dict[str, dict] = {}
    for side in SIDES:
        for rnd, rec in sorted(found.get((side, "runtime"), {}).items()):
            for row in rec.get("rows", []):
                if row.get("system") != OURS or row.get("status") != "ok":
                    continue
                cell = out.setdefault(row["mode"], {}).setdefault(
                    side, {"tokens_per_s": {}, "iteration_s": [], "verify_s": [], "accept_len": []})
                cell["tokens_per_s"][f"r{rnd}"] = row.get("tokens_per_s_repeats") or [row["tokens_per_s"]]
                for key, field in (("iteration_s", "iteration_time_s"), ("verify_s", "verify_time_s"),
                                   ("accept_len", "mean_accept_len")):
                    if row.get(field) is not None:
                        cell[key].append(row[field])
    for cell in out.values():
        for side in SIDES:
            if side not in cell:
                continue
            c = cell[side]
            c["median_tokens_per_s"] = _median([v for vs in c["tokens_per_s"].values() for v in vs])
            for key in ("iteration_s", "verify_s", "accept_len"):
                c[key] = _median(c[key])
        a, b = cell.get("a"), cell.get("b")
        cell["b_over_a"] = _ratio(b and b["median_tokens_per_s"], a and a["median_tokens_per_s"])
        pairs = [vb / va for rnd, vbs in (b or {}).get("tokens_per_s", {}).items()
                 for va, vb in zip((a or {}).get("tokens_per_s", {}).get(rnd, []), vbs) if va]
        cell["paired_b_over_a"] = _median(pairs)
    return out


def table(steps: dict, runtime: dict) -> str:
    """Markdown: the step replays (ms), then workload a's tokens/s, a and b medians and b / a."""
    f = lambda x, fmt: "-" if x is None else format(x, fmt)  # noqa: E731
    lines = ["| step replay | a (ms) | b (ms) | b / a |", "|---|---|---|---|"]
    for case, c in steps.items():
        ms = [c.get(s, {}).get("median_s") for s in SIDES]
        lines.append(f"| {case} | {f(ms[0] and ms[0] * 1e3, '.3f')} | {f(ms[1] and ms[1] * 1e3, '.3f')} | "
                     f"{f(c['b_over_a'], '.4f')} |")
    lines += ["", "| workload a, colocated | a tok/s | b tok/s | b / a | paired b / a | a iteration (ms) | "
              "b iteration (ms) |", "|---|---|---|---|---|---|---|"]
    for mode, c in runtime.items():
        a, b = c.get("a", {}), c.get("b", {})
        it = [x.get("iteration_s") for x in (a, b)]
        lines.append(f"| {mode} | {f(a.get('median_tokens_per_s'), '.1f')} | {f(b.get('median_tokens_per_s'), '.1f')}"
                     f" | {f(c['b_over_a'], '.4f')} | {f(c['paired_b_over_a'], '.4f')} | "
                     f"{f(it[0] and it[0] * 1e3, '.3f')} | {f(it[1] and it[1] * 1e3, '.3f')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("work", type=Path, help="the folder of <side>_r<round>_{steps,runtime}.json files")
    p.add_argument("--out", type=Path, required=True, help="folder for ab.json")
    p.add_argument("--rounds", type=int, default=None, help="rounds run (lists the missing files)")
    p.add_argument("--source", action="append", default=[], metavar="SIDE=DESC",
                   help="what each side is (e.g. a=main@5ced2b87)")
    p.add_argument("--command", default="", help="the command line, for the record")
    a = p.parse_args(argv)
    if not a.work.is_dir():
        raise SystemExit(f"code_ab: {a.work} is not a folder")
    sources = {}
    for item in a.source:
        side, sep, desc = item.partition("=")
        if not sep or side not in SIDES:
            raise SystemExit(f"--source: {item!r} is not a=DESC or b=DESC")
        sources[side] = desc
    found, bad = read_work(a.work)
    missing = bad + [f"{s}_r{r}_{k}.json" for r in range(1, (a.rounds or 0) + 1) for s in SIDES
                     for k in ("steps", "runtime") if r not in found.get((s, k), {})]
    steps, runtime = summarise_steps(found), summarise_runtime(found)
    device = next((rec.get("device") for recs in found.values() for rec in recs.values() if rec.get("device")), None)
    record = {"benchmark": "code_ab", "date": datetime.date.today().isoformat(), "device": device,
              "sources": sources, "command": a.command, "order": "a_1 b_1 a_2 b_2 ...", "rounds": a.rounds,
              "step_replays": steps, "workload_a_colocated": runtime, "missing": missing}
    a.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(a.out / "ab.json", record)
    for side in SIDES:
        print(f"{side}: {sources.get(side, '?')}")
    if missing:
        print("missing: " + "; ".join(missing))
    print(table(steps, runtime))
    return record


if __name__ == "__main__":
    main()
