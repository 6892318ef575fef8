"""Calibration's input: operator trace files (JSON Lines of `conf.trace.TraceRecord`, written by
calibration/profile_ops.py) read into samples, each with the features its operator's functional form takes
(`simulator.profile.FEATURES`). `simulator.calibrate` fits them.

Records used (others, e.g. the runtime's `step.*` spans, are counted and ignored):

| record             | operator      | features (from `extra`, plus record fields)                              |
|--------------------|---------------|--------------------------------------------------------------------------|
| op.gemm            | gemm          | weight_bytes, flops                                                      |
|                    | gemm_fp8      | with `extra.weight_bits` 8: a skinny kernel streaming fp8 weights        |
| op.attention       | attention     | kv_bytes, tokens (record), kv_len                                        |
| op.allreduce       | allreduce     | bytes (per rank); fitted per TP degree too (`by_tp`); `mode` eager|graph |
| op.message         | message       | bytes on the wire (the runtime's leader channel, one way); with an       |
|                    | message_unix  | `extra.transport` naming the Unix socket channel: message_unix           |
| op.step_overhead   | step_overhead | kind verify|expand|forward: a whole runtime step of model `preset` (see   |
|                    |               | below); kind launch|graph_replay: diagnostics only                        |
| op.step_graph      | gemm_graph,   | a captured decode step profiled (profile_ops' step_graphs): per kernel   |
|                    | attention_graph, | class the exposed time in a replay (gemm_s, attention_s, other_s);    |
|                    | step_overhead(_graph) | preset, kind, kv_len, tokens (record): one row per step, summed  |
|                    |               | call features; the small kernels counted per role (GraphKernels)         |
| op.compaction      | (report only) | bytes: the profile format has no compaction operator yet                 |
| op.tree_op         | (report only) | kind select|reroot: host tree bookkeeping -> the profile's `tree_op_s`    |

Errors name the file and the line. No torch import.
"""

from __future__ import annotations

import glob
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conf.presets import model_preset
from conf.trace import TraceRecord
from simulator.profile import FEATURES, OPERATOR_FORMS

RECORD_OPERATORS = {"op.gemm": "gemm", "op.attention": "attention", "op.allreduce": "allreduce",
                    "op.message": "message", "op.step_overhead": "step_overhead"}
"""Trace record name -> profile operator."""
DIAGNOSTIC_RECORDS = ("op.compaction", "op.tree_op", "op.p2p")
"""Records that are summarised in the report but have no profile operator."""
STEP_KINDS = ("verify", "expand", "forward")
"""op.step_overhead kinds that are whole runtime steps (the others are launch micro-benchmarks)."""
REQUIRED_EXTRA = {
    "gemm": ("weight_bytes", "flops"),
    "gemm_fp8": ("weight_bytes", "flops"),
    "attention": ("kv_bytes", "kv_len"),
    "allreduce": ("bytes",),
    "message": ("bytes",),
    "message_unix": ("bytes",),
    "step_overhead": ("kind",),
    "step": ("preset", "kv_len", "backend"),
    "op.compaction": ("bytes",),
    "op.tree_op": ("kind",),
    "op.p2p": ("bytes",),
    "op.step_graph": ("kind", "preset", "kv_len", "backend", "gemm_s", "attention_s", "other_s"),
}
"""`extra` keys each kind of record must carry (step = an op.step_overhead record of a STEP_KIND)."""


class TraceFileError(ValueError):
    """A trace file calibrate cannot use; the message names the file and the line."""


@dataclass(frozen=True)
class Sample:
    """One timed invocation: its operator, features, measured seconds and where it came from."""

    op: str
    features: tuple[float, ...]
    seconds: float
    tp: int
    where: str
    extra: dict[str, Any] = field(default_factory=dict)
    tokens: int = 0


@dataclass
class TraceSet:
    """Everything calibrate read from the trace files."""

    samples: dict[str, list[Sample]] = field(default_factory=lambda: defaultdict(list))
    """Operator -> samples (step_overhead: whole steps, features = (1, num_kernels) filled in later)."""
    diagnostics: dict[str, list[Sample]] = field(default_factory=lambda: defaultdict(list))
    """Diagnostic record name (op.compaction, op.tree_op, op.p2p, launch kinds) -> samples."""
    graph_steps: list[Sample] = field(default_factory=list)
    """op.step_graph records: captured decode steps profiled per kernel class (features filled in by the fit)."""
    ignored: Counter = field(default_factory=Counter)
    """Record names that calibrate does not use, with counts."""
    files: list[str] = field(default_factory=list)
    devices: set[str] = field(default_factory=set)


def resolve_trace_paths(patterns: Sequence[str]) -> list[Path]:
    """Expand globs; a pattern that matches nothing (and is no file) is an error naming it."""
    out: list[Path] = []
    for pat in patterns:
        hits = sorted(glob.glob(pat)) if any(c in pat for c in "*?[") else [pat]
        if not hits or not all(Path(h).is_file() for h in hits):
            raise FileNotFoundError(f"traces: {pat!r} matches no trace file")
        out += [Path(h) for h in hits]
    if not out:
        raise ValueError("traces: no trace files given (traces=[path.jsonl, ...])")
    return out


def _number(extra: dict[str, Any], key: str, where: str) -> float:
    v = extra.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise TraceFileError(f"{where}: extra.{key}: needs a finite number >= 0, got {v!r}")
    return float(v)


def _require(extra: dict[str, Any], keys: Iterable[str], name: str, where: str) -> None:
    missing = [k for k in keys if k not in extra]
    if missing:
        raise TraceFileError(f"{where}: {name} record lacks extra fields {missing} (has {sorted(extra)})")


def _preset(extra: dict[str, Any], where: str) -> None:
    """A step record's extra.preset must name a model preset."""
    try:
        model_preset(str(extra["preset"]), f"{where}: extra.preset")
    except ValueError as e:
        raise TraceFileError(str(e)) from e


def _sample(rec: TraceRecord, extra: dict[str, Any], where: str) -> tuple[str, Sample] | None:
    """(operator or diagnostic key, sample) of one record; None for records calibrate ignores."""
    name = rec.name
    if name == "op.step_graph":
        _require(extra, REQUIRED_EXTRA[name], name, where)
        _preset(extra, where)
        for key in ("kv_len", "gemm_s", "attention_s", "other_s"):
            _number(extra, key, where)
        if rec.duration_s <= 0 or rec.tokens < 1:
            raise TraceFileError(f"{where}: op.step_graph needs duration_s > 0 and tokens >= 1, got "
                                 f"{rec.duration_s} and {rec.tokens}")
        return name, Sample(name, (), rec.duration_s, rec.tp, where, extra, rec.tokens)
    if name in DIAGNOSTIC_RECORDS:
        _require(extra, REQUIRED_EXTRA[name], name, where)
        feats = (1.0, _number(extra, "bytes", where)) if "bytes" in extra else (1.0,)
        return name, Sample(name, feats, rec.duration_s, rec.tp, where, extra, rec.tokens)
    op = RECORD_OPERATORS.get(name)
    if op is None:
        return None
    if op == "message" and "unix" in str(extra.get("transport", "")).lower():
        op = "message_unix"  # calibration/profile_comm.py: the same ping-pong over the Unix socket
    if op == "gemm" and "weight_bits" in extra:
        bits = _number(extra, "weight_bits", where)
        if bits not in (8, 16):
            raise TraceFileError(f"{where}: op.gemm extra.weight_bits must be 8 or 16, got {bits}")
        op = "gemm_fp8" if bits == 8 else op  # profile_ops' gemm_fp8 section
    _require(extra, REQUIRED_EXTRA[op], name, where)
    if op in ("gemm", "gemm_fp8"):
        feats = FEATURES[op](_number(extra, "weight_bytes", where), _number(extra, "flops", where))
    elif op == "attention":
        feats = FEATURES[op](_number(extra, "kv_bytes", where), rec.tokens, int(_number(extra, "kv_len", where)))
    elif op in ("allreduce", "message", "message_unix"):
        feats = FEATURES[op](_number(extra, "bytes", where))
    else:  # step_overhead
        kind = str(extra["kind"])
        if kind not in STEP_KINDS:
            return f"launch:{kind}", Sample(f"launch:{kind}", (1.0,), rec.duration_s, rec.tp, where, extra)
        _require(extra, REQUIRED_EXTRA["step"], name, where)
        _preset(extra, where)
        _number(extra, "kv_len", where)
        feats = (1.0, 0.0)  # num_kernels depends on the fused flag: filled in by step_samples()
    if rec.duration_s <= 0:
        raise TraceFileError(f"{where}: duration_s must be > 0 for a timed operator, got {rec.duration_s}")
    return op, Sample(op, tuple(float(f) for f in feats), rec.duration_s, rec.tp, where, extra, rec.tokens)


def read_trace_file(path: str | Path, into: TraceSet | None = None) -> TraceSet:
    """Parse one JSONL trace file into `into` (or a new TraceSet); errors name the file and line."""
    ts = into if into is not None else TraceSet()
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"traces: trace file {p} does not exist")
    ts.files.append(str(p))
    for i, line in enumerate(p.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{p}:{i}"
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise TraceFileError(f"{where}: not JSON ({e})") from e
        if not isinstance(d, dict):
            raise TraceFileError(f"{where}: a trace record must be a JSON object, got {type(d).__name__}")
        try:
            rec = TraceRecord.from_dict(d, where=where)
        except ValueError as e:
            raise TraceFileError(str(e)) from e
        try:
            extra = rec.extra_fields(where)
        except ValueError as e:
            raise TraceFileError(str(e)) from e
        got = _sample(rec, extra, where)
        if got is None:
            ts.ignored[rec.name] += 1
            continue
        key, sample = got
        if key == "op.step_graph":
            ts.graph_steps.append(sample)
        else:
            (ts.samples if key in OPERATOR_FORMS else ts.diagnostics)[key].append(sample)
        ts.devices.add(rec.device)
    return ts


def read_traces(paths: Sequence[str | Path]) -> TraceSet:
    """Parse every trace file into one TraceSet."""
    ts = TraceSet()
    for p in paths:
        read_trace_file(p, ts)
    return ts
