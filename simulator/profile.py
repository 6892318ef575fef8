"""The profile file: fitted per-operator cost coefficients (written by calibrate.py, read by the cost model).

Format (JSON, version 1)::

    {
      "version": 1,
      "hardware": {"gpu": "h200",                      # required: a GPU_PRESETS name
                   "intra_group": "nvlink4",           # optional: link the allreduce fit was measured on
                   "allreduce": "oneshot",             # optional: algorithm the allreduce fit was measured with
                   "cross_group": "nvlink4"},          # optional: link the message fit was measured on
      "software": {"torch": "2.11.0", "kernels": "triton", "cuda_graphs": true, "git_sha": "..."},  # free-form
      "operators": {
        "gemm":          {"coefficients": {"a": 2.1e-6, "b": 2.5e-13, "c": 1.4e-15},
                          "fit_error": {"mape": 0.04, "max_rel_error": 0.12, "num_samples": 96}},
        "attention":     {"coefficients": {"a": ..., "b": ..., "c": ...}, "fit_error": {...}},
        "allreduce":     {"coefficients": {"a": ..., "b": ...}, "fit_error": {...},
                          "by_tp": {"2": {"coefficients": {...}, "fit_error": {...}}, "4": {...}}},
        "message":       {"coefficients": {"a": ..., "b": ...}, "fit_error": {...}},
        "step_overhead": {"coefficients": {"a": ..., "b": ...}, "fit_error": {...}}
      },
      "runtime": {"step_extra_s": 1.2e-4, "expand_extra_s": 4.1e-4,   # optional: host costs of the runtime's
                  "verify_message_s": 5.0e-4, "draft_round_s": 1.5e-3}, # loop (simulator/runtime_fit.py)
      "tree_op_s": 8.3e-5    # optional: host time of one re-root + top-bs selection (calibrate: op.tree_op medians)
    }

Functional forms (seconds; every coefficient >= 0, so each prediction is smooth and monotone
non-decreasing in every feature; `predict` = dot(coefficients, features), linear least squares for calibrate):

| operator      | one call is                                   | time                                   |
|---------------|-----------------------------------------------|----------------------------------------|
| gemm          | one weight matrix on one rank (qkv, o, ...)   | a + b * weight_bytes + c * flops       |
| attention     | one layer's attention on one rank             | a + b * kv_bytes + c * tokens * kv_len |
| allreduce     | one all-reduce of `bytes` per rank            | a + b * bytes                          |
| message       | one draft <-> target message (incl. host)     | a + b * bytes                          |
| message_unix  | the same over the Unix socket (leaders on one | a + b * bytes                          |
|               | host: `parallel.leader_channel` unix / auto)  |                                        |
| step_overhead | per forward step, beyond the operators above  | a + b * num_kernels                    |
| gemm_graph    | gemm as a CUDA-graph decode step runs it      | as gemm                                |
| gemm_fp8      | one layer matrix streamed as fp8 weights      | as gemm (weight_bytes: the fp8 copy's) |
| attention_graph | attention, likewise                         | as attention                           |
| step_overhead_graph | the small kernels of one captured decode | a + b * small_kernels + c * rope_kernels |
|               | step (norms, embedding, head, verdict, ...)   | + d * small_kernels * hidden_size      |

`gemm_graph` / `attention_graph` (optional): the same forms fitted on the exposed time of the GEMM and attention
kernels inside the runtime's captured decode steps (profile_ops' step_graphs section: PDL overlap and no launch gaps,
fused prologues and epilogues included), where the standalone timings of `gemm` / `attention` price each call alone.
The cost model prices CUDA-graph decode steps (verifies, expansions, autoregressive steps) with them where present;
prefills and eager steps keep `gemm` / `attention`. `step_overhead_graph` (optional) is the device time of a
captured step's other kernels, counted per step as the runtime launches them (`cost_model.GraphKernels`: a
draft's multi-row expansion launches a RoPE + KV-write kernel per layer that a target's verify fuses into its QKV
GEMM); where present it prices captured decode steps in place of `step_overhead`.

`gemm_fp8` (optional): the gemm form fitted on the skinny kernels streaming `weight_bits=8` copies (fp8 e4m3 codes + a
float32 scale per row, `cost_model.matrix_bytes`; profile_ops' gemm_fp8 section); the cost model prices the calls that
stream fp8 (`cost_model.streams_fp8`) with it, in decode steps captured or not. Without it those calls take the 16-bit
fits at their fp8 bytes, which the runtime's fp8 GEMMs do not reach (the simulation's cost label says so). Its affine
form misprices these kernels by shape (a fixed cost and a bandwidth that vary with the tile), so calibrate also stores
every profiled shape's measured times (`measured`, `{"<matrix>:<k>x<n>": [[M, seconds], ...]}`, a rank's weight matrix
by name and shape: the name picks the kernel), which the cost model takes for those shapes, linear in M between the
measured row counts (`OperatorFit.at_shape`); other shapes take the fit.

`by_tp` (optional on any operator) holds coefficients per TP degree; a degree without an entry uses the
operator's top-level coefficients. Operators missing from `operators` fall back to the analytic prior, as do
allreduce / message when the recorded link or algorithm differs from the run's (cost_model.py).
`fit_error.mape` (mean absolute percentage error on held-out samples, as a fraction) is required.

`runtime` (optional) holds what the operator traces cannot see: the host time the runtime's own loop spends
per step and per round, fitted on measured runtime run dirs (`calibrate.py runs=[...]`,
simulator/runtime_fit.py; keys in RUNTIME_COSTS, seconds >= 0). Without it those costs are the analytic prior's.
`runtime.loops` (optional): per runtime loop in LOOP_SHAPES (colocated, chain), the LOOP_COSTS fitted on that
loop's runs alone, which configurations of that loop take in place of the top-level ones, e.g.
``"runtime": {"step_extra_s": 1.6e-4, ..., "loops": {"colocated": {"step_extra_s": 7e-5, ...}}}``.

`tree_op_s` (optional): the draft leader's host time per round for its tree (median re-root + median top-bs
selection from the calibration traces' op.tree_op records); a runtime block's `draft_round_s` replaces it where the
draft has its own group. Absent: the prior's (simulator/cost_model.py PRIOR_TREE_OP_S).

Errors name the file and the JSON field (`ProfileError`). No I/O besides `load_profile` / `write_profile`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conf.presets import GPU_PRESETS, LINK_PRESETS

PROFILE_VERSION = 1

OPERATOR_FORMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # operator: (coefficient names, feature names); time = sum(coef * feature), the first feature is 1
    "gemm": (("a", "b", "c"), ("1", "weight_bytes", "flops")),
    "attention": (("a", "b", "c"), ("1", "kv_bytes", "tokens*kv_len")),
    "gemm_graph": (("a", "b", "c"), ("1", "weight_bytes", "flops")),
    "gemm_fp8": (("a", "b", "c"), ("1", "weight_bytes", "flops")),
    "attention_graph": (("a", "b", "c"), ("1", "kv_bytes", "tokens*kv_len")),
    "allreduce": (("a", "b"), ("1", "bytes")),
    "message": (("a", "b"), ("1", "bytes")),
    "message_unix": (("a", "b"), ("1", "bytes")),
    "step_overhead": (("a", "b"), ("1", "num_kernels")),
    "step_overhead_graph": (("a", "b", "c", "d"), ("1", "small_kernels", "rope_kernels", "small_kernels*hidden_size")),
}


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the file and the field."""

RUNTIME_COSTS: dict[str, str] = {
    "step_extra_s": "per target forward (autoregressive step or verify) beyond the operator model",
    "tp_step_extra_s": "per target forward of a TP > 1 target beyond the operator model (the leader's verdict and "
                       "the peers' wait for it; its broadcast is the profiled message); absent: step_extra_s",
    "tp_ar_step_extra_s": "per autoregressive step of a TP > 1 target (not chained: the leader reads each token "
                          "back and broadcasts it before the next step) beyond the operator model; absent: "
                          "tp_step_extra_s",
    "ar_step_extra_s": "per chained autoregressive step (greedy, CUDA graphs, one-GPU target: the runtime queues "
                       "step i + 1 before reading token i) beyond the operator model; may be negative (down to "
                       "-1 ms): the fitted step overhead holds host time that chaining hides; absent: 0",
    "keep_s": "target host time of the KV keep after a verify, mean over all verifies (most keep nothing in "
              "place); charged after the verified path is sent; absent: the compaction operator",
    "compact_s": "draft host time of a re-root's deferred KV compaction (after the proposal is sent), mean over "
                 "those compactions; absent: the compaction operator",
    "expand_extra_s": "per draft forward (one expansion of w leaves) beyond the operator model: constant part",
    "expand_extra_per_row_s": "per draft forward beyond the operator model: part per row (w, padding included)",
    "expand_extra_per_real_row_s": "per draft forward beyond the operator model: part per real (not padding) row, "
                                   "the w x topk tree nodes it creates on the host (a refill after a miss "
                                   "expands one real row, an overlapped expansion w); fitted from spans that "
                                   "record their rows",
    "verify_message_s": "target host time per verify in draft modes: take the proposal, send the verified path",
    "draft_round_s": "draft host time per round: take the verified path, re-root (the runtime's step.reroot span), "
                     "select, send the proposal (the KV compaction follows the send when no refill is needed: "
                     "compact_s; before a refill: the compaction operator)",
}
"""The optional `runtime` block: host costs of the runtime's loop (simulator/runtime_fit.py fits them)."""
LOOP_SHAPES: dict[str, str] = {
    "colocated": "a one-GPU target and its draft driven by one Python loop (draft modes at parallel=1x0): no "
                 "messages, the draft's forwards between the target's",
    "chain": "chain drafting with the draft on its own GPUs (parallel=NxM, M > 0): one-row draft steps, no tree "
             "selection",
}
"""Runtime loops whose host costs the `runtime` block may hold apart (`runtime.loops.<shape>`, `predicates.loop_shape`);
every other configuration (tree modes on two groups, autoregressive runs) takes the block's top-level costs."""
LOOP_COSTS = ("step_extra_s", "expand_extra_s", "expand_extra_per_row_s", "expand_extra_per_real_row_s",
              "verify_message_s", "draft_round_s")
"""The RUNTIME_COSTS a loop entry may override (a one-GPU target's step and the draft's host costs; the TP > 1, the
autoregressive and the KV bookkeeping costs stay top-level)."""
SIGNED_RUNTIME_COSTS: dict[str, float] = {"ar_step_extra_s": -1.0e-3, "step_extra_s": -1.0e-3,
                                          "expand_extra_s": -1.0e-3}
"""Runtime costs that correct the operator model and may be negative, with their lowest allowed value (the
simulator also never lets a negative one remove more than `cost_model.NEGATIVE_EXTRA_CAP` of a step)."""


def runtime_bound(key: str) -> float:
    """The lowest value a runtime cost may take: SIGNED_RUNTIME_COSTS' bound, else 0."""
    return SIGNED_RUNTIME_COSTS.get(key, 0.0)


def gemm_features(weight_bytes: float, flops: float) -> tuple[float, ...]:
    """Features of one GEMM call (one weight matrix, one rank)."""
    return (1.0, weight_bytes, flops)


def attention_features(kv_bytes: float, tokens: int, kv_len: int) -> tuple[float, ...]:
    """Features of one layer's attention on one rank: KV bytes read and query-key pairs."""
    return (1.0, kv_bytes, float(tokens) * kv_len)


def allreduce_features(nbytes: float) -> tuple[float, ...]:
    """Features of one all-reduce of `nbytes` per rank."""
    return (1.0, nbytes)


def message_features(nbytes: float) -> tuple[float, ...]:
    """Features of one cross-group message of `nbytes` on the wire."""
    return (1.0, nbytes)


def step_overhead_features(num_kernels: int) -> tuple[float, ...]:
    """Features of one forward step's fixed overhead."""
    return (1.0, float(num_kernels))


def step_overhead_graph_features(small_kernels: int, rope_kernels: int, hidden_size: int) -> tuple[float, ...]:
    """Features of one captured decode step's small kernels: their launches (each also moves rows of hidden_size
    elements: norms, residual adds) and its separate RoPE + KV-write launches."""
    return (1.0, float(small_kernels), float(rope_kernels), float(small_kernels) * hidden_size)


FEATURES = {"gemm": gemm_features, "attention": attention_features, "gemm_graph": gemm_features,
            "gemm_fp8": gemm_features, "attention_graph": attention_features, "allreduce": allreduce_features,
            "message": message_features, "message_unix": message_features, "step_overhead": step_overhead_features,
            "step_overhead_graph": step_overhead_graph_features}
"""Feature function per operator: calibrate builds its design matrix from these."""


MEASURED_OPERATORS = ("gemm", "gemm_fp8")
"""Operators that may carry `measured`: per weight matrix of one rank (name, k, n) the measured seconds per call at
each row count M profiled, which the cost model takes in place of the fit for those matrices (`OperatorFit.at_shape`).
The name (qkv, o, gate_up, down, lm_head) tells the kernels apart where two matrices share a shape."""
MATRIX_NAMES = ("qkv", "o", "gate_up", "down", "lm_head")


@dataclass(frozen=True)
class OperatorFit:
    """Fitted coefficients of one operator (plus optional per-TP overrides and measured shapes) and its fit error."""

    name: str
    coefficients: tuple[float, ...]
    fit_error: dict[str, float]
    by_tp: dict[int, tuple[float, ...]] = field(default_factory=dict)
    measured: dict[tuple[str, int, int], tuple[tuple[int, float], ...]] = field(default_factory=dict)
    """(matrix, k, n) -> ((M, seconds), ...) ascending in M (MEASURED_OPERATORS only)."""

    def coefficients_for(self, tp: int) -> tuple[float, ...]:
        """Coefficients for TP degree `tp` (its `by_tp` entry, else the top-level ones)."""
        return self.by_tp.get(tp, self.coefficients)

    def predict(self, features: tuple[float, ...], tp: int = 1) -> float:
        """Seconds for one call with these features (see OPERATOR_FORMS)."""
        return sum(c * f for c, f in zip(self.coefficients_for(tp), features))

    def at_shape(self, matrix: str, k: int, n: int, m: int) -> float | None:
        """Seconds of one [m, k] x [k, n] call of `matrix` from `measured` (None: not measured): linear in M between
        the measured row counts; below the smallest, its time; above the largest, its time plus the fit's growth from
        there (a gemm form: features 1, weight_bytes = 0, flops)."""
        pts = self.measured.get((matrix, k, n))
        if not pts:
            return None
        if m <= pts[0][0]:
            return pts[0][1]
        for (m0, t0), (m1, t1) in zip(pts, pts[1:]):
            if m <= m1:
                return t0 + (t1 - t0) * (m - m0) / (m1 - m0)
        m_last, t_last = pts[-1]
        grow = self.predict((0.0, 0.0, 2.0 * m * k * n)) - self.predict((0.0, 0.0, 2.0 * m_last * k * n))
        return t_last + grow


@dataclass(frozen=True)
class Profile:
    """A loaded, validated profile."""

    path: str
    hardware: dict[str, Any]
    software: dict[str, Any]
    operators: dict[str, OperatorFit]
    runtime: dict[str, float] = field(default_factory=dict)
    """RUNTIME_COSTS seconds fitted on measured runtime runs (empty: none)."""
    runtime_loops: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per LOOP_SHAPES entry, the LOOP_COSTS fitted on that loop's runs alone (`runtime.loops` in the file)."""
    tree_op_s: float | None = None
    """The draft leader's measured host time per round for its tree (`tree_op_s` in the file); None: the prior's."""

    @property
    def gpu(self) -> str:
        """GPU preset the profile was measured on."""
        return str(self.hardware["gpu"])


def _fail(where: str, field_path: str, msg: str) -> ProfileError:
    return ProfileError(f"{where}: {field_path}: {msg}")


def _coefficients(where: str, fp: str, op: str, entry: Any) -> tuple[float, ...]:
    names = OPERATOR_FORMS[op][0]
    if not isinstance(entry, dict):
        raise _fail(where, fp, f"must be an object with {list(names)}, got {type(entry).__name__}")
    extra = set(entry) - set(names)
    missing = [n for n in names if n not in entry]
    if missing or extra:
        raise _fail(where, fp, f"needs exactly {list(names)} (missing {missing}, unknown {sorted(extra)})")
    out = []
    for n in names:
        v = entry[n]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise _fail(where, f"{fp}.{n}", f"must be a finite number, got {v!r}")
        if v < 0:
            raise _fail(where, f"{fp}.{n}", f"must be >= 0 (costs are monotone in every feature), got {v}")
        out.append(float(v))
    return tuple(out)


def _fit_error(where: str, fp: str, entry: Any) -> dict[str, float]:
    if not isinstance(entry, dict) or "mape" not in entry:
        raise _fail(where, fp, "must be an object with at least 'mape' (fraction)")
    out = {}
    for k, v in entry.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise _fail(where, f"{fp}.{k}", f"must be a finite number >= 0, got {v!r}")
        out[str(k)] = float(v)
    return out


def _operator(where: str, op: str, entry: Any) -> OperatorFit:
    fp = f"operators.{op}"
    if not isinstance(entry, dict):
        raise _fail(where, fp, f"must be an object, got {type(entry).__name__}")
    unknown = set(entry) - {"coefficients", "fit_error", "by_tp", "measured"}
    if unknown:
        raise _fail(where, fp, f"unknown keys {sorted(unknown)}; allowed: coefficients, fit_error, by_tp, measured")
    if "measured" in entry and op not in MEASURED_OPERATORS:
        raise _fail(where, f"{fp}.measured", f"only {list(MEASURED_OPERATORS)} may carry measured shapes")
    for key in ("coefficients", "fit_error"):
        if key not in entry:
            raise _fail(where, f"{fp}.{key}", "is missing")
    coefs = _coefficients(where, f"{fp}.coefficients", op, entry["coefficients"])
    err = _fit_error(where, f"{fp}.fit_error", entry["fit_error"])
    by_tp: dict[int, tuple[float, ...]] = {}
    raw = entry.get("by_tp", {})
    if not isinstance(raw, dict):
        raise _fail(where, f"{fp}.by_tp", "must be an object keyed by TP degree")
    for k, sub in raw.items():
        if not str(k).isdigit() or int(k) < 1:
            raise _fail(where, f"{fp}.by_tp.{k}", "keys must be TP degrees >= 1")
        if not isinstance(sub, dict) or "coefficients" not in sub:
            raise _fail(where, f"{fp}.by_tp.{k}", "must be an object with 'coefficients'")
        by_tp[int(k)] = _coefficients(where, f"{fp}.by_tp.{k}.coefficients", op, sub["coefficients"])
        if "fit_error" in sub:
            _fit_error(where, f"{fp}.by_tp.{k}.fit_error", sub["fit_error"])
    return OperatorFit(op, coefs, err, by_tp, _measured(where, f"{fp}.measured", entry.get("measured", {})))


def _measured(where: str, fp: str, raw: Any) -> dict[tuple[str, int, int], tuple[tuple[int, float], ...]]:
    """`measured`: {"<matrix>:<k>x<n>": [[M, seconds], ...]} with M ascending integers >= 1 and seconds > 0."""
    if not isinstance(raw, dict):
        raise _fail(where, fp, 'must be an object {"<matrix>:<k>x<n>": [[M, seconds], ...]}')
    out = {}
    for key, pts in raw.items():
        matrix, _, shape = str(key).partition(":")
        dims = shape.split("x")
        if matrix not in MATRIX_NAMES or len(dims) != 2 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise _fail(where, f"{fp}.{key}", f'keys must be "<matrix>:<k>x<n>" with a matrix of {list(MATRIX_NAMES)} '
                        f"and positive integers")
        ok = isinstance(pts, list) and pts and all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], int) and not isinstance(p[0], bool)
            and p[0] >= 1 and isinstance(p[1], (int, float)) and not isinstance(p[1], bool)
            and math.isfinite(p[1]) and p[1] > 0 for p in pts)
        if not ok or any(a[0] >= b[0] for a, b in zip(pts, pts[1:])):
            raise _fail(where, f"{fp}.{key}", f"must be a non-empty list of [M, seconds] (M integers >= 1, "
                        f"ascending; seconds > 0), got {pts!r}")
        out[(matrix, int(dims[0]), int(dims[1]))] = tuple((int(m), float(t)) for m, t in pts)
    return out


def parse_profile(data: Any, where: str = "profile") -> Profile:
    """Validate a decoded profile JSON object; `where` (the file) prefixes every error."""
    if not isinstance(data, dict):
        raise _fail(where, "<top level>", f"must be a JSON object, got {type(data).__name__}")
    unknown = set(data) - {"version", "hardware", "software", "operators", "runtime", "tree_op_s"}
    if unknown:
        raise _fail(where, "<top level>", f"unknown keys {sorted(unknown)}")
    if data.get("version") != PROFILE_VERSION:
        raise _fail(where, "version", f"must be {PROFILE_VERSION}, got {data.get('version')!r}")
    hw = data.get("hardware")
    if not isinstance(hw, dict) or "gpu" not in hw:
        raise _fail(where, "hardware", "must be an object with at least 'gpu'")
    if hw["gpu"] not in GPU_PRESETS:
        raise _fail(where, "hardware.gpu", f"unknown GPU {hw['gpu']!r}; allowed: {sorted(GPU_PRESETS)}")
    for key in ("intra_group", "cross_group"):
        if key in hw and hw[key] not in LINK_PRESETS:
            raise _fail(where, f"hardware.{key}", f"unknown link {hw[key]!r}; allowed: {sorted(LINK_PRESETS)}")
    if "allreduce" in hw and hw["allreduce"] not in ("oneshot", "ring", "tree"):
        raise _fail(where, "hardware.allreduce", f"{hw['allreduce']!r} is not one of oneshot, ring, tree")
    sw = data.get("software", {})
    if not isinstance(sw, dict):
        raise _fail(where, "software", "must be an object")
    ops = data.get("operators")
    if not isinstance(ops, dict) or not ops:
        raise _fail(where, "operators", f"must be a non-empty object with keys from {list(OPERATOR_FORMS)}")
    for op in ops:
        if op not in OPERATOR_FORMS:
            raise _fail(where, f"operators.{op}", f"unknown operator; allowed: {list(OPERATOR_FORMS)}")
    fits = {op: _operator(where, op, entry) for op, entry in ops.items()}
    runtime = data.get("runtime", {})
    if not isinstance(runtime, dict):
        raise _fail(where, "runtime", f"must be an object with keys from {list(RUNTIME_COSTS)} (and 'loops')")
    loops = runtime.get("loops", {})
    if not isinstance(loops, dict):
        raise _fail(where, "runtime.loops", f"must be an object keyed by loop shape ({list(LOOP_SHAPES)})")
    for shape in loops:
        if shape not in LOOP_SHAPES:
            raise _fail(where, f"runtime.loops.{shape}", f"unknown loop shape; allowed: {list(LOOP_SHAPES)}")
    tree_op_s = data.get("tree_op_s")
    if tree_op_s is not None and (isinstance(tree_op_s, bool) or not isinstance(tree_op_s, (int, float))
                                  or not math.isfinite(tree_op_s) or tree_op_s < 0):
        raise _fail(where, "tree_op_s", f"must be a finite number of seconds >= 0, got {tree_op_s!r}")
    return Profile(path=where, hardware=dict(hw), software=dict(sw), operators=fits,
                   runtime=_runtime(where, "runtime", {k: v for k, v in runtime.items() if k != "loops"},
                                    RUNTIME_COSTS),
                   runtime_loops={shape: _runtime(where, f"runtime.loops.{shape}", entry, LOOP_COSTS)
                                  for shape, entry in loops.items()},
                   tree_op_s=None if tree_op_s is None else float(tree_op_s))


def _runtime(where: str, fp: str, entry: Any, allowed: Any) -> dict[str, float]:
    if not isinstance(entry, dict):
        raise _fail(where, fp, f"must be an object with keys from {list(allowed)}")
    out = {}
    for key, v in entry.items():
        if key not in allowed:
            raise _fail(where, f"{fp}.{key}", f"unknown key; allowed: {list(allowed)}")
        low = runtime_bound(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < low:
            raise _fail(where, f"{fp}.{key}", f"must be a finite number of seconds >= {low:g}, got {v!r}")
        out[key] = float(v)
    return out


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file; errors name the file and the field."""
    p = Path(path)
    if not p.exists():
        raise ProfileError(f"sim.profile: profile file {p} does not exist (write one with calibrate.py, "
                           f"or set sim=analytic for the roofline prior)")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ProfileError(f"{p}: not valid JSON ({e})") from e
    return parse_profile(data, where=str(p))


def profile_to_dict(profile: Profile) -> dict[str, Any]:
    """The on-disk form of `profile` (what calibrate writes)."""
    ops: dict[str, Any] = {}
    for name, fit in profile.operators.items():
        names = OPERATOR_FORMS[name][0]
        entry: dict[str, Any] = {"coefficients": dict(zip(names, fit.coefficients)), "fit_error": fit.fit_error}
        if fit.by_tp:
            entry["by_tp"] = {str(tp): {"coefficients": dict(zip(names, c))} for tp, c in sorted(fit.by_tp.items())}
        if fit.measured:
            entry["measured"] = {f"{name}:{k}x{n}": [list(p) for p in pts]
                                 for (name, k, n), pts in sorted(fit.measured.items())}
        ops[name] = entry
    out = {"version": PROFILE_VERSION, "hardware": profile.hardware, "software": profile.software, "operators": ops}
    if profile.runtime or profile.runtime_loops:
        out["runtime"] = dict(profile.runtime)
        if profile.runtime_loops:
            out["runtime"]["loops"] = {shape: dict(entry) for shape, entry in profile.runtime_loops.items()}
    if profile.tree_op_s is not None:
        out["tree_op_s"] = profile.tree_op_s
    return out


def write_profile(path: str | Path, profile: Profile) -> None:
    """Write `profile` atomically (after re-validating its dict form)."""
    from conf.rundir import atomic_write_json

    data = profile_to_dict(profile)
    parse_profile(data, where=str(path))
    atomic_write_json(Path(path), data)
