"""The profile's `runtime` block: fitted from runtime run dirs (simulator/runtime_fit.py), read by the profile
loader, applied by build_costs, left out of validation; and the serial draft's refill-then-d order."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conf.trace import TRACE_FILE, TraceRecord, write_traces
from simulator.cost_model import PRIOR_TREE_OP_S
from simulator.profile import Profile, ProfileError, load_profile, parse_profile, write_profile
from simulator.runtime_fit import fit_runtime_costs
from simulator.simulation import Simulation, build_costs, simulate
from tests.simulator.conftest import cfg
from tests.simulator.conftest import span_record as _span

BASE = ("model=llama3-8b_llama3.2-1b", "parallel=1x1", "kernels=triton", "sim=analytic", "workload.num_requests=1",
        "workload.prompt_tokens=512", "workload.max_new_tokens=64", "trace.chrome=false")
PRIOR = Profile("prior", {"gpu": "h200"}, {}, {})  # no operator fits: the analytic prior everywhere


def _recorded_run(tmp_path, mode: str = "async_tree"):
    from simulator.main import run as run_sim

    config = cfg(*BASE, f"spec={mode}")
    run_sim(config, tmp_path / mode, verbose=False)
    return config, tmp_path / mode


def test_fit_recovers_known_host_costs(tmp_path):
    """Spans = the operator model's step time + known host costs: the fit returns those costs; TP peers and
    iteration 0 are ignored; the receive host cost is the low percentile, not the waits."""
    config, run_dir = _recorded_run(tmp_path)
    costs = build_costs(config, profile=PRIOR)
    recs = []
    for it in range(1, 101):
        ctx = 600 + it
        recs.append(_span("step.verify", "target", 0, it, costs.target.forward_s(8, ctx + 8) + 1.0e-3, 8, ctx))
        recs.append(_span("step.expand", "draft", 1, it, costs.draft.forward_s(8, ctx + 8) + 2.0e-4, 8, ctx))
        recs += [_span("step.reroot", "draft", 1, it, 3.0e-4), _span("step.select", "draft", 1, it, 2.0e-5),
                 _span("comm.send", "target", 0, it, 1.0e-4), _span("comm.send", "draft", 1, it, 1.5e-4),
                 _span("comm.recv", "target", 0, it, 4.0e-3),  # the target always waits
                 _span("comm.recv", "draft", 1, it, 5.0e-5 if it <= 20 else 3.0e-3),  # waits 80% of rounds
                 _span("step.keep", "target", 0, it, 2.0e-4 if it % 4 == 0 else 1.0e-5),  # 1 in 4 moves KV
                 _span("step.compact", "draft", 1, it, 1.5e-4, deferred=True),
                 _span("step.compact", "draft", 1, it, 9.0e-4, deferred=False)]  # before a refill: not fitted
        recs.append(_span("step.verify", "target", 2, it, 1.0))  # a TP peer: ignored
    recs += [_span("step.verify", "target", 0, 0, 1.0), _span("step.expand", "draft", 1, 0, 1.0, 8, 600)]
    write_traces(run_dir / TRACE_FILE, recs)
    fitted, report = fit_runtime_costs([run_dir], PRIOR)
    assert fitted["step_extra_s"] == pytest.approx(1.0e-3, rel=1e-6)
    assert fitted["expand_extra_s"] == pytest.approx(2.0e-4, rel=1e-6)
    assert fitted["verify_message_s"] == pytest.approx(1.0e-4 + 5.0e-5, rel=1e-6)
    assert fitted["draft_round_s"] == pytest.approx(3.0e-4 + 2.0e-5 + 1.5e-4 + 5.0e-5, rel=1e-6)
    assert report["recv_host_s"] == pytest.approx(5.0e-5) and report["runs"] == [str(run_dir)]
    assert fitted["keep_s"] == pytest.approx((25 * 2.0e-4 + 75 * 1.0e-5) / 100, rel=1e-6)  # a mean: no-ops count
    assert fitted["compact_s"] == pytest.approx(1.5e-4, rel=1e-6)


def test_draft_round_is_measured_whole_when_spans_lie_on_a_timeline(tmp_path):
    """With real start times, draft_round_s is the draft leader's time from taking a verified path to having sent
    the next proposal, less the forwards in between (a refill here), plus the receive host cost: the loop's host
    work between the spans counts (0.1 ms here), which the sum of the span medians misses."""
    config, run_dir = _recorded_run(tmp_path)
    recs, t = [], 1.0

    def span(name, group, rank, it, start, dur, **kw):
        rec = _span(name, group, rank, it, dur, **kw)
        recs.append(dataclasses.replace(rec, start_s=start))
        return start + dur

    for it in range(1, 41):
        end = span("comm.recv", "draft", 1, it, t, 5.0e-5)  # the verified path arrives (did not wait)
        end = span("step.reroot", "draft", 1, it, end + 1.0e-4, 3.0e-4)  # 0.1 ms of host work before it
        if it % 4 == 0:  # a miss: one refill forward before the selection
            end = span("step.expand", "draft", 1, it, end, 1.3e-3, tokens=8, ctx=600)
        end = span("step.select", "draft", 1, it, end, 2.0e-5)
        end = span("comm.send", "draft", 1, it, end, 1.5e-5)
        span("comm.send", "target", 0, it, end + 5.0e-3, 1.0e-4)
        t = end + 6.0e-3
    write_traces(run_dir / TRACE_FILE, recs)
    fitted, report = fit_runtime_costs([run_dir], PRIOR)
    assert report["per_run"][0]["draft_round_gap_s"] == pytest.approx(1.0e-4 + 3.0e-4 + 2.0e-5 + 1.5e-5)
    assert fitted["draft_round_s"] == pytest.approx(1.0e-4 + 3.0e-4 + 2.0e-5 + 1.5e-5 + 5.0e-5, rel=1e-6)


def test_fit_needs_runs_and_traces(tmp_path):
    with pytest.raises(ValueError, match="runs"):
        fit_runtime_costs([], PRIOR)
    _, run_dir = _recorded_run(tmp_path, "autoregressive")
    (run_dir / TRACE_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=TRACE_FILE):
        fit_runtime_costs([run_dir], PRIOR)


def test_a_corrupt_extra_names_the_trace_file(tmp_path):
    """Trace `extra` is read as calibrate.py reads it (TraceRecord.extra_fields): a JSON object or an error."""
    _, run_dir = _recorded_run(tmp_path, "autoregressive")
    path = run_dir / TRACE_FILE
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    for rec in recs:
        if rec["name"] == "step.verify":
            rec["extra"] = "[1, 2]"
    path.write_text("".join(json.dumps(rec) + "\n" for rec in recs))
    with pytest.raises(ValueError, match=rf"{TRACE_FILE}: step.verify: extra must be a JSON object, got list"):
        fit_runtime_costs([run_dir], PRIOR)


def test_runtime_block_round_trips_and_bad_values_name_the_field(tmp_path):
    prof = Profile("p", {"gpu": "h200"}, {}, load_profile("profiles/h200.json").operators,
                   {"step_extra_s": 1e-3, "draft_round_s": 2e-3})
    write_profile(tmp_path / "p.json", prof)
    assert load_profile(tmp_path / "p.json").runtime == {"step_extra_s": 1e-3, "draft_round_s": 2e-3}
    data = json.loads((tmp_path / "p.json").read_text())
    # the verify's correction may be negative (>= -1 ms): a fused graph step beats its profiled operators' sum
    assert parse_profile({**data, "runtime": {"step_extra_s": -5e-4}}, "p.json").runtime == {"step_extra_s": -5e-4}
    for bad, field in (({"step_extra": 1.0}, "runtime.step_extra"), ({"step_extra_s": -1.0}, "runtime.step_extra_s"),
                       ({"ar_step_extra_s": -0.01}, "runtime.ar_step_extra_s"),
                       ([], "runtime")):
        with pytest.raises(ProfileError, match=field):
            parse_profile({**data, "runtime": bad}, "p.json")


@pytest.mark.parametrize("mode", ["autoregressive", "async_tree"])
def test_runtime_costs_enter_the_simulated_steps(mode):
    config = cfg(*BASE, f"spec={mode}")
    host = {"step_extra_s": 1.0e-3, "expand_extra_s": 2.0e-4, "verify_message_s": 3.0e-4, "draft_round_s": 4.0e-4}
    plain, fitted = build_costs(config, profile=PRIOR), build_costs(config, profile=Profile(
        "p", {"gpu": "h200"}, {}, {}, host))
    assert fitted.target.forward_s(8, 700) - plain.target.forward_s(8, 700) == pytest.approx(1.0e-3)
    if mode == "autoregressive":
        assert fitted.draft is None and fitted.verify_host_s == 0.0
        t0 = Simulation(config, plain).run().tally.wall_s
        t1 = Simulation(config, fitted).run().tally.wall_s
        # every generated token is one target forward, plus one prefill forward
        assert t1 - t0 == pytest.approx(1.0e-3 * (config.workload.max_new_tokens + 1), rel=1e-6)
    else:
        assert fitted.draft.forward_s(8, 700) - plain.draft.forward_s(8, 700) == pytest.approx(2.0e-4)
        assert (fitted.verify_host_s, fitted.tree_op_s) == (3.0e-4, 4.0e-4)
        assert plain.tree_op_s == PRIOR_TREE_OP_S  # the profile has no tree_op_s of its own


def test_chained_autoregressive_steps_take_their_own_host_cost(tmp_path):
    """Greedy AR with CUDA graphs on one GPU is chained in the runtime (step i + 1 queued before token i is read):
    its steps carry `ar_step_extra_s` (0 when absent), not the verify's `step_extra_s`; a TP > 1 target's steps
    carry `tp_step_extra_s` (else `step_extra_s`), its autoregressive steps `tp_ar_step_extra_s` where fitted; the
    fit keeps the four apart. A TP-2 or graph-less AR target is not chained."""
    host = {"step_extra_s": 1.0e-3, "ar_step_extra_s": 5.0e-5}
    fitted = Profile("p", {"gpu": "h200"}, {}, {}, host)
    chained = cfg(*BASE, "spec=autoregressive", "kernels=graphs")
    plain = build_costs(chained, profile=PRIOR)
    assert build_costs(chained, profile=fitted).target.forward_s(1, 700) - plain.target.forward_s(1, 700) == \
        pytest.approx(5.0e-5)
    absent = Profile("p", {"gpu": "h200"}, {}, {}, {"step_extra_s": 1.0e-3})
    assert build_costs(chained, profile=absent).target.forward_s(1, 700) == pytest.approx(
        plain.target.forward_s(1, 700))
    tp2 = cfg(*BASE, "spec=autoregressive", "kernels=graphs", "parallel=2x0")
    for other in (cfg(*BASE, "spec=autoregressive"), tp2):
        base = build_costs(other, profile=PRIOR).target.forward_s(1, 700)
        assert build_costs(other, profile=fitted).target.forward_s(1, 700) - base == pytest.approx(1.0e-3)
    # a TP > 1 target takes tp_step_extra_s where the profile has it
    with_tp = Profile("p", {"gpu": "h200"}, {}, {}, {**host, "tp_step_extra_s": 3.0e-4})
    base = build_costs(tp2, profile=PRIOR).target.forward_s(1, 700)
    assert build_costs(tp2, profile=with_tp).target.forward_s(1, 700) - base == pytest.approx(3.0e-4)
    assert build_costs(cfg(*BASE, "spec=autoregressive"), profile=with_tp).target.forward_s(1, 700) - \
        build_costs(cfg(*BASE, "spec=autoregressive"), profile=PRIOR).target.forward_s(1, 700) == pytest.approx(1e-3)

    from simulator.main import run as run_sim

    run_sim(chained, tmp_path / "ar", verbose=False)
    costs = build_costs(chained, profile=PRIOR)
    def ar_spans(extra_s: float, **mark) -> list[TraceRecord]:
        return [_span("step.verify", "target", 0, it, costs.target.forward_s(1, 600 + it + 1) + extra_s, 1,
                      600 + it, **mark) for it in range(1, 60)]

    write_traces(tmp_path / "ar" / TRACE_FILE, ar_spans(4.0e-5, chained=True))
    got, _ = fit_runtime_costs([tmp_path / "ar"], PRIOR)
    assert got["ar_step_extra_s"] == pytest.approx(4.0e-5, rel=1e-6) and "step_extra_s" not in got
    # the runtime's mark decides, not the config: an older unchained run of the same config is a plain step
    write_traces(tmp_path / "ar" / TRACE_FILE, ar_spans(4.0e-5))
    got, _ = fit_runtime_costs([tmp_path / "ar"], PRIOR)
    assert got["step_extra_s"] == pytest.approx(4.0e-5, rel=1e-6) and "ar_step_extra_s" not in got
    # a chained step faster than the operator model keeps its negative correction (down to -1 ms)
    for extra_s, want in ((-2.8e-4, -2.8e-4), (-3.0e-3, -1.0e-3)):
        write_traces(tmp_path / "ar" / TRACE_FILE, ar_spans(extra_s, chained=True))
        got, _ = fit_runtime_costs([tmp_path / "ar"], PRIOR)
        assert got["ar_step_extra_s"] == pytest.approx(want, rel=1e-6)
    negative = Profile("p", {"gpu": "h200"}, {}, {}, {"ar_step_extra_s": -2.8e-4})
    assert build_costs(chained, profile=negative).target.forward_s(1, 700) - plain.target.forward_s(1, 700) == \
        pytest.approx(-2.8e-4)
    write_traces(tmp_path / "ar" / TRACE_FILE, ar_spans(4.0e-5, chained=True))

    run_sim(tp2, tmp_path / "tp2", verbose=False)
    costs = build_costs(tp2, profile=PRIOR)
    write_traces(tmp_path / "tp2" / TRACE_FILE, [
        _span("step.verify", "target", 0, it, costs.target.forward_s(1, 600 + it + 1) + 6.0e-4, 1, 600 + it)
        for it in range(1, 60)])
    got, _ = fit_runtime_costs([tmp_path / "tp2", tmp_path / "ar"], PRIOR)  # ar: chained spans again
    # a TP > 1 autoregressive run (not chained: each token read back and broadcast) fits its own term
    assert got["tp_ar_step_extra_s"] == pytest.approx(6.0e-4, rel=1e-6) and "tp_step_extra_s" not in got
    assert got["ar_step_extra_s"] == pytest.approx(4.0e-5, rel=1e-6) and "step_extra_s" not in got
    # ... and a TP > 1 draft-mode run the verify's
    tp2_chain = cfg(*BASE, "spec=chain", "kernels=graphs", "parallel=2x1")
    run_sim(tp2_chain, tmp_path / "tp2_chain", verbose=False)
    costs = build_costs(tp2_chain, profile=PRIOR)
    write_traces(tmp_path / "tp2_chain" / TRACE_FILE, [
        _span("step.verify", "target", 0, it, costs.target.forward_s(5, 600 + it + 5) + 3.0e-4, 5, 600 + it)
        for it in range(1, 60)])
    got, _ = fit_runtime_costs([tmp_path / "tp2", tmp_path / "tp2_chain"], PRIOR)
    assert got["tp_ar_step_extra_s"] == pytest.approx(6.0e-4, rel=1e-6)
    assert got["tp_step_extra_s"] == pytest.approx(3.0e-4, rel=1e-6)
    # priced apart: a TP > 1 autoregressive step takes tp_ar_step_extra_s, a TP > 1 verify tp_step_extra_s
    both = Profile("p", {"gpu": "h200"}, {}, {}, {**host, "tp_step_extra_s": 3.0e-4, "tp_ar_step_extra_s": 7.0e-4})
    for config, want in ((tp2, 7.0e-4), (tp2_chain, 3.0e-4)):
        base = build_costs(config, profile=PRIOR).target.forward_s(1, 700)
        assert build_costs(config, profile=both).target.forward_s(1, 700) - base == pytest.approx(want)


def test_serial_draft_refills_then_expands_d_more():
    """As the runtime's Engine._propose: after a miss (acceptance 0) the empty tree is refilled to bs nodes,
    then expanded d more times. bs 16, w 4, topk 8: the root (9 nodes), then 4 leaves (41 >= 16): 2 refill
    forwards, + d = 2: 4 forwards per round (the old order, d then refill, ran 2)."""
    config = cfg(*BASE, "spec=serial_tree", "spec.bs=16", "spec.w=4", "spec.d=2", "acceptance.scale=0.0")
    sim = Simulation(config, build_costs(config)).run()
    rounds = [e for e in sim.events if e.name == "step.expand" and e.iteration >= 1]
    assert rounds and all(e.tokens == 4 * 4 for e in rounds)  # tokens = forwards x w


def test_expand_cost_line_in_w():
    """The expansion's host cost grows with its w leaves: a + b * w through the runs; b >= 0."""
    from simulator.runtime_fit import _line_in_w

    a, b = _line_in_w([(1, 2.0e-4), (8, 5.5e-4), (4, 3.5e-4)])
    assert b == pytest.approx(5.0e-5, rel=1e-6) and a == pytest.approx(1.5e-4, rel=1e-6)
    assert _line_in_w([(8, 3e-4), (8, 5e-4)]) == (pytest.approx(4e-4), 0.0)  # one distinct w
    assert _line_in_w([(1, 6e-4), (8, 2e-4)]) == (pytest.approx(4e-4), 0.0)  # falling: no slope
    assert _line_in_w([]) == (None, None)


def test_replay_belief_uniform_grows_breadth_first():
    """acceptance.replay_belief=uniform: every rank weighs alike, so the tree grows level by level; the
    geometric belief goes deep along rank 0 first. topk 4, w 2, three forwards: the root, 2 children, then
    the other 2 children (uniform) or a grandchild first (geometric)."""
    from policy.acceptance import ReplayAcceptance
    from simulator.tree import TreeStates

    uni = ReplayAcceptance([(0, False)], beyond=4, belief="uniform").belief(4)
    geo = ReplayAcceptance([(0, False)], beyond=4).belief(4)
    for belief, deepest in ((uni, 1), (geo, 2)):
        trees = TreeStates(belief, 4, 2, 64)
        sid, n = trees.expand(0, 3)
        assert n == 3 and max(len(p) for p in trees.paths(sid)) == deepest
    with pytest.raises(Exception, match="acceptance.replay_belief"):
        cfg(*BASE, "acceptance.replay_belief=flat")


def test_host_costs_stay_out_of_prefill_rows_and_verify_time():
    """The per-leaf host cost is tree bookkeeping: not charged to a prompt prefill; the verify's message host
    time delays the path but is not verify time (the runtime's step.verify span excludes sends)."""
    config = cfg(*BASE, "spec=async_tree")
    host = {"expand_extra_s": 1.0e-4, "expand_extra_per_row_s": 5.0e-5, "verify_message_s": 6.0e-4}
    plain, fitted = build_costs(config, profile=PRIOR), build_costs(config, profile=Profile(
        "p", {"gpu": "h200"}, {}, {}, host))
    assert fitted.draft.prefill_s(511) - plain.draft.prefill_s(511) == pytest.approx(1.0e-4)
    assert fitted.draft.forward_s(8, 700) - plain.draft.forward_s(8, 700) == pytest.approx(1.0e-4 + 8 * 5.0e-5)
    a, b = (Simulation(config, c, d=2).run() for c in (plain, fitted))
    assert b.tally.verify_s / b.tally.verifies == pytest.approx(a.tally.verify_s / a.tally.verifies, rel=0.02)
    assert b.tally.wall_s > a.tally.wall_s


def test_serial_d_rule_runtime_runs_the_runtimes_serial_depth_tuner():
    """serial_tree d=auto under sim.d_rule=runtime: the runtime's SerialDepthTuner picks each round's d on simulated
    time: the first SKIP rounds at the breadth rule, then the climb's candidates (each SETTLE + TRIAL rounds), and the
    run settles on the best measured one."""
    from policy.depth_tuner import SerialDepthTuner, breadth_d

    config = cfg(*BASE, "spec=serial_tree", "spec.bs=16", "spec.w=4", "spec.d=auto", "sim.d_rule=runtime",
                 "acceptance=strong", "workload.max_new_tokens=1024")
    sim = simulate(config)
    tuner = sim.tuner
    assert isinstance(tuner, SerialDepthTuner) and tuner.chosen is not None and sim.d_used == tuner.chosen
    assert tuner.chosen == max(tuner.climb.rates, key=tuner.climb.rates.get) and len(tuner.climb.rates) >= 2
    d0 = breadth_d(16, 4)  # the climb starts at the breadth rule and measures a contiguous run of d's around it
    assert tuner.d0 == d0 and sorted(tuner.climb.rates) == list(range(min(tuner.climb.rates),
                                                                      max(tuner.climb.rates) + 1))
    assert min(tuner.climb.rates) <= d0 <= max(tuner.climb.rates)


def test_d_rule_runtime_runs_the_runtimes_depth_tuner():
    """sim.d_rule=runtime: the runtime's DepthTuner picks each round's d on simulated time, so the first
    SKIP + WARMUP rounds overlap one expansion, the trials try r and r + 1, and the run settles on one d."""
    from policy.depth_tuner import DepthTuner

    config = cfg(*BASE, "spec=async_tree", "spec.d=auto", "sim.d_rule=runtime", "workload.max_new_tokens=256")
    sim = simulate(config)
    assert sim.tuner is not None and sim.tuner.chosen is not None and sim.d_used == sim.tuner.chosen
    overlapped = [e.tokens // sim.w for e in sim.events if e.name == "step.expand" and e.iteration >= 0][1::2]
    warm = DepthTuner.SKIP + DepthTuner.WARMUP
    assert overlapped[:warm] == [1] * warm and overlapped[-1] == sim.tuner.chosen
    with pytest.raises(Exception, match="sim.d_rule"):
        cfg(*BASE, "sim.d_rule=tuner")


def test_a_tp2_target_verify_carries_its_verdict_broadcast():
    """runtime/engine.py _verify: a TP > 1 target's leader broadcasts each verdict to its group inside the
    verify span (0.18 ms per step measured in the H200 TP-2 runs). The simulator charges one leader-channel
    message of the verified path's size per decode step, and none after a prefill or at TP 1."""
    from simulator.interconnect import message_bytes
    from simulator.simulation import build_costs, proposal_nodes

    tp1 = build_costs(cfg(*BASE, "spec=autoregressive", "parallel=1x0"))
    tp2 = build_costs(cfg(*BASE, "spec=autoregressive", "parallel=2x0"))
    assert tp1.target.broadcast_s == 0.0
    config = cfg(*BASE, "spec=autoregressive", "parallel=2x0")
    expected = tp2.target.ops.message_s(message_bytes(proposal_nodes(config)), 2)
    assert tp2.target.broadcast_s == pytest.approx(expected) and expected > 0
    without = tp2.target.forward_s(1, 512) - tp2.target.broadcast_s
    tp2.target.broadcast_s = 0.0
    assert tp2.target.forward_s(1, 512) == pytest.approx(without)
    prefill = tp2.target.prefill_s(64)
    tp2.target.broadcast_s = expected
    assert tp2.target.prefill_s(64) == pytest.approx(prefill)  # no broadcast after a prefill


def test_keep_is_charged_after_the_send_unless_colocated():
    """keep_s (the target's KV keep): with a draft group it follows the send of the verified path, so the draft's
    round hides it; colocated, the runtime keeps before the draft re-roots, so every verify pays it in full."""
    def wall(config, keep_s: float) -> tuple[float, int]:
        prof = Profile("p", {"gpu": "h200"}, {}, {}, {"keep_s": keep_s, "draft_round_s": 2.0e-3})
        tally = Simulation(config, build_costs(config, profile=prof)).run().tally
        return tally.wall_s, tally.verifies

    colocated = cfg(*BASE, "spec=serial_tree", "parallel=1x0")
    (w0, n0), (w1, n1) = wall(colocated, 0.0), wall(colocated, 1.0e-3)
    assert n0 == n1 and w1 - w0 == pytest.approx(1.0e-3 * n0, rel=1e-6)
    split = cfg(*BASE, "spec=serial_tree")  # 1 + 1 GPUs: the draft's 2 ms round covers each 1 ms keep
    (w0, n0), (w1, n1) = wall(split, 0.0), wall(split, 1.0e-3)
    assert n0 == n1 > 1 and w1 - w0 == pytest.approx(1.0e-3, rel=1e-6)  # only the last one, which nothing follows


def test_deferred_compaction_takes_the_fitted_cost_after_the_send():
    """compact_s replaces the compaction operator for the compactions that follow the proposal's send (no
    refill): the draft is busier by it, while the proposal leaves before it."""
    config = cfg(*BASE, "spec=async_tree", "spec.d=1")
    base = {"draft_round_s": 1.0e-4}
    runs = {}
    for c in (0.0, 5.0e-4):
        prof = Profile("p", {"gpu": "h200"}, {}, {}, {**base, "compact_s": c})
        sim = Simulation(config, build_costs(config, profile=prof)).run()
        runs[c] = sim
    lo, hi = runs[0.0].tally, runs[5.0e-4].tally
    assert lo.reroots == hi.reroots > 0
    deferred = (hi.draft_busy_s - lo.draft_busy_s) / 5.0e-4
    assert 0 < deferred <= hi.reroots  # only the re-roots that needed no refill pay it


def test_negative_runtime_correction_is_capped_at_a_share_of_the_step():
    """A fitted negative correction (a fused 8B step beating its operators' sum) never removes more than
    NEGATIVE_EXTRA_CAP of a decode step (a small model's keeps >= 75% of its operator time), and none of a prefill;
    a TP > 1 target without its own fit does not take it."""
    from simulator.cost_model import NEGATIVE_EXTRA_CAP

    config = cfg(*BASE, "spec=autoregressive", "model=smollm2")
    plain = build_costs(config, profile=PRIOR).target
    mild = build_costs(config, profile=Profile("p", {"gpu": "h200"}, {}, {}, {"step_extra_s": -1e-6})).target
    huge = build_costs(config, profile=Profile("p", {"gpu": "h200"}, {}, {}, {"step_extra_s": -1e-3})).target
    base = plain.forward_s(8, 500)
    assert base > 0 and NEGATIVE_EXTRA_CAP * base < 1e-3  # the 135M step: -1 ms would erase it
    assert mild.forward_s(8, 500) == pytest.approx(base - 1e-6)
    assert huge.forward_s(8, 500) == pytest.approx((1 - NEGATIVE_EXTRA_CAP) * base)
    assert huge.prefill_s(64) == pytest.approx(plain.prefill_s(64))  # an eager prefill keeps its operator time
    tp = cfg(*BASE, "spec=autoregressive", "parallel=2x0")
    fitted = build_costs(tp, profile=Profile("p", {"gpu": "h200"}, {}, {}, {"step_extra_s": -5e-4})).target
    assert fitted.forward_s(8, 500) == pytest.approx(build_costs(tp, profile=PRIOR).target.forward_s(8, 500))


def test_expand_host_cost_per_real_row_is_fitted_and_charged(tmp_path):
    """Spans that record their real rows: the fit finds the host cost per real row (a refill after a miss
    expands 1 row, overlapped expansions w), and the simulator charges it by the rows each forward expanded,
    so a tree that expands fewer real rows costs less host time at the same w."""
    config, run_dir = _recorded_run(tmp_path)
    costs = build_costs(config, profile=PRIOR)
    a, c = 1.0e-4, 1.0e-5
    recs = []
    for it in range(1, 61):
        ctx = 600 + it
        for rows in (1, 8, 8):  # a refill of the new root, then two overlapped expansions of w = 8 real rows
            recs.append(_span("step.expand", "draft", 1, it, costs.draft.forward_s(8, ctx + 8) + a + c * rows, 8,
                              ctx, phase="overlap", rows=rows))
        recs.append(_span("step.expand", "draft", 1, it, costs.draft.forward_s(8, ctx + 8) + a + 4 * c, 8, ctx,
                          rows=4) if it <= 3 else _span("step.select", "draft", 1, it, 1e-5))  # too few: left out
    write_traces(run_dir / TRACE_FILE, recs)
    fitted, report = fit_runtime_costs([run_dir], PRIOR)
    assert fitted["expand_extra_s"] == pytest.approx(a, rel=1e-6)
    assert fitted["expand_extra_per_real_row_s"] == pytest.approx(c, rel=1e-6)
    assert "expand_extra_per_row_s" not in fitted
    assert sorted(report["per_run"][0]["expand_rows_residual_s"]) == [1, 8]

    charged = build_costs(config, profile=Profile("p", {"gpu": "h200"}, {}, {}, fitted))
    assert charged.draft.forward_s(8, 700) - charged.draft.forward_s(8, 700, real_rows=1) == pytest.approx(7 * c)
    assert charged.draft.forward_s(8, 700, real_rows=8) == charged.draft.forward_s(8, 700)  # None: all rows real
    sim = Simulation(config, charged).run()
    flat = Simulation(config, build_costs(config, profile=Profile(
        "p", {"gpu": "h200"}, {}, {}, {"expand_extra_s": a, "expand_extra_per_row_s": c}))).run()
    # per real row, the refills of a few real rows cost less than the same c charged per row of w
    assert 0 < sim.tally.expand_s < flat.tally.expand_s


def test_refill_graph_spans_are_priced_at_one_row_and_a_negative_constant_survives(tmp_path):
    """With kernels.refill_graph a lone root's expansion span says tokens 1 (its step's rows): the fit prices it at
    one-row operators. The draft's fused graph step can beat its summed operators, as the target's does: a negative
    constant host part (here -0.1 ms, +10 us per real row) comes back signed, not clipped to 0."""
    config, run_dir = _recorded_run(tmp_path)
    costs = build_costs(config, profile=PRIOR)
    recs = []
    for it in range(1, 61):
        ctx = 600 + it
        recs.append(_span("step.expand", "draft", 1, it, costs.draft.forward_s(8, ctx + 8) - 1.0e-4 + 8 * 1.0e-5,
                          8, ctx, rows=8, phase="overlap"))
        if it % 3 == 0:  # a miss's refill: the one-row graph
            recs.append(_span("step.expand", "draft", 1, it, costs.draft.forward_s(1, ctx + 1) - 1.0e-4 + 1.0e-5,
                              1, ctx, rows=1, phase="refill"))
    write_traces(run_dir / TRACE_FILE, recs)
    fitted, report = fit_runtime_costs([run_dir], PRIOR)
    assert fitted["expand_extra_s"] == pytest.approx(-1.0e-4, abs=1e-9)
    assert fitted["expand_extra_per_real_row_s"] == pytest.approx(1.0e-5, abs=1e-10)
    assert report["signed"]["expand_extra_s"] == fitted["expand_extra_s"]


def test_the_receive_host_cost_comes_from_async_runs_only(tmp_path):
    """In chain and serial runs every receive waits for the peer's step: their low percentile is not host time. With
    no async run among the fit runs the receive host cost, verify_message_s and draft_round_s are left out (and the
    report says why); with one, its receives give the cost."""
    from simulator.main import run as run_sim

    chain_cfg = cfg(*BASE, "spec=chain", "spec.gamma=4")
    chain_dir = tmp_path / "chain" / "chain"
    run_sim(chain_cfg, chain_dir, verbose=False)
    recs = []
    for it in range(1, 41):
        recs += [_span("comm.send", "target", 0, it, 1.0e-5), _span("comm.send", "draft", 1, it, 1.0e-5),
                 _span("comm.recv", "target", 0, it, 4.2e-3), _span("comm.recv", "draft", 1, it, 4.4e-3),
                 _span("step.reroot", "draft", 1, it, 2e-5), _span("step.select", "draft", 1, it, 1e-5)]
    write_traces(chain_dir / TRACE_FILE, recs)
    fitted, report = fit_runtime_costs([chain_dir], PRIOR)
    assert report["recv_host_s"] is None and "recv_host_note" in report
    assert "verify_message_s" not in fitted and "draft_round_s" not in report["loops"]["chain"]["costs"]
    _, async_dir = _recorded_run(tmp_path / "async")
    write_traces(async_dir / TRACE_FILE, [_span("comm.recv", "draft", 1, it, 2e-5 if it % 2 else 3e-3)
                                          for it in range(1, 41)])
    fitted, report = fit_runtime_costs([chain_dir, async_dir], PRIOR)
    assert report["recv_host_s"] == pytest.approx(2e-5) and "recv_host_note" not in report
    assert report["loops"]["chain"]["costs"]["verify_message_s"] == pytest.approx(1e-5 + 2e-5)
