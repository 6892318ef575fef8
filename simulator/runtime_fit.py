"""Host costs of the runtime's own loop, fitted on measured runtime run dirs (the profile's `runtime` block).

The operator profile (calibration/profile_ops.py -> calibrate) times device work and isolated worker steps. A
decoding run also spends host time the operator traces never see: Python around each CUDA-graph replay,
the verdict's device-to-host copy, sending and taking messages, re-rooting the draft tree. Those costs are
fitted here from the spans a runtime run writes (`traces.jsonl`, conf/trace.py), as the numbers of
simulator/profile.py RUNTIME_COSTS:

    step_extra_s      median over target `step.verify` spans of  span - forward_s(tokens, ctx + tokens)
    ar_step_extra_s   the same over chained autoregressive runs (verify spans marked `chained`), whose spans
                      are the per-token time with the host off the GPU's path; kept when negative (down to
                      -1 ms: the operator model's step overhead holds host time that chaining hides)
    tp_step_extra_s   the same over draft-mode runs of a TP > 1 target (the other two: one-GPU targets)
    tp_ar_step_extra_s  the same over autoregressive runs of a TP > 1 target (not chained: each step's token is read
                      back and broadcast to the peers before the next step is launched)
    keep_s            mean target `step.keep` span (the KV keep after a verify, most moving nothing)
    compact_s         mean draft `step.compact` span of the deferred compactions (after the proposal's send)
    expand_extra_s    a + c * rows through the (run, real row count) medians of  span - forward_s(n, ctx + n),
      (+ _per_real_row_s) n the span's step rows (`tokens`: w, or 1 for kernels.refill_graph's one-row step), over
                      draft `step.expand` spans that record their real rows (`rows`: the host builds rows x topk
                      tree nodes; a refill after a miss expands 1 row; least squares, c >= 0, a signed: a graph
                      step can beat its summed operators);
      (+ _per_row_s)  for older runs without `rows`: a + b * w through the fit runs' medians (one distinct w:
                      b = 0)
    verify_message_s  target `comm.send` median + receive host cost
    draft_round_s     the draft leader's round, from taking a verified path to having sent the next proposal,
                      less the forwards in it (re-root, select, send and the loop's host work between those
                      spans: oracle and tuner bookkeeping), median + receive host cost; without such rounds,
                      `step.reroot` + `step.select` + `comm.send` medians + receive host cost

`forward_s` is the simulator's own step model built from the operator profile alone, so each residual is
exactly what the simulator misses. A receive span also contains waiting for the peer; the receive host cost
is estimated as the lowest 10th percentile of the async fit runs' receive spans (the rounds that did not wait; in
chain and serial runs every receive waits for the peer's step, so without an async run it is not estimated).
Each cost is the median over the fit runs of the per-run medians (runs without that span are skipped).

Loops. The colocated one-GPU loop (one Python loop drives the target and its draft: no messages) and chain drafting
on two groups (one-row draft steps, no tree selection) run other host code per step than the tree modes on two
groups: runs of a loop in simulator/profile.py LOOP_SHAPES (`loop_shape`) give that loop's own step, expansion
and round costs (the profile's `runtime.loops`), and the top-level ones come from the other runs. On the
954a1bf / 9f74ecf / 5c7897b runs the residual per chain expansion is ~0.05 ms on two groups and 0.02-0.07 ms
colocated, against 0.09-0.18 ms for tree expansions; a colocated verify 0.06-0.14 ms against 0.11-0.24 ms.

The runs fitted here must not be the runs a validation compares against (calibration/validate.py compare
--exclude names them). Leaders only: TP peers repeat the same steps.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conf.rundir import config_from_dict, read_run
from conf.trace import TRACE_FILE, TraceRecord, read_traces
from policy.predicates import loop_shape
from simulator.calibrate import median_or_none
from simulator.profile import LOOP_SHAPES, RUNTIME_COSTS, Profile, runtime_bound

SKIP_ITERATIONS = 1
"""Spans of iterations below this (prefill, first refill) are left out: they are not the steady loop."""
RECV_PERCENTILE = 10
MIN_SPANS_PER_ROWS = 5
"""A row count enters the per-real-row fit with at least this many expansion spans in a run."""


def leader_spans(records: Sequence[TraceRecord], skip: int = SKIP_ITERATIONS
                 ) -> dict[tuple[str, str], list[TraceRecord]]:
    """{(group, span name): the group leader's spans of iterations >= `skip`, by start time} (TP peers repeat the
    leader's steps)."""
    leaders: dict[str, int] = {}
    for r in records:
        if r.group:
            leaders[r.group] = min(leaders.get(r.group, r.rank), r.rank)
    out: dict[tuple[str, str], list[TraceRecord]] = defaultdict(list)
    for r in records:
        if r.group in leaders and r.rank == leaders[r.group] and r.iteration >= skip:
            out[(r.group, r.name)].append(r)
    for spans in out.values():
        spans.sort(key=lambda r: r.start_s)
    return out


def traced_run(run_dir: str | Path, profile: Profile) -> tuple[Any, Path, dict[tuple[str, str], list[TraceRecord]],
                                                              Any]:
    """(config, traces path, leader spans, costs) of a measured run dir, the costs from the profile's operators alone
    (no runtime block: what the runtime costs are fitted against)."""
    from simulator.simulation import build_costs

    run_dir = Path(run_dir)
    config = config_from_dict(read_run(run_dir)["config"])
    config.validate()
    path = run_dir / TRACE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no {TRACE_FILE}: a runtime run dir with traces is needed")
    costs = build_costs(config, profile=Profile(profile.path, profile.hardware, profile.software,
                                                profile.operators))  # operators only: no circularity
    return config, path, leader_spans(read_traces(path)), costs


def draft_span_group(config: Any) -> str:
    """The trace group whose leader records a run's draft spans: the target's when the draft is colocated (one
    process, parallel=NxM with M = 0), else the draft's."""
    return "target" if config.parallel.draft_gpus == 0 else "draft"


def run_components(run_dir: str | Path, profile: Profile) -> dict[str, Any]:
    """Per-run medians of the residuals and host spans of one measured run dir (see the module docstring)."""
    run_dir = Path(run_dir)
    config, path, spans, costs = traced_run(run_dir, profile)
    colocated = config.parallel.draft_gpus == 0
    width = 1 if config.spec.mode == "chain" else config.spec.w
    draft_group = draft_span_group(config)
    out: dict[str, Any] = {"run": run_dir.name, "mode": config.spec.mode, "w": width,
                           "loop": loop_shape(config)}
    verifies = spans.get(("target", "step.verify"), [])
    # the runtime's own mark (runs since d325190)
    chained = any(r.extra_fields(f"{path}: {r.name}").get("chained") for r in verifies)
    tp = config.parallel.target_gpus > 1
    key = ("ar_step_residual_s" if chained
           else "tp_ar_step_residual_s" if tp and config.spec.mode == "autoregressive"
           else "tp_step_residual_s" if tp else "step_residual_s")
    out[key] = median_or_none([r.duration_s - costs.target.forward_s(r.tokens, r.ctx + r.tokens) for r in verifies])
    keeps = [r.duration_s for r in spans.get(("target", "step.keep"), [])]
    out["keep_s"] = float(np.mean(keeps)) if keeps else None
    # (runs of 539cd1f have no `deferred` mark: every compact span there was deferred)
    compacts = [r.duration_s for r in spans.get((draft_group, "step.compact"), [])
                if r.extra_fields(f"{path}: {r.name}").get("deferred", True)]
    out["compact_s"] = float(np.mean(compacts)) if compacts else None
    if costs.draft is not None:
        expands = [r for r in spans.get((draft_group, "step.expand"), [])
                   if 0 < r.tokens <= width]  # one forward per span (the runtime's)
        residual = [r.duration_s - costs.draft.forward_s(r.tokens, r.ctx + r.tokens) for r in expands]
        out["expand_residual_s"] = median_or_none(residual)
        # spans that record their real rows (older runs' spans do not): median per row count
        by_rows: dict[int, list[float]] = defaultdict(list)
        for r, res in zip(expands, residual):
            real = r.extra_fields(f"{path}: {r.name}").get("rows")
            if real is not None:
                by_rows[int(real)].append(res)
        out["expand_rows_residual_s"] = {n: (float(np.median(v)), len(v)) for n, v in sorted(by_rows.items())
                                         if len(v) >= MIN_SPANS_PER_ROWS}
    if not colocated and costs.draft is not None:
        for group in ("target", "draft"):
            out[f"{group}_send_s"] = median_or_none([r.duration_s for r in spans.get((group, "comm.send"), [])])
            recv = [r.duration_s for r in spans.get((group, "comm.recv"), [])]
            out[f"{group}_recv_p{RECV_PERCENTILE}_s"] = float(np.percentile(recv, RECV_PERCENTILE)) if recv else None
        out["reroot_s"] = median_or_none([r.duration_s for r in spans.get(("draft", "step.reroot"), [])])
        out["select_s"] = median_or_none([r.duration_s for r in spans.get(("draft", "step.select"), [])])
        out["draft_round_gap_s"] = _round_gaps(spans)
    return out


def _round_gaps(spans: dict[tuple[str, str], list[TraceRecord]]) -> float | None:
    """Median over rounds of the draft leader's time from taking a verified path (its `comm.recv` ends) to having
    sent the next proposal (its `comm.send` ends), less the draft forwards in between (a refill's, a serial mode's):
    the re-root, the selection, the send and the loop's host work between spans (oracle and tuner bookkeeping)."""
    recvs, sends = spans.get(("draft", "comm.recv"), []), spans.get(("draft", "comm.send"), [])
    expands = spans.get(("draft", "step.expand"), [])
    gaps, j = [], 0
    for recv in recvs:
        t0 = recv.start_s + recv.duration_s
        while j < len(sends) and sends[j].start_s < t0:
            j += 1
        if j == len(sends):
            break
        t1 = sends[j].start_s + sends[j].duration_s
        forwards = sum(e.duration_s for e in expands if e.start_s >= t0 and e.start_s + e.duration_s <= t1)
        gaps.append(t1 - t0 - forwards)
    return median_or_none(gaps)


def _pooled(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    return median_or_none([r[key] for r in rows if r.get(key) is not None])


def _rows_points(rows: Sequence[dict[str, Any]]) -> list[tuple[int, float]]:
    """(real row count, residual median) of every run's expansion spans that record their rows."""
    return [(n, res) for r in rows for n, (res, _) in (r.get("expand_rows_residual_s") or {}).items()]


def _line_in_w(points: Sequence[tuple[int, float]], signed: bool = False) -> tuple[float | None, float | None]:
    """(a, b) of residual = a + b * x (x: w, or real rows) by least squares; b >= 0; one distinct x: (median, 0).
    `signed`: a may be negative (a fused graph step beating its summed operators), else the line goes through the
    origin when a < 0."""
    if not points:
        return None, None
    ws = np.array([p[0] for p in points], dtype=float)
    ys = np.array([p[1] for p in points], dtype=float)
    if len(set(ws)) < 2:
        return float(np.median(ys)), 0.0
    b, a = np.polyfit(ws, ys, 1)
    if b < 0:
        return float(np.median(ys)), 0.0
    if a < 0 and not signed:  # through the origin instead: both coefficients stay >= 0 without shifting the line up
        return 0.0, max(0.0, float(ws @ ys / (ws @ ws)))
    return float(a), float(b)


def _loop_costs(rows: Sequence[dict[str, Any]], recv: float | None) -> dict[str, float | None]:
    """The LOOP_COSTS (signed) of the runs `rows` of one runtime loop; `recv`: the receive host cost."""
    raw: dict[str, float | None] = {"step_extra_s": _pooled(rows, "step_residual_s")}
    by_rows = _rows_points(rows)
    if by_rows:  # host part per real row, over (run, row count) medians (one row count, e.g. chain: their median)
        # signed constant: the draft's graph step can beat its summed operators (a lone root's one-row graph does)
        raw["expand_extra_s"], raw["expand_extra_per_real_row_s"] = _line_in_w(by_rows, signed=True)
    else:  # older runs: per row of w, over the runs' medians
        raw["expand_extra_s"], raw["expand_extra_per_row_s"] = _line_in_w(
            [(r["w"], r["expand_residual_s"]) for r in rows if r.get("expand_residual_s") is not None])
    t_send, d_send = _pooled(rows, "target_send_s"), _pooled(rows, "draft_send_s")
    reroot, select = _pooled(rows, "reroot_s"), _pooled(rows, "select_s")
    if t_send is not None and recv is not None:
        raw["verify_message_s"] = t_send + recv
    gap = _pooled(rows, "draft_round_gap_s")
    if gap is not None and recv is not None:  # the round measured whole (spans and the host work between them)
        raw["draft_round_s"] = gap + recv
    elif None not in (reroot, select, d_send, recv):
        raw["draft_round_s"] = reroot + select + d_send + recv
    return raw


def _bounded(raw: dict[str, float | None]) -> dict[str, float]:
    """The measured costs of `raw`, each kept within its bound (runtime_bound)."""
    return {k: max(runtime_bound(k), v) for k, v in raw.items() if v is not None}


def fit_runtime_costs(run_dirs: Sequence[str | Path], profile: Profile) -> tuple[dict[str, float], dict[str, Any]]:
    """(RUNTIME_COSTS seconds, report) from measured runtime run dirs and the operator profile.

    A cost no fit run measures is left out (the simulator then keeps its `sim` knob for it); negative
    medians (the operator model over-predicts) clip to 0 (step_extra_s, ar_step_extra_s, expand_extra_s: to -1 ms,
    SIGNED_RUNTIME_COSTS: the fused graph step with skinny GEMMs and PDL beats the sum of its profiled operators), and
    the report keeps the signed value.

    Runs of a loop in LOOP_SHAPES (`predicates.loop_shape`: colocated, chain) give that loop's LOOP_COSTS alone:
    `report["loops"][shape]["costs"]`, the profile's `runtime.loops` (calibrate.py writes them); the top-level
    LOOP_COSTS come from the other runs (tree modes on two groups). The autoregressive, TP > 1 and KV bookkeeping costs
    are pooled over all runs.
    """
    if not run_dirs:
        raise ValueError("runs: give at least one runtime run dir to fit the runtime costs on")
    every = [run_components(d, profile) for d in run_dirs]
    # only an async run's receives find their message already there: in chain / serial runs every receive waits for
    # the peer's step, and their low percentile is that step, not host time (a fit of chain runs alone gave 4.2 ms)
    recv_lows = [r[k] for r in every if r["mode"] == "async_tree"
                 for k in ("target_recv_p10_s", "draft_recv_p10_s") if r.get(k) is not None]
    recv = min(recv_lows) if recv_lows else None
    raw: dict[str, float | None] = {"ar_step_extra_s": _pooled(every, "ar_step_residual_s"),
                                    "tp_step_extra_s": _pooled(every, "tp_step_residual_s"),
                                    "tp_ar_step_extra_s": _pooled(every, "tp_ar_step_residual_s"),
                                    "keep_s": _pooled(every, "keep_s"), "compact_s": _pooled(every, "compact_s"),
                                    **_loop_costs([r for r in every if not r["loop"]], recv)}
    costs = _bounded(raw)
    assert set(costs) <= set(RUNTIME_COSTS)
    loops: dict[str, Any] = {}
    for shape in LOOP_SHAPES:
        rows = [r for r in every if r["loop"] == shape]
        if rows:
            signed = {k: v for k, v in _loop_costs(rows, recv).items() if v is not None}
            loops[shape] = {"runs": [r["run"] for r in rows], "signed": signed, "costs": _bounded(signed)}
    report = {"runs": [str(d) for d in run_dirs], "per_run": every, "signed": raw, "recv_host_s": recv,
              "loops": loops,
              **({} if recv is not None or not any(r.get("target_send_s") for r in every) else {
                  "recv_host_note": "no async_tree run among the fit runs with receive spans: the receive host cost "
                                    "is unknown, so verify_message_s and draft_round_s are left out"}),
              "method": "median over fit runs of per-run medians; receive host cost = lowest per-run "
                        f"p{RECV_PERCENTILE} of receive spans; a loop in LOOP_SHAPES from its own runs"}
    return costs, report


def loop_costs(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The profile's `runtime.loops` from a `fit_runtime_costs` report."""
    return {shape: dict(entry["costs"]) for shape, entry in report.get("loops", {}).items() if entry["costs"]}
