"""`runtime.graphs.StepBuffers` on CPU: the staged layout a CUDA-graph step reads (the graph itself: tests/gpu). A load
writes the host buffer; `capture_copy` is the copy a step graph's first node makes."""

from __future__ import annotations

import pytest
import torch

from runtime.draft_worker import with_pending
from runtime.graphs import StepBuffers
from runtime.tree import DraftTree, proposal_inputs


def _assert_loaded(buf: StepBuffers, inp, prefix_len: int) -> None:
    buf.capture_copy()
    assert buf.prefix.tolist() == [prefix_len]
    assert torch.equal(buf.ids, inp.token_ids) and torch.equal(buf.positions, inp.positions)
    assert torch.equal(buf.slots, inp.tree_slots) and torch.equal(buf.parents, inp.parents)
    assert torch.equal(buf.mask, inp.tree_mask)


def test_step_buffers_hold_a_verify_proposal_and_the_next_one():
    """A verify's inputs land in the views the graph reads (each load replaces the last one completely)."""
    buf = StepBuffers(8, 8, "cpu")
    for prefix, (tokens, parents) in [(100, ([5, 6, 7, 8, 9], [-1, 0, 0, 1, 3])), (103, ([4, 2], [-1, 0]))]:
        inp = proposal_inputs(tokens, parents, prefix, 8)
        buf.load_inputs(inp, prefix)
        _assert_loaded(buf, inp, prefix)


def test_step_buffers_hold_a_draft_expansion_with_a_pending_row():
    """A draft expansion's [w, max_len] mask, and the (w + 1)-row step with a pending token in front."""
    tree = DraftTree(3)
    tree.grow_topk([0], torch.tensor([[-0.1, -0.5, -2.0]]), torch.tensor([[11, 12, 13]]))
    nodes, inp = tree.plan_expansion(4, 40, 16)
    buf = StepBuffers(4, 16, "cpu")
    buf.load_inputs(inp, 40)
    _assert_loaded(buf, inp, 40)
    pending = with_pending(inp, (9,), 39)
    buf = StepBuffers(5, 17, "cpu")
    buf.load_inputs(pending, 39)
    _assert_loaded(buf, pending, 39)


def test_step_buffers_load_host_tensors_and_refuse_other_shapes():
    buf = StepBuffers(2, 3, "cpu")
    mask = torch.tensor([[1, 0, 0], [1, 1, 0]], dtype=torch.bool)
    buf.load(torch.tensor([7, 8]), torch.tensor([20, 21]), torch.tensor([0, 1]), 20, mask)
    assert buf.packed.tolist() == [0] * 10  # nothing on the "device" before the graph's copy
    buf.capture_copy()
    assert buf.packed.tolist() == [20, 7, 8, 20, 21, 0, 1, -1, -1, 1] and torch.equal(buf.mask, mask)  # ticket 1
    with pytest.raises(ValueError, match=r"captured for 2 rows x 3 tree slots, got token_ids \(3,\)"):
        buf.load(torch.tensor([7, 8, 9]), torch.tensor([20, 21, 22]), torch.tensor([0, 1, 2]), 20, mask)
    with pytest.raises(ValueError, match=r"got token_ids \(2,\), positions \(1,\)"):  # no silent broadcast
        buf.load(torch.tensor([7, 8]), torch.tensor([20]), torch.tensor([0, 1]), 20, mask)
    with pytest.raises(ValueError, match=r"StepGraph.load_inputs: captured for 2 rows x 3 tree slots, got 2 rows x 2"):
        buf.load_inputs(proposal_inputs([1, 2], [-1, 0], 5, 2), 5)



def test_buffers_of_a_chained_graph_copy_at_each_load():
    """copy_in_graph=False (a chained graph: its chained replays must not copy the host buffer again): a load copies
    at once, and the in-graph copy is refused."""
    buf = StepBuffers(2, 3, "cpu", copy_in_graph=False)
    mask = torch.tensor([[1, 0, 0], [1, 1, 0]], dtype=torch.bool)
    buf.load(torch.tensor([7, 8]), torch.tensor([20, 21]), torch.tensor([0, 1]), 20, mask)
    assert buf.packed.tolist() == [20, 7, 8, 20, 21, 0, 1, -1, -1, 1] and torch.equal(buf.mask, mask)
    with pytest.raises(ValueError, match=r"copy at each load \(copy_in_graph=False\)"):
        buf.capture_copy()


def test_step_buffers_stage_an_owed_compaction_padded_with_minus_one():
    """keep_rows > 0: the compaction's destination and sources follow the parent rows, sources -1-padded (the
    kernel skips them); a load without one leaves every source -1, so an earlier one never runs twice."""
    buf = StepBuffers(2, 2, "cpu", keep_rows=4)
    inp = proposal_inputs([5, 6], [-1, 0], 30, 2)
    assert buf.keep_src.tolist() == [-1] * 4  # as allocated: a capture-time replay moves nothing
    buf.capture_copy()
    assert buf.keep_src.tolist() == [-1] * 4  # and as staged
    buf.load_inputs(inp, 33, keep=(30, [31, 34, 35]))
    _assert_loaded(buf, inp, 33)
    assert buf.keep_dst.tolist() == [30] and buf.keep_src.tolist() == [31, 34, 35, -1]
    buf.load_inputs(inp, 36)
    _assert_loaded(buf, inp, 36)
    assert buf.keep_src.tolist() == [-1] * 4
    with pytest.raises(ValueError, match="a compaction of 5 slots, the graph was captured for at most 4"):
        buf.load_inputs(inp, 36, keep=(30, [31, 32, 33, 34, 35]))
    with pytest.raises(ValueError, match="captured for at most 0"):
        StepBuffers(2, 2, "cpu").load_inputs(inp, 36, keep=(30, [31]))
    with pytest.raises(ValueError, match="keep_rows must be >= 0"):
        StepBuffers(2, 2, "cpu", keep_rows=-1)


def test_step_buffers_number_their_loads_in_the_ticket_after_the_compaction():
    """The last int is the load's ticket (1, 2, ...; a readback graph hands it back after its outputs), after the
    keep sources; a compaction's -1 padding stops before it."""
    buf = StepBuffers(2, 2, "cpu", keep_rows=3)
    assert buf.ticket.tolist() == [0] and buf.loads == 0
    inp = proposal_inputs([5, 6], [-1, 0], 30, 2)
    buf.load_inputs(inp, 33, keep=(30, [31]))
    buf.capture_copy()
    assert buf.keep_src.tolist() == [31, -1, -1] and buf.ticket.tolist() == [1]
    buf.load_inputs(inp, 34)
    buf.capture_copy()
    assert buf.keep_src.tolist() == [-1] * 3 and buf.ticket.tolist() == [2] and buf.loads == 2
    assert buf.packed.tolist()[-5:] == [0, -1, -1, -1, 2]  # keep destination (none: 0), sources, ticket


def test_step_buffers_capture_defaults_on_device_and_host():
    """The capture-time inputs (slots 0..rows - 1, an identity mask) are in the device views and the host buffer,
    which the step copies inside its capture."""
    buf = StepBuffers(3, 5, "cpu")
    buf.capture_defaults()
    assert buf.slots.tolist() == [0, 1, 2] and torch.equal(buf.mask[:, :3], torch.eye(3, dtype=torch.bool))
    assert not buf.mask[:, 3:].any()
    buf.capture_copy()  # what a replay's first node copies
    assert buf.slots.tolist() == [0, 1, 2] and torch.equal(buf.mask[:, :3], torch.eye(3, dtype=torch.bool))


def test_step_spec_refuses_steps_a_graph_cannot_capture():
    """`StepSpec` checks its combination when built (the graph it describes is GPU-only): rows within the tree
    slots, a chained step of one row with no head or compaction, a verdict only of the known kinds and without
    a head; `readback` when a head or a verdict is copied to the host."""
    from runtime.graphs import StepSpec

    assert not StepSpec(8, 8).readback and StepSpec(8, 8, verdict="greedy").readback
    assert StepSpec(4, 16, keep_rows=16, head=lambda x: x).readback
    for bad, field in [(dict(rows=0, tree_len=4), "rows"), (dict(rows=5, tree_len=4), "rows"),
                       (dict(rows=2, tree_len=2, chain=True), "chain"),
                       (dict(rows=1, tree_len=1, chain=True, keep_rows=1), "chain"),
                       (dict(rows=4, tree_len=4, verdict="sampled"), "verdict"),
                       (dict(rows=4, tree_len=4, verdict="greedy", head=lambda x: x), "verdict"),
                       (dict(rows=4, tree_len=4, keep_rows=-1), "keep_rows")]:
        with pytest.raises(ValueError, match=f"StepSpec: .*{field}"):
            StepSpec(**bad)
