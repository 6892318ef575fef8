"""Acceptance models: table handling, the truth walk on hand-built proposals, files and replay."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conf.schema import AcceptanceConfig
from policy.acceptance import (
    BEYOND_TABLE,
    PositionalAcceptance,
    ReplayAcceptance,
    chain_accept_length,
    load_acceptance,
)

# proposal: root 0; children of the root with ranks 0 and 1 (nodes 1, 2); child rank 0 of node 1 (node 3)
CHILDREN = {(-1, 0): 0, (0, 0): 1, (0, 1): 2, (1, 0): 3}


def test_closed_form_chain_length():
    assert chain_accept_length(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert chain_accept_length(1.0, 4) == 5.0
    assert chain_accept_length(0.0, 4) == 1.0


def test_scale_multiplies_rows_and_refuses_a_sum_above_one():
    acc = PositionalAcceptance([[0.5, 0.3], [0.2]], scale=1.25)  # the largest valid scale: 1 / 0.8
    assert acc.table[0] == pytest.approx([0.625, 0.375])
    assert acc.table[1] == pytest.approx([0.25])
    with pytest.raises(ValueError, match=r"acceptance\.scale: 1\.5 pushes .* sum 1\.2000 > 1; the largest valid "
                                         r"scale for this table is 1\.25"):
        PositionalAcceptance([[0.5, 0.3], [0.2]], scale=1.5)


def test_belief_is_non_increasing_in_rank_and_floored():
    acc = PositionalAcceptance([[0.2, 0.5, 0.0]])
    b = acc.belief(4)[0]
    assert b == sorted(b, reverse=True)
    assert b[0] == pytest.approx(math.log(0.2)) and b[1] == pytest.approx(math.log(0.2))
    assert all(math.isfinite(x) for x in b)


def test_true_rank_inverts_the_row_cdf_and_reuses_the_last_row():
    acc = PositionalAcceptance([[0.5, 0.3], [0.1]])
    assert [acc.true_rank(0, u) for u in (0.0, 0.49, 0.5, 0.79, 0.8, 0.99)] == [0, 0, 1, 1, 2, 2]
    assert acc.true_rank(5, 0.05) == 0 and acc.true_rank(5, 0.5) == 1  # depth 5 uses row 1


@pytest.mark.parametrize("uniforms,ranks,nodes", [
    ([0.1, 0.1, 0.95], (0, 0, BEYOND_TABLE), (0, 1, 3)),  # top child, its top child, then an undrafted token
    ([0.6, 0.1, 0.1], (1, 0), (0, 2)),  # the root's 2nd child accepted, its children were not proposed
    ([0.9, 0.1, 0.1], (BEYOND_TABLE,), (0,)),  # nothing accepted; the bonus is beyond the table's ranks
], ids=["deep", "second-branch", "first-mismatch"])
def test_walk_follows_the_truth_through_the_proposal(uniforms, ranks, nodes):
    acc = PositionalAcceptance([[0.5, 0.3]])
    assert acc.walk(CHILDREN, [0.0] * 3 + uniforms, 3) == (ranks, nodes)


def test_a_token_beyond_the_table_is_never_a_drafted_child():
    """The table ranks 2 children; a proposal holding a rank-2 child (a tree of topk > 2) must not take the
    1 - sum(row) mass as that child: as in the runtime's oracle, it is a miss whatever the tree's width."""
    acc = PositionalAcceptance([[0.5, 0.3]])
    wide = {(0, 0): 1, (0, 1): 2, (0, 2): 3}  # the root's children at ranks 0, 1, 2
    assert acc.walk(wide, [0.9], 0) == ((BEYOND_TABLE,), (0,))
    assert BEYOND_TABLE > 64  # above any spec.topk the draft head takes


def test_file_table_takes_precedence_and_bad_files_name_the_field(tmp_path):
    f = tmp_path / "acc.json"
    f.write_text(json.dumps({"positional": [[0.9]]}))
    acc = load_acceptance(AcceptanceConfig(positional=[[0.1]], file=str(f)), topk=4)
    assert isinstance(acc, PositionalAcceptance) and acc.table == [[0.9]]
    f.write_text(json.dumps({"positional": [[0.7, 0.6]]}))
    with pytest.raises(ValueError, match=r"acc\.json: positional\[0\]: probabilities sum to 1\.3000 > 1"):
        load_acceptance(AcceptanceConfig(file=str(f)), topk=4)
    f.write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match=r"acc\.json: positional: missing"):
        load_acceptance(AcceptanceConfig(file=str(f)), topk=4)
    with pytest.raises(FileNotFoundError, match=r"acceptance\.file: acceptance file .* does not exist"):
        load_acceptance(AcceptanceConfig(file=str(tmp_path / "none.json")), topk=4)


def test_replay_reproduces_recorded_lengths_and_cycles(tmp_path):
    f = tmp_path / "run.json"
    f.write_text(json.dumps({"verifies": [{"accepted": 1, "hit": True}, 0, {"accepted": 5, "hit": False}]}))
    acc = load_acceptance(AcceptanceConfig(kind="replay", file=str(f)), topk=4)
    assert isinstance(acc, ReplayAcceptance)
    u: list[float] = []
    assert acc.walk(CHILDREN, u, 0) == ((0, 0), (0, 1))  # 1 accepted, hit -> bonus is the top choice
    assert acc.walk(CHILDREN, u, 0) == ((4,), (0,))  # 0 accepted, no hit flag -> undrafted bonus
    assert acc.walk(CHILDREN, u, 0) == ((0, 0, 4), (0, 1, 3))  # 5 recorded, proposal only 2 deep; no hit
    assert acc.walk(CHILDREN, u, 0) == ((0, 0), (0, 1))  # cycled


def test_replay_rejects_malformed_entries(tmp_path):
    f = tmp_path / "run.json"
    f.write_text(json.dumps([{"accepted": -1}]))
    with pytest.raises(ValueError, match=r"run\.json\[0\]: needs an integer 'accepted' >= 0"):
        load_acceptance(AcceptanceConfig(kind="replay", file=str(f)), topk=4)
    f.write_text(json.dumps([{"accepted": 1, "hit": "yes"}]))
    with pytest.raises(ValueError, match=r"run\.json\[0\]\.hit: must be true, false or null"):
        load_acceptance(AcceptanceConfig(kind="replay", file=str(f)), topk=4)


def test_replay_reads_a_recorded_iterations_csv(tmp_path):
    f = tmp_path / "iterations.csv"
    f.write_text("request,iteration,accepted,emitted,hit\n0,0,2,3,1\n0,1,0,1,0\n0,2,1,2,\n")
    acc = load_acceptance(AcceptanceConfig(kind="replay", file=str(f)), topk=4)
    assert isinstance(acc, ReplayAcceptance)
    assert acc.verifies == [(2, True), (0, False), (1, None)]
    f.write_text("request,accepted\n0,x\n")
    with pytest.raises(ValueError, match=r"iterations\.csv: row 2: accepted: needs a non-negative integer"):
        load_acceptance(AcceptanceConfig(kind="replay", file=str(f)), topk=4)


def test_replay_with_table_belief_draws_ranks_that_keep_the_recorded_length():
    """replay_belief=table: accepted ranks are drawn from the table restricted to proposed children whose
    subtree is deep enough for the rest of the recorded path; a hit's bonus rank from the ranks not proposed.
    CHILDREN: root -> ranks 0 (node 1, which has child node 3) and 1 (node 2, a leaf)."""
    table = [[0.5, 0.3, 0.1, 0.1]]
    acc = ReplayAcceptance([(1, True), (2, False), (1, False)], beyond=4, belief="table", table=table)
    # u = 0.9 of the 0.8 mass over ranks {0, 1}: rank 1 (node 2); then the hit's bonus under the leaf node 2,
    # whose ranks are all unproposed: u = 0.9 of the whole row -> rank 3
    assert acc.walk(CHILDREN, [0.9, 0.9], 0) == ((1, 3), (0, 2))
    # 2 accepted: only rank 0 leads 2 deep, whatever u says; a miss -> beyond the tree (rank 4)
    assert acc.walk(CHILDREN, [0.9, 0.9], 0) == ((0, 0, 4), (0, 1, 3))
    # u = 0.1: rank 0
    assert acc.walk(CHILDREN, [0.1], 0) == ((0, 4), (0, 1))
    # the hit's bonus never lands on a proposed child: under the root ranks 0 and 1 are proposed
    acc = ReplayAcceptance([(0, True)], beyond=4, belief="table", table=table)
    for u in (0.0, 0.5, 0.99):
        ranks, nodes = acc.walk(CHILDREN, [u], 0)
        assert nodes == (0,) and ranks[0] in (2, 3)


def test_replay_follows_recorded_ranks_exactly(tmp_path):
    """iterations.csv `ranks` (accepted ranks, then the bonus's; -1 = a miss): the replay follows them whatever
    the belief; a recorded node the simulated proposal lacks ends the path there as a miss."""
    f = tmp_path / "iterations.csv"
    f.write_text("request,iteration,accepted,emitted,hit,ranks\n0,0,1,2,1,1.3\n0,1,2,3,0,0.0.-1\n"
                 "0,2,1,2,1,1.0\n0,3,0,1,0,\n")
    acc = load_acceptance(AcceptanceConfig(kind="replay", file=str(f)), topk=4)
    assert isinstance(acc, ReplayAcceptance) and acc.ranks[3] is None
    assert acc.walk(CHILDREN, [], 0) == ((1, 3), (0, 2))  # rank 1 = node 2, then the bonus of rank 3
    assert acc.walk(CHILDREN, [], 0) == ((0, 0, 4), (0, 1, 3))  # a miss: beyond the tree
    acc.ranks[2] = (1, 0, 2)  # node 2 has no proposed child: stop at node 2, a miss
    assert acc.walk(CHILDREN, [], 0) == ((1, 4), (0, 2))
    assert acc.walk(CHILDREN, [], 0) == ((4,), (0,))  # no ranks recorded: the old rule
    f.write_text("request,accepted,hit,ranks\n0,1,1,0.x\n")
    with pytest.raises(ValueError, match=r"row 2: ranks: needs dot-joined integers"):
        load_acceptance(AcceptanceConfig(kind="replay", file=str(f)), topk=4)
    f.write_text("request,accepted,hit,ranks\n0,2,1,0.1\n")
    with pytest.raises(ValueError, match=r"\[0\]\.ranks: needs accepted \+ 1 = 3 integers"):
        load_acceptance(AcceptanceConfig(kind="replay", file=str(f)), topk=4)


def test_the_32_rank_table_extends_the_8_rank_one():
    """acceptance=smollm2_r32 (profiles/acceptance/smollm2_r32.json): 32 ranks per row; its unconditioned first row
    starts with the 8-rank table's first row, and it covers more of the probability mass."""
    from conf import compose_config

    cfg = compose_config("simulate", ["acceptance=smollm2_r32"])
    wide, narrow = load_acceptance(cfg.acceptance, topk=32), load_acceptance(
        compose_config("simulate", ["acceptance=smollm2"]).acceptance, topk=8)
    assert all(len(row) == 32 for row in wide.table) and all(len(row) == 8 for row in narrow.table)
    assert wide.table[0][:8] == pytest.approx(narrow.table[0], abs=1e-6)
    assert 0.9 < sum(wide.table[0]) < 1.0 and sum(narrow.table[0]) < sum(wide.table[0])


def test_domain_picks_one_prompt_domain_of_a_report(tmp_path):
    """acceptance.domain: the report's by_domain entry replaces the pooled table; a missing domain, a file without
    by_domain and a domain without a report file are refused, naming the file or the field."""
    report = {"positional": [[0.7, 0.1]],
              "by_domain": {"code": {"positional": [[0.8, 0.1]]}, "instruction": {"positional": [[0.6, 0.1]]}}}
    f = tmp_path / "acc.json"
    f.write_text(json.dumps(report))
    assert load_acceptance(AcceptanceConfig(file=str(f)), topk=2).table[0][0] == pytest.approx(0.7)
    assert load_acceptance(AcceptanceConfig(file=str(f), domain="instruction"), topk=2).table[0][0] == \
        pytest.approx(0.6)
    with pytest.raises(ValueError, match=r"by_domain: no 'prose' entry .*\['code', 'instruction'\]"):
        load_acceptance(AcceptanceConfig(file=str(f), domain="prose"), topk=2)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"positional": [[0.7]]}))
    with pytest.raises(ValueError, match=r"bare.json: by_domain: missing"):
        load_acceptance(AcceptanceConfig(file=str(bare), domain="code"), topk=2)
    with pytest.raises(ValueError, match=r"acceptance.domain"):
        AcceptanceConfig(domain="code").validate()


def test_the_instruction_table_is_the_reports_instruction_entry():
    """acceptance=smollm2_instruction reads the instruction prompts' table of the real pair's report, which accepts
    less than the pooled (code + instruction) one at every tree size it lists."""
    from conf import compose_config

    cfg = compose_config("simulate", ["acceptance=smollm2_instruction"])
    data = json.loads((Path(__file__).resolve().parents[2] / "profiles/acceptance/smollm2.json").read_text())
    table = load_acceptance(cfg.acceptance, topk=8).table
    assert table[0] == pytest.approx(data["by_domain"]["instruction"]["positional"][0], abs=1e-6)
    inst, pooled = data["by_domain"]["instruction"]["tree"], data["tree"]
    assert all(inst[k] < pooled[k] for k in pooled)
