"""Calibration: fit the cost model's per-operator coefficients from operator traces, write a profile.

Input: trace files (JSON Lines of `conf.trace.TraceRecord`, written by calibration/profile_ops.py) whose `extra`
carries each operator's features. Output: a `simulator.profile.Profile` (the versioned profile file) and a
report dict (fit details, diagnostics, suggested simulator settings).

Records used: `simulator.trace_reader` (its table); others, e.g. the runtime's `step.*` spans, are counted and
ignored.

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

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from conf.presets import GPU_PRESETS, LINK_PRESETS, ModelShape, model_preset
from simulator.cost_model import (
    GraphKernels,
    Operators,
    StepDesc,
    forward_breakdown,
    kernels_per_step,
    step_operator_features,
)
from simulator.profile import MATRIX_NAMES, OPERATOR_FORMS, OperatorFit, Profile, step_overhead_graph_features
from simulator.trace_reader import Sample, TraceSet

WEIGHT_BITS = 16
"""The runtime stores bf16 weights; the profiler measures them."""


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


def measured_tree_op_s(diag: dict[str, Any]) -> float | None:
    """The profile's `tree_op_s`: host time of one re-root + top-bs selection (median reroot + median select);
    None when the traces hold no op.tree_op records of both kinds."""
    tree = diag.get("tree_op", {})
    sel, rer = tree.get("select_median_s"), tree.get("reroot_median_s")
    return sel + rer if sel is not None and rer is not None else None


def calibrate(ts: TraceSet, opts: CalibrationOptions, software: dict[str, Any] | None = None
              ) -> tuple[Profile, dict[str, Any]]:
    """Fit every operator with enough samples; returns (profile, report)."""
    if opts.gpu not in GPU_PRESETS:
        raise ValueError(f"hardware.gpu: unknown GPU {opts.gpu!r}; allowed: {sorted(GPU_PRESETS)}")
    fits: dict[str, OperatorFit] = {}
    report: dict[str, Any] = {"operators": {}, "skipped": {}, "ignored_records": dict(ts.ignored),
                              "files": list(ts.files), "devices": sorted(ts.devices)}

    def keep(op: str, res: FitResult, by_tp: dict[int, FitResult] | None = None,
             measured: dict[tuple[str, int, int], tuple[tuple[int, float], ...]] | None = None, **info: Any) -> None:
        fits[op] = OperatorFit(op, res.coefficients, res.fit_error(),
                               {tp: r.coefficients for tp, r in (by_tp or {}).items()}, measured or {})
        names = OPERATOR_FORMS[op][0]
        report["operators"][op] = {"coefficients": dict(zip(names, res.coefficients)), **res.fit_error(), **info}
        if measured:
            report["operators"][op]["measured_shapes"] = len(measured)
        if by_tp:
            report["operators"][op]["by_tp"] = {str(tp): {"coefficients": dict(zip(names, r.coefficients)),
                                                          **r.fit_error()} for tp, r in sorted(by_tp.items())}

    for op in ("gemm", "gemm_fp8", "attention", "message", "message_unix"):
        rows = ts.samples.get(op, [])
        if len(rows) < opts.min_samples:
            report["skipped"][op] = f"{len(rows)} samples (< {opts.min_samples}): analytic prior kept"
            continue
        # the fp8 kernels' times vary by tile more than an affine form follows: their measured shapes go along
        keep(op, fit_operator(rows, opts.holdout_fraction, opts.seed),
             measured=measured_shapes(rows) if op == "gemm_fp8" else None)

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
    tree_op_s = measured_tree_op_s(diag)
    report["options"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in opts.__dict__.items()}
    sw = dict(software or {})
    profile = Profile(path="<calibrate>", hardware=hardware, software=sw, operators=fits, tree_op_s=tree_op_s)
    return profile, report


def measured_shapes(rows: Sequence[Sample]) -> dict[tuple[str, int, int], tuple[tuple[int, float], ...]]:
    """Per weight matrix (extra matrix, k, n) the median seconds at each row count (extra m) of GEMM samples
    (profile_ops' records; samples without them are left out): a profile's `measured` (simulator/profile.py)."""
    by: dict[tuple[str, int, int], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in rows:
        e = s.extra
        if e.get("matrix") in MATRIX_NAMES and all(
                isinstance(e.get(key), int) and not isinstance(e.get(key), bool) and e[key] >= 1 for key in "knm"):
            by[(e["matrix"], e["k"], e["n"])][e["m"]].append(s.seconds)
    return {shape: tuple((m, float(np.median(ts))) for m, ts in sorted(per_m.items())) for shape, per_m in by.items()}


def summary_table(report: dict[str, Any]) -> str:
    """Per-operator fit error as a text table."""
    lines = [f"{'operator':<14} {'samples':>7} {'holdout':>7} {'MAPE':>7} {'max err':>8}  coefficients"]
    for op, r in report["operators"].items():
        coefs = ", ".join(f"{k}={v:.3g}" for k, v in r["coefficients"].items())
        lines.append(f"{op:<14} {int(r['num_samples']):>7} {int(r['num_holdout']):>7} {r['mape']:>7.1%} "
                     f"{r['max_rel_error']:>8.1%}  {coefs}")
    lines += [f"{op:<14} skipped: {why}" for op, why in report["skipped"].items()]
    return "\n".join(lines)
