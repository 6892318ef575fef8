"""The trace schema: one record per operator or step invocation, shared by runtime, kernel benchmarks,
profiler, simulator and calibration. A contract test keeps writers and readers in sync.

Files: JSON Lines (`traces.jsonl`), one `TraceRecord` per line. Times are seconds. `shapes` is a compact
string such as "8x4096,4096x14336" (the operator's input shapes). `start_s` is relative to the run start.
The Chrome-trace export (`to_chrome_trace`) puts one process per device and one thread per group.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

TRACE_FILE = "traces.jsonl"
CHROME_FILE = "chrome_trace.json"


@dataclass(frozen=True)
class TraceRecord:
    """One timed invocation of an operator (`op.*`) or a decoding step (`step.*`)."""

    name: str
    """Operator or step name, e.g. op.gemm, op.tree_attention, op.allreduce, step.verify, step.expand."""
    shapes: str
    """Input shapes, "AxB,CxD"; empty for steps."""
    tp: int
    """TP degree of the group that ran it."""
    ctx: int
    """Context (prefix) length in tokens the operator attended over; 0 where it does not apply."""
    device: str
    """Device description, e.g. "NVIDIA H200" or "cpu" or "sim:h200"."""
    start_s: float
    duration_s: float
    run_id: str
    group: str = ""
    """target | draft | link | '' ."""
    rank: int = 0
    iteration: int = -1
    tokens: int = 0
    """Tokens in the step (M of the GEMMs, queries of attention)."""
    extra: str = ""
    """Free-form JSON object text (e.g. bytes moved, tree size)."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("TraceRecord.name: must be non-empty")
        if self.duration_s < 0:
            raise ValueError(f"TraceRecord.duration_s: must be >= 0, got {self.duration_s}")
        if self.tp < 1:
            raise ValueError(f"TraceRecord.tp: must be >= 1, got {self.tp}")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict, the on-disk form."""
        return asdict(self)

    def extra_fields(self, where: str = "trace record") -> dict[str, Any]:
        """`extra` parsed: a JSON object ({} when empty); anything else is an error naming `where`."""
        if not self.extra:
            return {}
        try:
            out = json.loads(self.extra)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: extra is not a JSON object ({e})") from e
        if not isinstance(out, dict):
            raise ValueError(f"{where}: extra must be a JSON object, got {type(out).__name__}")
        return out

    @staticmethod
    def from_dict(d: dict[str, Any], where: str = "trace record") -> TraceRecord:
        """Parse and type-check one record; errors name the missing or unknown field."""
        names = {f.name for f in fields(TraceRecord)}
        required = {f.name for f in fields(TraceRecord) if f.default is f.default_factory}  # no default
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"{where}: unknown fields {sorted(unknown)}; allowed: {sorted(names)}")
        missing = required - set(d)
        if missing:
            raise ValueError(f"{where}: missing fields {sorted(missing)}")
        casts = {"name": str, "shapes": str, "tp": int, "ctx": int, "device": str, "start_s": float,
                 "duration_s": float, "run_id": str, "group": str, "rank": int, "iteration": int,
                 "tokens": int, "extra": str}
        try:
            return TraceRecord(**{k: casts[k](v) for k, v in d.items()})
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: {e}") from e


def shapes_str(*shapes: Iterable[int]) -> str:
    """Format shapes as "AxB,CxD"."""
    return ",".join("x".join(str(int(s)) for s in shape) for shape in shapes)


def write_traces(path: str | Path, records: Iterable[TraceRecord]) -> None:
    """Write records as JSON Lines, atomically."""
    from conf.rundir import atomic_write_text

    atomic_write_text(Path(path), "".join(json.dumps(r.to_dict()) + "\n" for r in records))


def read_traces(path: str | Path) -> list[TraceRecord]:
    """Read a JSON Lines trace; errors name the file and line."""
    out = []
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"trace file {p} does not exist")
    for i, line in enumerate(p.read_text().splitlines(), start=1):
        if line.strip():
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{i}: not JSON ({e})") from e
            out.append(TraceRecord.from_dict(d, where=f"{p}:{i}"))
    return out


def span_medians(records: Iterable[TraceRecord], keys: Iterable[str], where: str) -> dict[str, Any]:
    """Medians of spans, in ms: `n` records, `span_ms` (None without records), and `<key minus _s>_ms` for each
    extra field in `keys` (seconds; None where no record carries it). `where` names the records in errors. The
    device scripts' summaries (scripts/gpu_verify_gap.sh, scripts/gpu_colocated_ab.sh) read their spans this way."""
    import statistics

    recs = list(records)
    extras = [r.extra_fields(where) for r in recs]
    row: dict[str, Any] = {"n": len(recs),
                           "span_ms": statistics.median(r.duration_s for r in recs) * 1e3 if recs else None}
    for key in keys:
        vals = [x[key] for x in extras if x.get(key) is not None]
        row[key.removesuffix("_s") + "_ms"] = statistics.median(vals) * 1e3 if vals else None
    return row


def to_chrome_trace(records: Iterable[TraceRecord]) -> dict[str, Any]:
    """Chrome trace-event JSON (complete events, microseconds): pid = group, tid = rank."""
    events = []
    for r in records:
        events.append({
            "name": r.name, "ph": "X", "ts": r.start_s * 1e6, "dur": r.duration_s * 1e6,
            "pid": r.group or r.device, "tid": r.rank,
            "args": {"shapes": r.shapes, "tp": r.tp, "ctx": r.ctx, "iteration": r.iteration,
                     "tokens": r.tokens, "run_id": r.run_id},
        })
    return {"traceEvents": events, "displayTimeUnit": "ms"}
