"""Summarise an interleaved off / on A/B of bench_runtime runs (e.g. `scripts/gpu_prefill_ab.sh`'s ab.tar.gz).

Input: a folder of runtime results named ``r<round>_<label>.json`` (one bench_runtime JSON per round and variant).
Per variant and mode: each round's tokens/s, iteration time, mean accepted length and the time per request outside
the decode iterations, ``(wall - generated / accept x iteration) / requests`` (the prefills and anything else the
loop does not time as an iteration); then the medians over rounds and the ratio on / off of the medians.

    python bench/ab_rounds.py DIR --off r_pgfalse --on r_pgtrue --name prefill_graph_ab [--out bench/results]

``--off`` / ``--on`` are the labels (the file name after ``r<round>_``). Writes
``<name>_<date>_<sha7>.json`` (the runs' SHA and date) atomically and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from conf.rundir import atomic_write_json  # noqa: E402

ROUND_FILE = re.compile(r"^r(\d+)_(.+)\.json$")


def load_rounds(folder: Path) -> dict[str, dict[int, dict]]:
    """label -> round -> the runtime JSON, from ``r<round>_<label>.json`` files."""
    if not folder.is_dir():
        raise ValueError(f"{folder}: expected a folder of r<round>_<label>.json runtime results")
    out: dict[str, dict[int, dict]] = {}
    for path in sorted(folder.iterdir()):
        m = ROUND_FILE.match(path.name)
        if not m:
            continue
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON ({e})") from None
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise ValueError(f"{path}: expected a bench_runtime result with a 'rows' list")
        out.setdefault(m.group(2), {})[int(m.group(1))] = data
    if not out:
        raise ValueError(f"{folder}: no r<round>_<label>.json files")
    return out


def round_row(data: dict, mode: str, where: str) -> dict | None:
    """One round's figures for `mode` (our runtime's row), or None if the run has no such row."""
    rows = [r for r in data["rows"] if r.get("system", "swiftspec") == "swiftspec" and r.get("mode") == mode]
    if not rows:
        return None
    row = rows[0]
    need = ("tokens_per_s", "iteration_time_s", "mean_accept_len", "generated_tokens", "wall_s")
    missing = [k for k in need if not isinstance(row.get(k), (int, float))]
    if missing:
        raise ValueError(f"{where}: mode {mode!r} lacks numeric {missing}")
    requests = len(data.get("prompt_tokens") or []) or 1
    decode_s = row["generated_tokens"] / row["mean_accept_len"] * row["iteration_time_s"]
    return {"tokens_per_s": row["tokens_per_s"], "iteration_time_s": row["iteration_time_s"],
            "mean_accept_len": row["mean_accept_len"],
            "non_decode_per_request_s": (row["wall_s"] - decode_s) / requests}


def summarise(runs: dict[str, dict[int, dict]], off: str, on: str) -> dict:
    """Per mode: both variants' rounds and the medians over rounds (on / off ratio of tokens/s)."""
    for label in (off, on):
        if label not in runs:
            raise ValueError(f"label {label!r}: no r<round>_{label}.json files (labels found: {sorted(runs)})")
    modes = [r["mode"] for r in next(iter(runs[off].values()))["rows"] if r.get("system", "swiftspec") == "swiftspec"]
    summary, rounds = {}, {}
    for mode in modes:
        per = {}
        for side, label in (("off", off), ("on", on)):
            per[side] = [dict(round=f"r{n}_{label}", **fig) for n, data in sorted(runs[label].items())
                         if (fig := round_row(data, mode, f"r{n}_{label}.json")) is not None]
        if not per["off"] or not per["on"]:
            continue
        rounds[mode] = per
        med = {side: {k: statistics.median(r[k] for r in per[side]) for k in
                      ("tokens_per_s", "iteration_time_s", "non_decode_per_request_s", "mean_accept_len")}
               for side in per}
        summary[mode] = {**{f"{k}_{side}": med[side][k] for side in ("off", "on") for k in med[side]},
                         "ratio_on_off": med["on"]["tokens_per_s"] / med["off"]["tokens_per_s"]}
    return {"summary": summary, "rounds": rounds}


def table(summary: dict) -> str:
    lines = ["| mode | off tok/s | on tok/s | on / off | iteration off / on (ms) | outside decode off / on (ms) |",
             "|---|---|---|---|---|---|"]
    for mode, s in summary.items():
        lines.append(f"| {mode} | {s['tokens_per_s_off']:,.1f} | {s['tokens_per_s_on']:,.1f} | "
                     f"{s['ratio_on_off']:.3f} | {s['iteration_time_s_off'] * 1e3:.3f} / "
                     f"{s['iteration_time_s_on'] * 1e3:.3f} | {s['non_decode_per_request_s_off'] * 1e3:.1f} / "
                     f"{s['non_decode_per_request_s_on'] * 1e3:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--off", required=True, help="the baseline's label (file name after r<round>_)")
    ap.add_argument("--on", required=True, help="the variant's label")
    ap.add_argument("--name", required=True, help="results file prefix, e.g. prefill_graph_ab")
    ap.add_argument("--command", default="", help="the device command that made the runs (recorded)")
    ap.add_argument("--out", default="bench/results", help="folder of the summary JSON ('' = none)")
    args = ap.parse_args(argv)
    try:
        runs = load_rounds(args.folder)
        result = summarise(runs, args.off, args.on)
    except ValueError as e:
        raise SystemExit(f"ab_rounds: {e}") from None
    first = next(iter(runs[args.on].values()))
    sha, date = str(first.get("git_sha", "unknown")), str(first.get("date", "unknown"))
    record = {"benchmark": args.name, "git_sha": sha, "device": first.get("device"), "date": date,
              "command": args.command, "labels": {"off": args.off, "on": args.on},
              "method": f"medians over {len(runs[args.on])} interleaved rounds of each round's median tokens/s; "
                        "outside decode per request = (wall - tokens / accept x iteration) / requests",
              **result, "results": {f"r{n}_{label}": data for label in (args.off, args.on)
                                    for n, data in sorted(runs[label].items())}}
    print(table(result["summary"]))
    if args.out:
        path = Path(args.out) / f"{args.name}_{date[:10]}_{sha[:7]}.json"
        atomic_write_json(path, record)
        print(f"results: {path}")
    return record


if __name__ == "__main__":
    main()
