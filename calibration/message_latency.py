"""Leader-message delivery inside runtime runs, from run dirs' traces.jsonl: how long after one leader's send span
ends does the other leader's receive span end, when that receiver was already waiting?

The leader channel's own ping-pong measures the transport alone: 16.5 us round trip on the
H200 host over the Unix socket. In a decoding run the same hop also holds what each loop does between taking the
bytes and closing its span, and the receiver's wake-up: this tool reads it off the spans (both leaders share one
host clock and, in runs that record it, one time origin: runtime/metrics.py; older runs'
leaders are offset by their start barrier's exit skew, so only the mean of the two directions is exact there), per
direction, split by how long the receiver had been waiting (a short wait spins, a long one may sleep in poll:
runtime/unix_channel.py).

    python -m calibration.message_latency RUN_DIR [RUN_DIR ...] [--short-wait-ms 0.8] [--json OUT]
        -> one line per run: median delivery in ms (count) per direction and wait class; where the receive spans
           carry the unix channel's arrival mark (runs since the twelfth session), also the hop (send end -> bytes
           out of the socket), the receiver's work after it, and how many receives slept in poll
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from conf.rundir import atomic_write_json, git_sha, read_run  # noqa: E402
from conf.trace import TRACE_FILE, TraceRecord, read_traces  # noqa: E402
from simulator.runtime_fit import leader_spans  # noqa: E402

SKIP_ITERATIONS = 10
"""Iterations left out at the start (prefill, first trees, the depth tuner's trials)."""
DIRECTIONS = (("draft", "target"), ("target", "draft"))


def deliveries(sends: list[TraceRecord], recvs: list[TraceRecord]) -> list[tuple[float, float, TraceRecord]]:
    """(receiver's wait before the send ended, delivery: send end -> receive end, the receive span) for each send
    whose next receive started before the send ended (the receiver was waiting), in seconds."""
    out, j = [], 0
    for s in sends:
        end = s.start_s + s.duration_s
        while j < len(recvs) and recvs[j].start_s + recvs[j].duration_s < end:
            j += 1
        if j == len(recvs):
            break
        r = recvs[j]
        if r.start_s < end:
            out.append((end - r.start_s, r.start_s + r.duration_s - end, r))
    return out


def receive_parts(delivery: float, recv: TraceRecord, where: str) -> dict[str, Any] | None:
    """One delivery's parts from its receive span's unix-channel marks, in seconds: `hop` (send end -> bytes out of
    the socket), `after` (the receiver's own work from there to its span's end), `decode` (of `after`: unpack +
    decode; None in runs before `decoded_s`) and `slept`; None when the span has no arrival mark (`where` names the
    span in errors)."""
    x = recv.extra_fields(where)
    if "arrive_s" not in x:
        return None
    after = recv.duration_s - x["arrive_s"]
    decode = x["decoded_s"] - x["arrive_s"] if "decoded_s" in x else None
    return {"hop": delivery - after, "after": after, "decode": decode, "slept": bool(x.get("slept"))}


def _median_ms(values: list[float]) -> float | None:
    return statistics.median(values) * 1e3 if values else None


def message_latency(run_dir: Path, short_wait_s: float = 0.8e-3) -> dict[str, Any]:
    """{"<sender>-><receiver>": {"short_wait": {...}, "long_wait": {...}}} for one run dir; each class holds the
    median delivery ("median_ms") and its count ("n"), and, where the receive spans carry the unix channel's
    arrival mark, the median hop (send end -> bytes out of the socket, "hop_ms"), the receiver's work after
    that ("after_ms"; of it, unpacking and decoding: "decode_ms", in runs that mark it) and the share of receives
    that slept in poll ("slept")."""
    path = run_dir / TRACE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no {TRACE_FILE} (expected a runtime run dir)")
    spans = leader_spans(read_traces(path), SKIP_ITERATIONS)
    out: dict[str, Any] = {"run": run_dir.name}
    for sender, receiver in DIRECTIONS:
        pairs = deliveries(spans.get((sender, "comm.send"), []), spans.get((receiver, "comm.recv"), []))
        classes: dict[str, list[tuple[float, dict[str, Any] | None]]] = {"short_wait": [], "long_wait": []}
        for wait, delivery, recv in pairs:
            classes["short_wait" if wait < short_wait_s else "long_wait"].append(
                (delivery, receive_parts(delivery, recv, f"{path}: {receiver} comm.recv")))
        res: dict[str, Any] = {}
        for cls, rows in classes.items():
            cell: dict[str, Any] = {"median_ms": _median_ms([d for d, _ in rows]), "n": len(rows)}
            marked = [parts for _, parts in rows if parts is not None]
            if marked:
                cell.update(hop_ms=_median_ms([m["hop"] for m in marked]),
                            after_ms=_median_ms([m["after"] for m in marked]),
                            slept=sum(m["slept"] for m in marked) / len(marked))
            decoded = [m["decode"] for m in marked if m["decode"] is not None]
            if decoded:  # unpack + decode, part of after_ms
                cell["decode_ms"] = _median_ms(decoded)
            res[cls] = cell
        out[f"{sender}->{receiver}"] = res
    return out


def _run_meta(run_dir: Path) -> dict[str, Any]:
    """The run's config.json meta block (git SHA, device), {} if unreadable."""
    try:
        return read_run(run_dir).get("meta", {})
    except (FileNotFoundError, ValueError):
        return {}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="runtime run dirs (two leaders: a draft group)")
    ap.add_argument("--short-wait-ms", type=float, default=0.8, help="waits below this count as short")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)
    if args.short_wait_ms <= 0:
        raise SystemExit(f"--short-wait-ms: expected > 0, got {args.short_wait_ms}")
    results = []
    for run in args.runs:
        res = message_latency(run, args.short_wait_ms * 1e-3)
        results.append(res)
        cells = []
        for sender, receiver in DIRECTIONS:
            for cls, v in res[f"{sender}->{receiver}"].items():
                ms = f"{v['median_ms']:.3f}" if v["median_ms"] is not None else "-"
                split = (f" = hop {v['hop_ms']:.3f} + after {v['after_ms']:.3f}"
                         + (f" (decode {v['decode_ms']:.3f})" if "decode_ms" in v else "")
                         + f", slept {v['slept']:.0%}" if "hop_ms" in v else "")
                cells.append(f"{sender}->{receiver} {cls} {ms}{split} ({v['n']})")
        print(f"{run.name:<30} " + " | ".join(cells))
    if args.json:
        measured = sorted({str(_run_meta(run).get("git_sha", "?")) for run in args.runs})
        devices = sorted({str(_run_meta(run).get("device", "?")) for run in args.runs})
        atomic_write_json(args.json, {"benchmark": "message_latency", "git_sha": git_sha(),
                                      "date": datetime.date.today().isoformat(), "runs_git_sha": measured,
                                      "device": devices, "run_dirs": [str(r) for r in args.runs],
                                      "config": {"short_wait_ms": args.short_wait_ms,
                                                 "skip_iterations": SKIP_ITERATIONS},
                                      "runs": results})
    return results


if __name__ == "__main__":
    main()
