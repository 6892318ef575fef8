"""Simulation behaviour: determinism, isolation, conservation, closed forms, overlap limits."""

from __future__ import annotations

import json
import math

import pytest

from policy.acceptance import chain_accept_length
from simulator.metrics import metrics_of
from simulator.simulation import Simulation, build_costs, simulate
from simulator.tree import TreeStates
from tests.simulator.conftest import cfg, fixed_costs

SMALL = ("workload.num_requests=2", "workload.max_new_tokens=96", "workload.prompt_tokens=64")
MODES = {
    "autoregressive": ("spec=autoregressive",),
    "chain": ("spec=chain",),
    "serial_tree": ("spec=serial_tree", "spec.d=3"),
    "async_tree": ("spec=async_tree",),
}


def _metrics(sim: Simulation) -> dict:
    return metrics_of(sim.config, sim.tally, sim.d, "test")


def test_same_seed_gives_identical_metrics_and_event_log():
    config = cfg(*SMALL)
    a, b = simulate(config), simulate(config)
    assert _metrics(a) == _metrics(b)
    assert a.events == b.events and a.rows == b.rows
    assert len(a.events) > 100


def test_different_seed_changes_the_outcome():
    a = simulate(cfg(*SMALL))
    b = simulate(cfg(*SMALL, "seed=1"))
    assert [r.accepted for r in a.rows] != [r.accepted for r in b.rows]


def test_two_interleaved_simulations_do_not_interfere():
    c1, c2 = cfg(*SMALL), cfg(*SMALL, "spec=serial_tree", "seed=3", "parallel=4x4")
    alone1, alone2 = simulate(c1), simulate(c2)
    s1, s2 = Simulation(c1, build_costs(c1)), Simulation(c2, build_costs(c2))
    while s1.env.peek() < math.inf or s2.env.peek() < math.inf:  # alternate single events
        for s in (s1, s2):
            if s.env.peek() < math.inf:
                s.env.step()
    assert s1.rows == alone1.rows and s1.events == alone1.events
    assert s2.rows == alone2.rows and s2.events == alone2.events


@pytest.mark.parametrize("mode", list(MODES), ids=list(MODES))
def test_conservation_tokens_busy_time_and_timeline(mode):
    config = cfg(*SMALL, *MODES[mode])
    sim = simulate(config)
    m = _metrics(sim)
    expected = config.workload.num_requests * config.workload.max_new_tokens
    assert m["generated_tokens"] == expected
    # emitted is counted before the stop truncates each request's last verify (as in the runtime)
    overshoot = sum(r.emitted for r in sim.rows) - expected
    assert 0 <= overshoot < config.workload.num_requests * config.spec.bs
    for group, frac in m["busy_fraction"].items():
        assert frac is None or 0.0 < frac <= 1.0 + 1e-12, group
    # iteration rows tile the target's timeline after each prefill
    assert sum(r.end_s - r.start_s for r in sim.rows) + sim.tally.prefill_s == pytest.approx(m["wall_s"], rel=1e-9)
    assert m["mean_accept_len"] >= 1.0
    assert sum(m["accept_len_hist"].values()) == m["iterations"]


def test_autoregressive_matches_closed_form():
    config = cfg(*SMALL, "spec=autoregressive")
    sim = Simulation(config, fixed_costs(verify_s=5e-3)).run()
    assert _metrics(sim)["tokens_per_s"] == pytest.approx(1 / 5e-3, rel=5e-3)
    assert _metrics(sim)["mean_accept_len"] == 1.0


@pytest.mark.parametrize("acceptance,tokens_per_verify", [
    (("acceptance.positional=[[1.0]]",), 5),
    (("acceptance.positional=[[0.0]]",), 1),
    (("acceptance.kind=replay",), 3),
], ids=["always", "never", "replay-2"])
def test_chain_with_fixed_acceptance_matches_closed_form(acceptance, tokens_per_verify, tmp_path):
    extra = acceptance
    if "replay" in acceptance[0]:
        f = tmp_path / "replay.json"
        f.write_text(json.dumps([{"accepted": 2, "hit": False}]))
        extra = (*acceptance, f"acceptance.file={f}")
    n = 60 * tokens_per_verify
    config = cfg("spec=chain", "spec.gamma=4", "workload.num_requests=2", f"workload.max_new_tokens={n}", *extra)
    costs = fixed_costs(verify_s=1e-2, expand_s=1e-3, message_s=1e-4, tree_op_s=2e-5)
    m = _metrics(Simulation(config, costs).run())
    # one round: tree bookkeeping + gamma draft forwards + proposal + verify + verified path
    round_s = 2e-5 + 4 * 1e-3 + 1e-4 + 1e-2 + 1e-4
    assert m["mean_accept_len"] == tokens_per_verify
    assert m["tokens_per_s"] == pytest.approx(tokens_per_verify / round_s, rel=5e-3)


def test_chain_mean_accept_length_matches_closed_form():
    """Mean tokens per verify of a gamma=4 chain at a = 0.6 vs (1 - a^5) / (1 - a) = 2.3056.

    L takes k = 1..4 with prob a^(k-1)(1-a) and 5 with prob a^4, independently per verify (each verify
    consumes fresh per-position uniforms), so the sample mean of N verifies has sigma = sd(L) / sqrt(N);
    with ~17k verifies sigma ~ 0.01 and a correct simulator lands within 4 sigma except with prob ~6e-5.
    """
    a, gamma = 0.6, 4
    config = cfg("spec=chain", f"spec.gamma={gamma}", f"acceptance.positional=[[{a}]]",
                 "workload.num_requests=10", "workload.max_new_tokens=4000", "workload.prompt_tokens=32",
                 "workload.max_seq_len_tokens=4096")
    m = _metrics(Simulation(config, fixed_costs(), record_events=False).run())
    probs = {k: a ** (k - 1) * (1 - a) for k in range(1, gamma + 1)} | {gamma + 1: a**gamma}
    mean = sum(k * p for k, p in probs.items())
    sd = math.sqrt(sum((k - mean) ** 2 * p for k, p in probs.items()))
    assert mean == pytest.approx(chain_accept_length(a, gamma))
    sigma = sd / math.sqrt(m["iterations"])
    assert m["iterations"] > 15_000
    assert abs(m["mean_accept_len"] - mean) < 4 * sigma


def test_chain_with_depth_dependent_acceptance_matches_path_product():
    """Per-depth acceptance [0.9, 0.7, 0.5]: E[L] = 1 + .9 + .9*.7 + .9*.7*.5 (+ deeper rows reuse .5); 4 sigma."""
    config = cfg("spec=chain", "spec.gamma=3", "acceptance.positional=[[0.9],[0.7],[0.5]]",
                 "workload.num_requests=6", "workload.max_new_tokens=4000", "workload.prompt_tokens=32",
                 "workload.max_seq_len_tokens=4096")
    sim = Simulation(config, fixed_costs(), record_events=False).run()
    expected = 1 + 0.9 + 0.9 * 0.7 + 0.9 * 0.7 * 0.5
    assert sim.acceptance.chain_length(3) == pytest.approx(expected)
    m = _metrics(sim)
    assert abs(m["mean_accept_len"] - expected) < 4 * 1.2 / math.sqrt(m["iterations"])  # sd(L) < 1.2


def test_async_with_free_drafting_is_verify_bound():
    config = cfg(*SMALL, "spec=async_tree", "spec.d=6")
    t_verify = 1e-2
    sim = Simulation(config, fixed_costs(verify_s=t_verify, expand_s=1e-9)).run()
    m = _metrics(sim)
    assert m["iteration_time_s"] == pytest.approx(t_verify, rel=1e-4)
    assert m["tokens_per_s"] == pytest.approx(m["mean_accept_len"] / t_verify, rel=2e-2)  # last verify capped
    assert m["busy_fraction"]["target"] == pytest.approx(1.0, rel=1e-4)


def test_serial_iteration_is_verify_plus_draft_time():
    config = cfg(*SMALL, "spec=serial_tree", "spec.d=3")
    sim = Simulation(config, fixed_costs(verify_s=1e-2, expand_s=1e-3, message_s=5e-5, tree_op_s=2e-5)).run()
    checked = 0
    for prev, row in zip(sim.rows, sim.rows[1:]):
        if row.request != prev.request:
            continue  # first verify of a request: preceded by the draft's initial build
        cycle = row.end_s - row.start_s
        assert cycle == pytest.approx(row.verify_s + prev.expand_s + prev.reroot_s + row.message_s, rel=1e-9)
        checked += 1
    assert checked > 10


def test_async_overlap_beats_serial_at_the_same_d():
    common = (*SMALL, "spec.d=8", "spec.bs=8", "spec.w=8")
    costs = fixed_costs(verify_s=1e-2, expand_s=1e-3, message_s=5e-5, tree_op_s=2e-5)
    serial = _metrics(Simulation(cfg(*common, "spec=serial_tree"), costs).run())
    overlap = _metrics(Simulation(cfg(*common, "spec=async_tree"), costs).run())
    assert overlap["tokens_per_s"] > 1.3 * serial["tokens_per_s"]
    assert serial["iteration_time_s"] > 1e-2 + 8 * 1e-3


def test_auto_d_follows_the_verify_to_expand_ratio():
    config = cfg(*SMALL)
    for verify_s, expand_s, d in [(1e-2, 1e-3, 10), (1e-2, 4e-3, 2), (1e-3, 1e-2, 1), (1e-2, 2.4e-3, 4)]:
        assert Simulation(config, fixed_costs(verify_s, expand_s)).d == d


def test_best_of_two_picks_floor_or_floor_plus_one():
    config = cfg(*SMALL, "sim.d_rule=best_of_two")
    sim = simulate(config)
    t_verify = sim.proposal_s + sim.target_cost.forward_s(8, 63 + 8) + sim.verified_s
    ratio = t_verify / sim.draft_cost.forward_s(8, 63 + 8)
    assert sim.d in (max(1, math.floor(ratio)), math.floor(ratio) + 1)


def test_poll_expands_until_the_verified_path_arrives():
    """d = poll: with constant costs, every round's overlapped expansions are ceil(t_round / t_expand)
    (the one in flight when the path arrives finishes first), bounded by what the tree holds."""
    t_verify, t_expand, t_msg = 1e-2, 3e-3, 1e-4
    config = cfg(*SMALL, "spec=async_tree", "spec.d=poll", "spec.bs=8", "spec.w=8", "spec.max_tree_nodes=256")
    sim = Simulation(config, fixed_costs(verify_s=t_verify, expand_s=t_expand, message_s=t_msg)).run()
    m = _metrics(sim)
    assert sim.poll and m["d_rule"] == "poll"
    # from the proposal's send to the verified path's arrival: message + verify + message
    assert sim.d_used == math.ceil((t_verify + 2 * t_msg) / t_expand) == 4
    assert sim.tally.polled_rounds == m["iterations"]  # one polling round per verify
    # The target's cycle (verify end to verify end): the draft sends at 0 and expands at 0-3-6-9-12 ms; the
    # path arrives at 10.2 ms, mid-expansion, so the next proposal leaves at 12 ms: 4 expansions per cycle,
    # plus one refill expansion after a miss that left fewer than bs nodes.
    cycles = sorted(row.end_s - row.start_s for prev, row in zip(sim.rows, sim.rows[1:]) if row.request == prev.request)
    assert cycles[0] == pytest.approx(4 * t_expand, rel=1e-9)
    assert cycles[-1] <= 5 * t_expand + 1e-9


def test_poll_stops_at_the_tree_capacity():
    config = cfg(*SMALL, "spec=async_tree", "spec.d=poll", "spec.bs=8", "spec.w=8", "spec.max_tree_nodes=32")
    sim = Simulation(config, fixed_costs(verify_s=1e-2, expand_s=1e-5)).run()
    assert 1 <= sim.d_used <= 32 // 8  # free expansions would run forever without the capacity bound


def test_poll_is_async_only_and_simulator_only():
    with pytest.raises(ValueError, match=r"spec\.d: 'poll' overlaps expansions with a verify: async_tree only"):
        cfg("spec=serial_tree", "spec.d=poll")
    from runtime.engine import check_runtime_support

    with pytest.raises(ValueError, match=r"spec\.d=poll: simulator only"):
        check_runtime_support(cfg("spec=async_tree", "spec.d=poll", "kernels=graphs"))


@pytest.mark.parametrize("mode", ["async_tree", "serial_tree"])
def test_refill_graph_prices_a_lone_root_expansion_as_one_row(mode):
    """The refill_graph feature (on in kernels=graphs): the expansion of a lone root (a request's first, a miss's
    refill) costs a one-row forward, as the runtime's one-row graph; the same draws, so the same outcomes, and the
    draft's expansion time drops by no more than those forwards' w-row cost."""
    on, off = (simulate(cfg(*SMALL, *MODES[mode], f"kernels.ablate=[{v}]")) for v in ("", "refill_graph"))
    assert on.refill_graph and not off.refill_graph
    assert [r.accepted for r in on.rows] == [r.accepted for r in off.rows]  # accepted per verify: the same draws
    lone = on.tally.reroots + on.config.workload.num_requests  # lone roots: at most one per re-root and request
    work = on.config.workload
    w_row = off.draft_cost.forward_s(off.w, work.prompt_tokens + work.max_new_tokens + on.config.spec.max_tree_nodes,
                                     1.0)  # a w-row forward at the longest context, an upper bound
    assert 0 < off.tally.expand_s - on.tally.expand_s <= lone * w_row
    assert _metrics(on)["tokens_per_s"] > _metrics(off)["tokens_per_s"]


@pytest.mark.parametrize("mode", ["serial_tree", "chain"])
@pytest.mark.parametrize("ablate", ["", "refill_graph"])
def test_a_pending_token_adds_one_row_to_its_refill(mode, ablate, monkeypatch):
    """A miss behind a never-expanded leaf feeds that token in front of the refill's first forward: two rows for a
    lone root under kernels.refill_graph (the runtime's two-row graph), w + 1 otherwise (a chain: 2). Priced as one
    row less, the same draws cost less draft time, by at most one extra row's worth per pending token. (Here an
    async tree has expanded every accepted node by the time its verify returns: no pending token.)"""
    config = cfg(*SMALL, *MODES[mode], f"kernels.ablate=[{ablate}]")
    on = simulate(config)
    pendings = []
    real = TreeStates.pending
    monkeypatch.setattr(TreeStates, "pending",
                        lambda self, sid, ranks: pendings.append(real(self, sid, ranks)) or False)
    off = simulate(config)  # every refill priced without the pending row
    assert [r.accepted for r in on.rows] == [r.accepted for r in off.rows]  # the same draws
    assert any(pendings)
    work, w = config.workload, on.w
    kv = work.prompt_tokens + work.max_new_tokens + config.spec.max_tree_nodes
    rows = 1 if on.refill_graph else w
    row = on.draft_cost.forward_s(rows + 1, kv, rows + 1.0) - on.draft_cost.forward_s(rows, kv, float(rows))
    assert 0 < on.tally.expand_s - off.tally.expand_s <= sum(pendings) * row * (1 + 1e-9)


def test_narrow_weights_say_their_gemms_are_extrapolated():
    """A profile without a fit of the narrow weights' own (`gemm_fp8` for 8 bits; 4 bits never) prices their GEMMs by
    their bytes at the 16-bit rate: the cost source says so (the metrics' cost_model). The shipped profile has
    gemm_fp8: an fp8 draft is priced by it, unlabelled; either way its step is cheaper than at 16 bits."""
    base = ("model=llama3-8b_llama3.2-1b", "parallel=1x1", "kernels=graphs")
    label = "[weight bits draft {}: GEMM bytes at the 16-bit fit's rate, not calibrated]"
    sixteen, eight, four = (build_costs(cfg(*base, f"model.draft.weight_bits={bits}")) for bits in (16, 8, 4))
    assert "not calibrated" not in sixteen.source and "not calibrated" not in eight.source
    assert four.source.endswith(label.format(4))
    older = build_costs(cfg(*base, "model.draft.weight_bits=8", "sim.profile=profiles/h200_954a1bf.json"))
    assert older.source.endswith(label.format(8))
    for narrow in (eight, four, older):
        assert narrow.draft.forward_s(1, 1024, 1.0) < sixteen.draft.forward_s(1, 1024, 1.0)


@pytest.mark.parametrize("mode", ["async_tree", "serial_tree", "chain", "autoregressive"])
def test_refills_count_the_forwards_each_next_proposal_waited_for(mode):
    """iterations.csv `refills`: the refill forwards after each verify's re-root; every miss refills, an async hit
    on an expanded subtree does not, a chain's proposal is gamma of them; empty after a request's last verify and
    without a draft."""
    sim = simulate(cfg(*SMALL, *MODES[mode]))
    rows = sim.rows
    last = {r.request: r.iteration for r in rows}
    if mode == "autoregressive":
        assert all(r.refills is None for r in rows)
        return
    assert all((r.refills is None) == (r.iteration == last[r.request]) for r in rows)
    done = [r for r in rows if r.refills is not None]
    if mode != "chain":
        assert all(r.refills >= 1 for r in done if r.hit is False)
    if mode == "async_tree":
        assert any(r.hit and r.refills == 0 for r in done) and any(r.hit is False for r in done)
    if mode == "chain":  # a chain proposal is gamma fresh forwards, all of them refills
        assert {r.refills for r in done} == {sim.config.spec.gamma}
