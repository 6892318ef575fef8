"""The acceptance family: its tables, its range errors, exact expected lengths (closed form for a chain, the sum
over a proposal's nodes for a tree, checked against an enumeration of verify outcomes), the simulator against
those, the fitted members against the measured tables, and the presets against their targets."""

from __future__ import annotations

import math
import re
import statistics

import pytest

from conf.schema import AcceptanceConfig
from simulator.acceptance import PositionalAcceptance, chain_accept_length, load_acceptance, max_scale
from simulator.acceptance_family import (
    RANKS,
    chain_expected_tokens,
    check_family,
    family_table,
    fit_family,
    proposal_expected_tokens,
)
from simulator.simulation import Simulation, build_costs, resolve_d
from simulator.tree import EMPTY, TreeStates
from tests.simulator.conftest import cfg

MEASURED = ("default", "smollm2", "smollm2_instruction", "smollm2_r32")
"""The shipped measured (or documented) tables, conf/acceptance/."""
SHIPPED_MODES = (("spec=chain",), ("spec=serial_tree",), ("spec=async_tree",))
"""The modes and tree shapes conf/spec/ ships (chain gamma 4; bs 8, w 8, topk 8 trees; async d auto)."""


def _table(preset: str) -> list[list[float]]:
    return load_acceptance(cfg(f"acceptance={preset}").acceptance, 8).table


def _enumerate(table, tokens, parents) -> float:
    """E[tokens per verify] by summing over every verify outcome: at each accepted node the truth is rank r with
    probability row[r] (a child of the proposal: accept and go on) or anything else (stop; the bonus counts 1)."""
    kids: dict[int, dict[int, int]] = {}
    for i in range(1, len(tokens)):
        kids.setdefault(parents[i], {})[tokens[i]] = i

    def from_node(node: int, depth: int) -> float:
        row = table[min(depth, len(table) - 1)]
        total, stop = 0.0, 1.0
        for r, child in kids.get(node, {}).items():
            p = row[r] if r < len(row) else 0.0
            total += p * (1.0 + from_node(child, depth + 1))
            stop -= p
        return total + stop

    return from_node(0, 0)


def _fresh_proposal(table, bs: int, w: int, topk: int, d: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The proposal a fresh serial tree sends: refill to bs nodes, d more forwards, the top-bs subtree."""
    trees = TreeStates(PositionalAcceptance(table).belief(topk), topk, w, 256)
    sid, _ = trees.refill(EMPTY, bs)
    sid, _ = trees.expand(sid, d)
    return trees.select(sid, bs)


def _run_recording(config) -> tuple[Simulation, list[float], list[int]]:
    """Simulate `config`, recording per verify the exact expected tokens of its proposal and the tokens it took."""
    costs = build_costs(config)
    sim = Simulation(config, costs, d=resolve_d(config, costs), record_events=False)
    table, walk = sim.acceptance.table, sim.acceptance.walk
    expected: list[float] = []
    taken: list[int] = []

    def recording_walk(children, uniforms, position):
        order = sorted(children.items(), key=lambda kv: kv[1])
        expected.append(proposal_expected_tokens(table, [t for (_, t), _ in order], [p for (p, _), _ in order]))
        ranks, nodes = walk(children, uniforms, position)
        taken.append(len(nodes))
        return ranks, nodes

    sim.acceptance.walk = recording_walk  # read by the target's process when the run starts
    return sim.run(), expected, taken


def _mean_len(*overrides: str) -> float:
    config = cfg(*overrides, "sim.record_events=false")
    sim, _, taken = _run_recording(config)
    return statistics.fmean(taken)


# ---- the family's tables and errors ------------------------------------------------------------------------------
@pytest.mark.parametrize("top1,decay,gain", [(0.4, 0.3, 0.0), (0.714, 2.2, 0.076), (0.9, 1.0, 0.076), (1.0, 0.5, 0.2),
                                             (0.0, 0.0, 0.0)])
def test_family_rows_follow_the_miss_survival(top1, decay, gain):
    table = family_table(top1, decay, gain)
    assert len(table[0]) == RANKS and table[0][0] == pytest.approx(top1)
    for d in (0, 3, 17):
        row, power = table[d], 1.0 + gain * d
        for r in (1, 2, 5, RANKS):  # the top r children leave ((1 - top1) r^-decay)^(1 + gain d) of the truth
            assert 1.0 - sum(row[:r]) == pytest.approx(((1.0 - top1) * r ** -decay) ** power, abs=1e-12)
        assert all(p >= 0.0 for p in row) and sum(row) <= 1.0 + 1e-12


def test_top1_sweeps_the_chain_from_one_token_to_gamma_plus_one():
    """Without depth gain the family's chain is the i.i.d. chain of acceptance top1 (Leviathan et al.'s closed form)."""
    for a in (0.0, 0.3, 0.7, 0.95, 1.0):
        assert chain_expected_tokens(family_table(a, 1.0, 0.0), 6) == pytest.approx(chain_accept_length(a, 6))
    assert chain_expected_tokens(family_table(0.0, 1.0, 0.5), 6) == 1.0
    assert chain_expected_tokens(family_table(1.0, 1.0, 0.5), 6) == 7.0


@pytest.mark.parametrize("field,value,bounds", [("top1", 1.2, "[0, 1]"), ("top1", -0.1, "[0, 1]"),
                                                ("decay", 11.0, "[0, 10]"), ("depth_gain", -0.5, "[0, 1]")])
def test_values_outside_the_family_are_one_line_errors_naming_the_field(field, value, bounds):
    msg = rf"^acceptance\.{field}: {re.escape(str(value))} is outside the acceptance family's range "
    with pytest.raises(ValueError, match=msg + re.escape(bounds) + "$"):
        AcceptanceConfig(kind="family", **{field: value}).validate()
    kwargs = {"top1": 0.5, "decay": 1.0, "depth_gain": 0.0, field: value}
    with pytest.raises(ValueError, match=rf"^acceptance\.{field}: "):
        check_family(**kwargs)
    with pytest.raises(ValueError, match=r"^acceptance\.file: kind=family builds its table"):
        AcceptanceConfig(kind="family", file="profiles/acceptance/smollm2.json").validate()


def test_a_scale_past_a_full_row_names_the_largest_valid_scale():
    """(The positional message itself: tests/simulator/test_acceptance.py.) A strong family member's rows are near 1,
    so a scale past 1 / its largest row sum is refused there too, naming that scale."""
    assert max_scale(_table("smollm2")) == pytest.approx(1.0 / max(sum(r) for r in _table("smollm2")))
    default = AcceptanceConfig()
    table = family_table(0.9, default.decay, default.depth_gain)
    with pytest.raises(ValueError, match=r"acceptance\.scale: 1\.1 pushes a row of .* > 1; the largest valid scale "
                                         rf"for this table is {math.floor(1e4 * max_scale(table)) / 1e4:g}"):
        load_acceptance(AcceptanceConfig(kind="family", top1=0.9, scale=1.1), 8)


# ---- exact expectations ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["weak", "paper_qwen2", "strong", "smollm2"])
@pytest.mark.parametrize("bs,w,topk,d", [(4, 2, 2, 1), (6, 3, 3, 2), (8, 8, 8, 1), (8, 2, 4, 3)])
def test_proposal_expectation_equals_the_enumeration_of_outcomes(preset, bs, w, topk, d):
    table = _table(preset)
    tokens, parents = _fresh_proposal(table, bs, w, topk, d)
    assert len(tokens) == bs
    assert proposal_expected_tokens(table, tokens, parents) == pytest.approx(_enumerate(table, tokens, parents),
                                                                             rel=1e-12)


@pytest.mark.parametrize("preset", ["weak", "paper_qwen2", "strong"])
@pytest.mark.parametrize("mode", [("spec=chain",), ("spec=serial_tree",), ("spec=serial_tree", "spec.bs=16",
                                                                             "spec.d=4"), ("spec=async_tree",)])
def test_simulated_lengths_match_the_exact_expectation_of_each_proposal(preset, mode):
    """Each verify's tokens have the exact expectation of its proposal (the truth of a verify is independent of the
    tree the draft grew from earlier verifies), so the simulated mean agrees with the mean exact expectation within
    4 standard errors (false alarm < 1e-4 per case); a chain's every proposal has the closed form."""
    config = cfg(f"acceptance={preset}", *mode, "workload.num_requests=8", "sim.record_events=false")
    sim, expected, taken = _run_recording(config)
    n = len(taken)
    sd = statistics.pstdev([t - e for t, e in zip(taken, expected)])
    assert abs(statistics.fmean(taken) - statistics.fmean(expected)) <= 4.0 * sd / math.sqrt(n) + 1e-12
    if mode == ("spec=chain",):
        assert expected == pytest.approx([chain_expected_tokens(sim.acceptance.table, 4)] * n)


# ---- fitted members and presets ----------------------------------------------------------------------------------
def test_the_schema_default_member_is_the_smollm2_fit():
    fit = fit_family(_table("smollm2"))
    default = AcceptanceConfig()
    assert (default.top1, default.decay, default.depth_gain) == tuple(round(x, 3) for x in fit)


@pytest.mark.parametrize("preset", MEASURED)
@pytest.mark.parametrize("mode", SHIPPED_MODES, ids=lambda m: m[0].split("=")[1])
def test_the_fitted_member_reproduces_each_measured_table_within_2_percent(preset, mode):
    """The same seeds draw the same truth uniforms for the table and its fitted member (common random numbers), so
    the difference is the fit's, not sampling noise."""
    top1, decay, gain = (round(x, 3) for x in fit_family(_table(preset)))
    run = ("workload.num_requests=16", *mode)
    measured = _mean_len(f"acceptance={preset}", *run)
    member = _mean_len("acceptance.kind=family", f"acceptance.top1={top1}", f"acceptance.decay={decay}",
                       f"acceptance.depth_gain={gain}", *run)
    assert member == pytest.approx(measured, rel=0.02)


QWEN2 = ("acceptance=paper_qwen2", "model=qwen2-72b_qwen2-1.5b", "parallel=4x4", "workload.num_requests=64")


def test_paper_qwen2_reaches_the_papers_lengths_at_its_tree_budget():
    config = cfg(*QWEN2)
    d = resolve_d(config, build_costs(config))
    assert (config.spec.bs, config.spec.w, d) == (8, 8, 7)
    assert _mean_len(*QWEN2) == pytest.approx(3.34, rel=0.02)
    assert _mean_len(*QWEN2, "spec=serial_tree", f"spec.d={d}") == pytest.approx(3.63, rel=0.02)


def test_strong_is_eagle_class_and_weak_is_weak():
    assert _mean_len("acceptance=strong", "spec=async_tree", "spec.bs=16") >= 5.0
    assert _mean_len("acceptance=strong", "spec=serial_tree", "spec.bs=16", "spec.d=4") >= 5.0
    # serial at bs 16, w 8, d auto: refill 2 + d 2 forwards, depth <= 4, so at most 5 tokens whatever the draft
    assert _mean_len("acceptance=strong", "spec=serial_tree", "spec.bs=16") < 5.0
    assert _mean_len("acceptance.kind=family", "acceptance.top1=1.0", "spec=serial_tree", "spec.bs=16") == 5.0
    for mode in (("spec=chain",), ("spec=serial_tree",), ("spec=async_tree",), ("spec=async_tree", "spec.bs=32")):
        assert _mean_len("acceptance=weak", *mode) < 2.5


def test_the_family_spans_one_to_seven_tokens_per_verify():
    for mode in (("spec=serial_tree",), ("spec=async_tree",), ("spec=async_tree", "spec.bs=32")):
        assert _mean_len("acceptance.kind=family", "acceptance.top1=0.0", "acceptance.decay=0.0", *mode) == 1.0
    assert _mean_len("acceptance.kind=family", "acceptance.top1=1.0", "spec=chain") == 5.0  # gamma + 1
    assert _mean_len("acceptance.kind=family", "acceptance.top1=0.98", "spec=async_tree", "spec.bs=32") >= 7.0
    sweep = [_mean_len("acceptance=strong", f"acceptance.top1={a}", "spec=async_tree", "spec.bs=16")
             for a in (0.3, 0.5, 0.7, 0.9)]
    assert sweep == sorted(sweep) and sweep[0] < 2.5 and sweep[-1] > 5.0
