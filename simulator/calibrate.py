"""Calibration: fit the cost model's per-operator coefficients from operator traces, write a profile.

Input: trace files (JSON Lines of `conf.trace.TraceRecord`, written by bench/profile_ops.py) whose `extra`
carries each operator's features. Output: a `simulator.profile.Profile` (the versioned profile file) and a
report dict (fit details, diagnostics, suggested simulator settings).

Records used (others, e.g. the runtime's `step.*` spans, are counted and ignored):

| record             | operator      | features (from `extra`, plus record fields)                              |
|--------------------|---------------|--------------------------------------------------------------------------|
| op.gemm            | gemm          | weight_bytes, flops                                                      |
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
| op.tree_op         | (report only) | kind select|reroot: host tree bookkeeping -> suggested `sim.tree_op_s`    |

Fitting. Every operator uses the functional form of profile.py (`FEATURES`, `OPERATOR_FORMS`): time =
dot(coefficients, features) with every coefficient >= 0 (smooth, monotone, affine extrapolation). The fit
is non-negative least squares in *relative* error (each row weighted by 1 / measured time, so a 5 us GEMM
counts as much as a 5 ms one); NNLS is solved exactly by enumerating supports (<= 4 coefficients).

`step_overhead` is what a runtime step costs beyond its operators: for each whole-step record (kind verify /
expand, i.e. `TargetWorker` forward + verdict + KV keep, or one `DraftWorker.expand`), the operators' share
is predicted with the gemm / attention / allreduce fits just made (the simulator's own `forward_breakdown`,
so the step decomposes exactly as the simulator will recompose it), and a + b * num_kernels is fitted to
the rest, again in relative error of the *whole step*. num_kernels is `cost_model.kernels_per_step`.

With op.step_graph records, `graph_operators` (default attention_graph, step_overhead_graph) are fitted on each
captured step's class time against the step's summed call features (step_overhead_graph: its small kernels counted
as the simulator counts them, `cost_model.GraphKernels`, verify -> target, expand -> draft), and (`step_overhead_from`
auto / graph) step_overhead on the small kernels' exposed time (class `other`) alone: device time only, so that the
runtime block fitted on runs (`runs=`) holds the host work around a step; step_overhead then prices prefills.
Without them step_overhead is fitted on the host-timed steps as above.

Held-out error. Per operator, a seeded `holdout_fraction` of the rows is held out; the coefficients written
are fitted on the rest, and `fit_error.mape` / `max_rel_error` are measured on the held-out rows (on the
training rows when there are too few to hold any out; `num_holdout` says which). Rows are single operator
shapes, so a held-out row is a shape the fit has not seen. No end-to-end run enters the fit.

Errors in trace files name the file and line. No torch import; numpy only.
"""

from __future__ import annotations

import glob
import json
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from conf.presets import GPU_PRESETS, LINK_PRESETS, ModelShape, model_preset
from conf.trace import TraceRecord
from simulator.cost_model import (
    GraphKernels,
    Operators,
    StepDesc,
    forward_breakdown,
    kernels_per_step,
    step_operator_features,
)
from simulator.profile import FEATURES, OPERATOR_FORMS, OperatorFit, Profile, step_overhead_graph_features

RECORD_OPERATORS = {"op.gemm": "gemm", "op.attention": "attention", "op.allreduce": "allreduce",
                    "op.message": "message", "op.step_overhead": "step_overhead"}
"""Trace record name -> profile operator."""
DIAGNOSTIC_RECORDS = ("op.compaction", "op.tree_op", "op.p2p")
"""Records that are summarised in the report but have no profile operator."""
STEP_KINDS = ("verify", "expand", "forward")
"""op.step_overhead kinds that are whole runtime steps (the others are launch micro-benchmarks)."""
REQUIRED_EXTRA = {
    "gemm": ("weight_bytes", "flops"),
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
WEIGHT_BITS = 16
"""The runtime stores bf16 weights; the profiler measures them."""


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
        op = "message_unix"  # bench/profile_comm.py: the same ping-pong over the Unix socket
    _require(extra, REQUIRED_EXTRA[op], name, where)
    if op == "gemm":
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


# ---- fitting ---------------------------------------------------------------------------------------------
def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin ||a x - b||_2 subject to x >= 0, exactly, by trying every support (a has <= ~4 columns).

    The optimum's positive entries solve the unconstrained least squares on their columns, so the best
    feasible support solution is the optimum. Columns are scaled to unit norm first (features span 1 to
    1e12), which changes nothing but the conditioning.
    """
    k = a.shape[1]
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    an = a / norms
    best_x, best_r = np.zeros(k), float(np.linalg.norm(b))
    for mask in range(1, 2**k):
        cols = [j for j in range(k) if mask >> j & 1]
        x, *_ = np.linalg.lstsq(an[:, cols], b, rcond=None)
        if np.any(x < 0):
            continue
        r = float(np.linalg.norm(an[:, cols] @ x - b))
        if r < best_r - 1e-15 * max(1.0, best_r):
            best_x = np.zeros(k)
            best_x[cols] = x
            best_r = r
    return best_x / norms


def fit_relative(x: np.ndarray, y: np.ndarray, base: np.ndarray | None = None) -> np.ndarray:
    """Coefficients c >= 0 minimising sum(((base + x c - y) / y)^2) (relative error; base defaults to 0)."""
    base = np.zeros_like(y) if base is None else base
    return nnls(x / y[:, None], (y - base) / y)


def rel_errors(pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """|pred - y| / y."""
    return np.abs(pred - y) / y


def split_rows(n: int, fraction: float, seed: int, min_train: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, holdout) row indices: a seeded `fraction` held out, keeping >= min_train training rows."""
    idx = np.random.default_rng(seed).permutation(n)
    n_hold = min(int(round(fraction * n)), max(0, n - min_train))
    return np.sort(idx[n_hold:]), np.sort(idx[:n_hold])


@dataclass(frozen=True)
class FitResult:
    """Coefficients of one operator (or one TP degree of it) and their errors."""

    coefficients: tuple[float, ...]
    mape: float
    max_rel_error: float
    train_mape: float
    num_samples: int
    num_holdout: int

    def fit_error(self) -> dict[str, float]:
        """The profile's fit_error object (mape on held-out rows when there were any)."""
        return {"mape": self.mape, "max_rel_error": self.max_rel_error, "train_mape": self.train_mape,
                "num_samples": float(self.num_samples), "num_holdout": float(self.num_holdout)}


def fit_rows(x: np.ndarray, y: np.ndarray, fraction: float, seed: int,
             base: np.ndarray | None = None) -> FitResult:
    """Fit on a seeded split of the rows; errors on the held-out rows (on training rows if none held out)."""
    n, k = x.shape
    base = np.zeros(n) if base is None else base
    train, hold = split_rows(n, fraction, seed, min_train=max(k, 2 * k if n >= 4 * k else k))
    coef = fit_relative(x[train], y[train], base[train])
    pred = base + x @ coef
    err_train = rel_errors(pred[train], y[train])
    err = rel_errors(pred[hold], y[hold]) if len(hold) else err_train
    return FitResult(tuple(float(c) for c in coef), float(err.mean()), float(err.max()), float(err_train.mean()),
                     len(train), len(hold))


def _matrix(samples: Sequence[Sample]) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([s.features for s in samples], dtype=float),
            np.array([s.seconds for s in samples], dtype=float))


def fit_operator(samples: Sequence[Sample], fraction: float, seed: int) -> FitResult:
    """Fit one operator's form (OPERATOR_FORMS) to its samples."""
    x, y = _matrix(samples)
    return fit_rows(x, y, fraction, seed)


def step_base(fits: dict[str, OperatorFit], sample: Sample, gpu: str) -> tuple[float, int]:
    """(operator seconds the simulator predicts for this whole-step record, its num_kernels).

    Uses the fits made so far (analytic prior for an operator without one) through the simulator's own
    `forward_breakdown`, so the residual is exactly what `step_overhead` must supply.
    """
    e = sample.extra
    shape = model_preset(str(e["preset"]))
    fused = str(e["backend"]) == "triton"
    tp = sample.tp
    graph = bool(e.get("graphs", False))  # a captured step: the in-graph fits price it, as in the simulator
    profile = Profile(path="<calibrate>", hardware={"gpu": gpu}, software={}, operators=dict(fits))
    link = LINK_PRESETS["nvlink4"]
    ops = Operators(GPU_PRESETS[gpu], link, "oneshot", link, 0.0, 0.0, graph, profile,
                    intra_name="nvlink4", cross_name="nvlink4")
    parts = forward_breakdown(ops, shape, WEIGHT_BITS, StepDesc(sample.tokens, int(e["kv_len"]), tp), fused,
                              graph=graph)
    return parts["gemm"] + parts["attention"] + parts["allreduce"], kernels_per_step(shape, tp, fused)


GRAPH_CLASSES = {"gemm_graph": "gemm_s", "attention_graph": "attention_s", "step_overhead_graph": "other_s"}
"""In-graph operator -> the op.step_graph field holding its kernel class's exposed seconds per step."""
GRAPH_ROLES = {"verify": "target", "expand": "draft"}
"""A captured step's kind -> the role whose small kernels it launches (`cost_model.GraphKernels`)."""


def graph_kernels_of(sample: Sample) -> tuple[ModelShape, tuple[int, int]]:
    """(model shape, (small kernels, RoPE kernels)) of a captured step record, counted as the simulator counts them
    (`GraphKernels` with the step_graphs section's switches: conf/kernels/graphs.yaml)."""
    shape = model_preset(str(sample.extra["preset"]))
    return shape, GraphKernels(GRAPH_ROLES[str(sample.extra["kind"])]).counts(shape, sample.tokens)


def graph_operator_rows(steps: Sequence[Sample], op: str) -> tuple[np.ndarray, np.ndarray]:
    """(features, seconds) of `op` (GRAPH_CLASSES) over captured steps: per step, the summed features of the step's
    calls (`cost_model.step_operator_features`; the small kernels: their counts, `graph_kernels_of`) and its kernel
    class's exposed time."""
    x = []
    for s in steps:
        if op == "step_overhead_graph":
            shape, (small, rope) = graph_kernels_of(s)
            x.append(step_overhead_graph_features(small, rope, shape.hidden_size))
        else:
            x.append(step_operator_features(model_preset(str(s.extra["preset"])), WEIGHT_BITS,
                                            StepDesc(s.tokens, int(s.extra["kv_len"]), s.tp))[op])
    return np.array(x, dtype=float), np.array([float(s.extra[GRAPH_CLASSES[op]]) for s in steps])


def kernel_count_mismatches(steps: Sequence[Sample]) -> list[dict[str, Any]]:
    """Captured steps whose recorded `other_calls` differ from the small + RoPE kernels the simulator counts for
    them (a runtime whose kernels changed since `GraphKernels` was written): the report lists them."""
    out = []
    for s in steps:
        if "other_calls" not in s.extra:
            continue
        _, (small, rope) = graph_kernels_of(s)
        if int(s.extra["other_calls"]) != small + rope:
            out.append({"preset": s.extra["preset"], "kind": s.extra["kind"], "tokens": s.tokens,
                        "counted": small + rope, "recorded": int(s.extra["other_calls"])})
    return out


def fit_graph_operators(steps: Sequence[Sample], opts: CalibrationOptions, keep: Callable[..., None],
                        report: dict[str, Any]) -> None:
    """Fit `gemm_graph`, `attention_graph` and `step_overhead_graph` (those in `opts.graph_operators`) on the
    captured steps' per-class exposed times (each step one row, in relative error of the class's time per step);
    too few steps: skipped (the standalone fits price graph steps too). step_overhead_graph takes the step kinds
    `opts.step_kinds` of GRAPH_ROLES."""
    steps = [s for s in steps if s.tp == 1]
    for op, key in GRAPH_CLASSES.items():
        if op not in opts.graph_operators:
            continue
        rows = [s for s in steps if float(s.extra[key]) > 0
                and (op != "step_overhead_graph" or str(s.extra["kind"]) in set(opts.step_kinds) & set(GRAPH_ROLES))]
        if len(rows) < opts.min_samples:
            report["skipped"][op] = (f"{len(rows)} op.step_graph records with {key} > 0 (< {opts.min_samples}): "
                                     f"captured steps are priced by the standalone fits")
            continue
        x, y = graph_operator_rows(rows, op)
        res = fit_rows(x, y, opts.holdout_fraction, opts.seed)
        presets = Counter(str(s.extra["preset"]) for s in rows)
        info: dict[str, Any] = {}
        if op == "step_overhead_graph":
            info = {**fit_breakdowns(rows, y, y - x @ np.array(res.coefficients), {"median_other_s": y}),
                    "kernel_count_mismatches": kernel_count_mismatches(rows)}
        keep(op, res, None, max_tokens=max(s.tokens for s in rows), presets=dict(sorted(presets.items())), **info,
             note="fitted on the exposed time of this kernel class inside captured decode steps (one row per step); "
                  "mape of the class's time per step")


def fit_breakdowns(rows: Sequence[Sample], y: np.ndarray, resid: np.ndarray,
                   medians: dict[str, np.ndarray]) -> dict[str, dict[str, dict[str, Any]]]:
    """{"by_kind": ..., "by_preset": ...}: per value of the rows' `extra` kind and preset, how many rows, the median of
    each array in `medians`, and the fit's signed and absolute error relative to `y` (`resid` = y - prediction)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for label in ("kind", "preset"):
        by = out[f"by_{label}"] = {}
        for key in sorted({str(s.extra[label]) for s in rows}):
            sel = [i for i, s in enumerate(rows) if str(s.extra[label]) == key]
            by[key] = {"num": len(sel), **{name: float(np.median(v[sel])) for name, v in medians.items()},
                       "mean_signed_error": float(np.mean(-resid[sel] / y[sel])),
                       "mape": float(np.mean(np.abs(resid[sel]) / y[sel]))}
    return out


def fit_step_overhead_host(ts: TraceSet, fits: dict[str, OperatorFit], opts: CalibrationOptions,
                           keep: Callable[..., None], report: dict[str, Any]) -> None:
    """step_overhead from whole host-timed steps: a + b * num_kernels fitted to each step minus its operators'
    predicted share (`step_base`), in relative error of the whole step."""
    steps = [s for s in ts.samples.get("step_overhead", []) if str(s.extra["kind"]) in opts.step_kinds]
    if len(steps) < opts.min_samples:
        report["skipped"]["step_overhead"] = (f"{len(steps)} whole-step samples of kinds {list(opts.step_kinds)} "
                                              f"(< {opts.min_samples}): analytic prior kept")
    else:
        bases, kernels = zip(*(step_base(fits, s, opts.gpu) for s in steps))
        x = np.array([[1.0, float(k)] for k in kernels])
        y = np.array([s.seconds for s in steps])
        base = np.array(bases)
        res = fit_rows(x, y, opts.holdout_fraction, opts.seed, base)
        resid = y - base - x @ np.array(res.coefficients)
        # per kind / preset: how much of a step the operators explain, and the fit's error there
        medians = {"median_measured_s": y, "median_operator_share": base / y}
        keep("step_overhead", res, None, kinds=list(opts.step_kinds), **fit_breakdowns(steps, y, resid, medians),
             source="host",
             note="fitted on whole runtime steps minus the operators' predicted share; mape of the whole step")


def fit_step_overhead_graph(rows: Sequence[Sample], opts: CalibrationOptions, keep: Callable[..., None],
                            report: dict[str, Any]) -> None:
    """step_overhead from captured steps: a + b * num_kernels fitted to the exposed time of their small kernels (class
    `other`: norms, the embedding, top-k, argmax, compaction), in relative error of that time. Device time only: the
    host work around a step is the runtime block's (fitted on runs)."""
    if len(rows) < opts.min_samples:
        report["skipped"]["step_overhead"] = (f"{len(rows)} op.step_graph records of kinds {list(opts.step_kinds)} "
                                              f"(< {opts.min_samples}): analytic prior kept")
        return
    kernels = [kernels_per_step(model_preset(str(s.extra["preset"])), s.tp, str(s.extra["backend"]) == "triton")
               for s in rows]
    x = np.array([[1.0, float(k)] for k in kernels])
    y = np.array([float(s.extra["other_s"]) for s in rows])
    res = fit_rows(x, y, opts.holdout_fraction, opts.seed)
    keep("step_overhead", res, None, kinds=list(opts.step_kinds),
         **fit_breakdowns(rows, y, y - x @ np.array(res.coefficients), {"median_other_s": y}), source="graph",
         note="fitted on the exposed time of the small kernels (class other) inside captured steps; device only; "
              "mape of that time")


# ---- the whole calibration -------------------------------------------------------------------------------
@dataclass(frozen=True)
class CalibrationOptions:
    """What `calibrate` needs besides the traces (calibrate.py fills it from CalibrateConfig)."""

    gpu: str = "h200"
    holdout_fraction: float = 0.3
    seed: int = 0
    intra_group: str = "nvlink4"
    cross_group: str = "nvlink4"
    allreduce_mode: str = "graph"
    """Which all-reduce timings to fit: graph (inside CUDA graphs, what `kernels=graphs` runs) or eager."""
    step_kinds: tuple[str, ...] = ("verify", "expand")
    """Whole-step kinds step_overhead is fitted on."""
    min_samples: int = 3
    """An operator with fewer usable samples keeps the analytic prior (it is left out of the profile)."""
    graph_operators: tuple[str, ...] = ("attention_graph", "step_overhead_graph")
    """Which in-graph operators to fit from op.step_graph records (the others price captured steps by their
    standalone fits)."""
    step_overhead_from: str = "auto"
    """What step_overhead is fitted on: host (whole host-timed steps minus their operators: the device's small
    kernels and the step's host work), graph (the exposed time of the small kernels, class `other`, inside captured
    steps: device only, the runtime block then fits the host work on runs), auto (graph where op.step_graph records
    exist, else host)."""


def median_or_none(values: Sequence[float]) -> float | None:
    """The median, or None for no values."""
    return statistics.median(values) if values else None


def _diagnostics(ts: TraceSet, opts: CalibrationOptions) -> dict[str, Any]:
    """Report-only summaries: compaction fit, tree bookkeeping medians, launch costs, raw p2p."""
    out: dict[str, Any] = {}
    comp = ts.diagnostics.get("op.compaction", [])
    by_impl: dict[str, list[Sample]] = defaultdict(list)
    for s in comp:
        by_impl[str(s.extra.get("impl", "?"))].append(s)
    out["compaction"] = {}
    for impl, rows in sorted(by_impl.items()):
        if len(rows) >= 2:
            r = fit_operator(rows, opts.holdout_fraction, opts.seed)
            out["compaction"][impl] = {"form": "a + b * bytes", "a": r.coefficients[0], "b": r.coefficients[1],
                                       **r.fit_error()}
    tree: dict[str, float | None] = {}
    for kind in ("select", "reroot"):
        tree[f"{kind}_median_s"] = median_or_none([s.seconds for s in ts.diagnostics.get("op.tree_op", [])
                                            if s.extra.get("kind") == kind])
    out["tree_op"] = tree
    out["launch"] = {k.split(":", 1)[1]: median_or_none([s.seconds for s in v])
                     for k, v in ts.diagnostics.items() if k.startswith("launch:")}
    p2p = ts.diagnostics.get("op.p2p", [])
    out["p2p_one_way_s"] = {str(int(s.extra["bytes"])): s.seconds for s in p2p}
    return out


def suggested_sim_settings(diag: dict[str, Any]) -> dict[str, float]:
    """Simulator knobs the profiler measured but the profile format cannot hold (for conf/sim/<gpu>.yaml).

    tree_op_s: host time of one re-root + top-bs selection (median reroot + median select).
    """
    tree = diag.get("tree_op", {})
    sel, rer = tree.get("select_median_s"), tree.get("reroot_median_s")
    return {"tree_op_s": sel + rer} if sel is not None and rer is not None else {}


def calibrate(ts: TraceSet, opts: CalibrationOptions, software: dict[str, Any] | None = None
              ) -> tuple[Profile, dict[str, Any]]:
    """Fit every operator with enough samples; returns (profile, report)."""
    if opts.gpu not in GPU_PRESETS:
        raise ValueError(f"hardware.gpu: unknown GPU {opts.gpu!r}; allowed: {sorted(GPU_PRESETS)}")
    fits: dict[str, OperatorFit] = {}
    report: dict[str, Any] = {"operators": {}, "skipped": {}, "ignored_records": dict(ts.ignored),
                              "files": list(ts.files), "devices": sorted(ts.devices)}

    def keep(op: str, res: FitResult, by_tp: dict[int, FitResult] | None = None, **info: Any) -> None:
        fits[op] = OperatorFit(op, res.coefficients, res.fit_error(),
                               {tp: r.coefficients for tp, r in (by_tp or {}).items()})
        names = OPERATOR_FORMS[op][0]
        report["operators"][op] = {"coefficients": dict(zip(names, res.coefficients)), **res.fit_error(), **info}
        if by_tp:
            report["operators"][op]["by_tp"] = {str(tp): {"coefficients": dict(zip(names, r.coefficients)),
                                                          **r.fit_error()} for tp, r in sorted(by_tp.items())}

    for op in ("gemm", "attention", "message", "message_unix"):
        rows = ts.samples.get(op, [])
        if len(rows) < opts.min_samples:
            report["skipped"][op] = f"{len(rows)} samples (< {opts.min_samples}): analytic prior kept"
            continue
        keep(op, fit_operator(rows, opts.holdout_fraction, opts.seed))

    ar = [s for s in ts.samples.get("allreduce", []) if str(s.extra.get("mode", "eager")) == opts.allreduce_mode]
    if len(ar) < opts.min_samples:
        report["skipped"]["allreduce"] = (f"{len(ar)} samples of mode {opts.allreduce_mode} "
                                          f"(< {opts.min_samples}): analytic prior kept")
    else:
        per_tp: dict[int, list[Sample]] = defaultdict(list)
        for s in ar:
            per_tp[s.tp].append(s)
        by_tp = {tp: fit_operator(rows, opts.holdout_fraction, opts.seed)
                 for tp, rows in sorted(per_tp.items()) if len(rows) >= opts.min_samples}
        keep("allreduce", fit_operator(ar, opts.holdout_fraction, opts.seed),
             by_tp if len(by_tp) > 1 else None, mode=opts.allreduce_mode)

    fit_graph_operators(ts.graph_steps, opts, keep, report)

    graph_rows = [s for s in ts.graph_steps if s.tp == 1 and str(s.extra["kind"]) in opts.step_kinds]
    source = opts.step_overhead_from
    if source == "auto":
        source = "graph" if len(graph_rows) >= opts.min_samples else "host"
    if source == "graph":
        fit_step_overhead_graph(graph_rows, opts, keep, report)
    else:
        fit_step_overhead_host(ts, fits, opts, keep, report)

    if not fits:
        raise ValueError(f"traces {ts.files}: no operator has >= {opts.min_samples} usable samples "
                         f"(records seen: {dict(ts.ignored)}); is this a profile_ops.py trace?")
    hardware: dict[str, Any] = {"gpu": opts.gpu}
    if "allreduce" in fits:
        hardware["intra_group"] = opts.intra_group
    if "message" in fits:
        hardware["cross_group"] = opts.cross_group
    diag = _diagnostics(ts, opts)
    report["diagnostics"] = diag
    report["suggested_sim_settings"] = suggested_sim_settings(diag)
    report["options"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in opts.__dict__.items()}
    sw = dict(software or {})
    profile = Profile(path="<calibrate>", hardware=hardware, software=sw, operators=fits)
    return profile, report


def summary_table(report: dict[str, Any]) -> str:
    """Per-operator fit error as a text table."""
    lines = [f"{'operator':<14} {'samples':>7} {'holdout':>7} {'MAPE':>7} {'max err':>8}  coefficients"]
    for op, r in report["operators"].items():
        coefs = ", ".join(f"{k}={v:.3g}" for k, v in r["coefficients"].items())
        lines.append(f"{op:<14} {int(r['num_samples']):>7} {int(r['num_holdout']):>7} {r['mape']:>7.1%} "
                     f"{r['max_rel_error']:>8.1%}  {coefs}")
    lines += [f"{op:<14} skipped: {why}" for op, why in report["skipped"].items()]
    if report.get("suggested_sim_settings"):
        lines.append(f"suggested sim settings: {report['suggested_sim_settings']}")
    return "\n".join(lines)
