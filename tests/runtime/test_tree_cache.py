"""Evolving tree cache: after re-rooting / accepting, the cache equals plain decoding of the same tokens.

Tiny random fp32 models with the reference attention. Two checks per case:
1. the compaction is an exact move: every kept slot is bitwise the KV the tree forward wrote for that
   node (snapshot before `keep`), and nothing else lands in the kept range;
2. that KV equals plain decoding of the verified tokens (a causal forward over prompt + path, or token by
   token) to float32 rounding over a forward's longest chain (tests/tolerances.py). Not bitwise: the reference
   attention reduces over the whole visible region with masked columns interleaved (tree layout) instead of
   contiguous keys, and the CPU GEMM's blocking depends on the row count, so results move in the last bits
   (measured <= 1.2e-6). A wrong slot, position or mask gives differences of order 0.1-1.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from conf.kernels_config import KernelFeatures
from conf.presets import MODEL_PRESETS
from kernels import kv_compact
from runtime.attention import AttnMeta, ReferenceAttention
from runtime.draft_worker import DraftWorker
from runtime.graphs import StepBuffers, StepSpec, readback_outputs, verdict_outputs, wait_for_ticket
from runtime.kv_cache import KVCache
from runtime.tree import DraftTree, proposal_inputs
from runtime.tree_cache import keep_accepted, keep_slots, step_meta
from runtime.worker_spec import WorkerSpec
from tests.tolerances import assert_bitwise, assert_close, forward_terms

ATTN = ReferenceAttention()
MAX_LEN = 32
CAPACITY = 64
DRAFT = WorkerSpec(4, CAPACITY - MAX_LEN, topk=3, max_tree_nodes=MAX_LEN)  # the tiny draft: w 4, top-k 3


def _model(preset: str, seed: int):
    try:
        from runtime.loader import build_model
    except ImportError:  # the loader is another helper's; fall back to torch's default init
        from runtime.model import Transformer

        torch.manual_seed(seed)
        return Transformer(MODEL_PRESETS[preset]).eval()
    return build_model(MODEL_PRESETS[preset], torch.float32, "cpu", seed).eval()


def _cache(model) -> KVCache:
    layers, heads, dim = model.cache_spec()
    return KVCache(layers, CAPACITY, heads, dim)


@torch.no_grad()
def _plain(model, tokens: list[int], one_by_one: bool = False) -> KVCache:
    """Cache of plain decoding of `tokens` (slots 0..len-1)."""
    cache = _cache(model)
    t = torch.tensor(tokens)
    if one_by_one:
        for i in range(len(tokens)):
            model(t[i : i + 1], AttnMeta.causal(i, 1), cache, ATTN)
    else:
        model(t, AttnMeta.causal(0, len(tokens)), cache, ATTN)
    return cache


def _assert_same(a: torch.Tensor, b: torch.Tensor) -> None:
    """K / V or logits of two ways to the same tokens' forward (tiny-llama, the larger of the two models here)."""
    assert_close(a, b, torch.float32, reduction=forward_terms(MODEL_PRESETS["tiny-llama"], CAPACITY))


def _assert_moved(after: torch.Tensor, before: torch.Tensor, src: list[int], dst_start: int) -> None:
    """Bitwise: slots dst_start.. of `after` hold what slots `src` of `before` held."""
    assert_bitwise(after[:, :, dst_start : dst_start + len(src)], before[:, :, src],
                   reason="compaction copies whole slots: data movement")


@torch.no_grad()
def _grow(model, prompt: list[int], w: int, topk: int, steps: int) -> tuple[DraftTree, KVCache, int]:
    """Prefill prompt[:-1], root = prompt[-1], run `steps` expansions of width w."""
    cache = _cache(model)
    prefix = len(prompt) - 1
    model(torch.tensor(prompt[:-1]), AttnMeta.causal(0, prefix), cache, ATTN)
    tree = DraftTree(prompt[-1])
    for _ in range(steps):
        nodes, inp = tree.plan_expansion(w, prefix, MAX_LEN)
        logits = model(inp.token_ids, step_meta(inp, prefix, "cpu"), cache, ATTN)
        tree.grow(nodes, torch.log_softmax(logits, -1), topk)
    return tree, cache, prefix


PROMPT = [17, 3, 200, 45, 9, 128, 77]


@pytest.mark.parametrize("one_by_one", [False, True], ids=["prefill-ref", "token-by-token-ref"])
def test_draft_reroot_hit_equals_plain_decoding(one_by_one):
    model = _model("tiny-llama-draft", 2)
    tree, cache, prefix = _grow(model, PROMPT, w=4, topk=3, steps=5)
    # Landing node: a depth >= 1 expanded node with an expanded child; the verified path ends at its parent.
    landing = next(i for i, n in enumerate(tree.nodes)
                   if n.depth >= 1 and any(tree.nodes[c].expanded for c in n.children))
    path = tree.path_to(tree.nodes[landing].parent)
    rr = tree.reroot(path, tree.nodes[landing].token)
    assert rr.hit
    before = cache.kv.clone()
    keep_slots(cache, prefix, rr.keep_slots)  # what DraftWorker.compact runs for a re-root
    new_prefix = prefix + rr.num_promoted
    assert new_prefix == prefix + len(path)
    _assert_moved(cache.kv, before, [prefix + s for s in rr.keep_slots], prefix)
    verified = PROMPT + [tree.nodes[i].token for i in path[1:]]
    ref = _plain(model, verified, one_by_one)
    _assert_same(cache.kv[:, :, :new_prefix], ref.kv[:, :, :new_prefix])
    # Every surviving expanded node's KV sits at its new tree slot and equals plain decoding of its path.
    new = rr.tree
    survivors = [i for i, n in enumerate(new.nodes) if n.expanded]
    assert len(survivors) >= 2
    for i in survivors:
        toks = verified + [new.nodes[j].token for j in new.path_to(i)]
        ref = _plain(model, toks, one_by_one)
        slot = new_prefix + new.nodes[i].slot
        _assert_same(cache.kv[:, :, slot], ref.kv[:, :, len(toks) - 1])


@torch.no_grad()
def path_to_unexpanded_leaf(worker: DraftWorker, proposal, moved: bool = False) -> tuple[int, list[int]]:
    """(proposal index of a never-expanded depth-2 leaf, the proposal path root -> that leaf): verifying it and
    then missing leaves the leaf as a pending token. `moved`: a leaf whose parent is not in tree slot 1, so the
    re-root's compaction moves KV (root and parent: slots (0, s), s > 1)."""
    nodes = worker.tree.nodes
    leaf = next(k for k, i in enumerate(worker.selection) if not nodes[i].expanded and nodes[i].depth == 2
                and (not moved or nodes[nodes[i].parent].slot > 1))
    path = [leaf]
    while proposal.parent_indices[path[-1]] >= 0:
        path.append(proposal.parent_indices[path[-1]])
    return leaf, path[::-1]


def test_draft_miss_with_pending_leaf_then_fused_expansion_equals_plain_decoding():
    """Accepted path ends at a never-expanded leaf, bonus not in the tree: the leaf's KV is computed in the
    next expansion's forward (pending row in front of the new root), with no extra forward."""
    worker = DraftWorker(_model("tiny-llama-draft", 2), ATTN, DRAFT)
    worker.start(PROMPT)
    assert worker.expand() and worker.expand()
    prefix, tree = worker.prefix_len, worker.tree
    proposal = worker.propose(0, 0, bs=len(tree))
    leaf, path = path_to_unexpanded_leaf(worker, proposal)
    bonus = 5
    assert bonus not in {tree.nodes[c].token for c in tree.nodes[worker.selection[leaf]].children}
    before = worker.cache.kv.clone()
    rr = worker.advance(tuple(path), bonus)
    assert not rr.hit and rr.pending == (proposal.token_ids[leaf],) and worker.prefix_len == prefix + 2
    assert worker.compaction_pending
    assert_bitwise(worker.cache.kv, before, reason="a deferred compaction writes nothing yet")
    assert worker.compact() and not worker.compaction_pending and not worker.compact()
    _assert_moved(worker.cache.kv, before, [prefix + s for s in rr.keep_slots], prefix)
    assert worker.expand()  # one forward: the pending leaf (prefix slot) + the new root (tree slot 0)
    verified = PROMPT + [proposal.token_ids[k] for k in path[1:]]
    assert worker.prefix_len == len(verified) and worker.tree.nodes[0].slot == 0
    ref = _plain(worker.model, verified + [bonus])
    _assert_same(worker.cache.kv[:, :, : len(verified) + 1], ref.kv[:, :, : len(verified) + 1])
    assert [n.depth for n in worker.tree.nodes] == [0, 1, 1, 1]


@pytest.mark.parametrize("accept", [0, 1, 2], ids=["root-only", "one", "two"])
@torch.no_grad()
def test_target_keeps_root_and_accepted(accept):
    draft = _model("tiny-llama-draft", 2)
    target = _model("tiny-llama", 1)
    tree, _, prefix = _grow(draft, PROMPT, w=4, topk=3, steps=3)
    sel = tree.select(8)
    tokens, parents = tree.proposal(sel)
    cache = _cache(target)
    target(torch.tensor(PROMPT[:-1]), AttnMeta.causal(0, prefix), cache, ATTN)
    inp = proposal_inputs(tokens, parents, prefix, rows=8)
    target(inp.token_ids, step_meta(inp, prefix, "cpu"), cache, ATTN)
    # Any root-down path of the proposal is a valid outcome; take the deepest one's first `accept` nodes.
    deepest = max(range(len(sel)), key=lambda k: (inp.positions[k], -k))
    chain = [deepest]
    while parents[chain[-1]] >= 0:
        chain.append(parents[chain[-1]])
    path = chain[::-1][: accept + 1]
    before = cache.kv.clone()
    new_prefix = keep_accepted(cache, prefix, path)
    _assert_moved(cache.kv, before, [prefix + k for k in path], prefix)
    verified = PROMPT + [tokens[k] for k in path[1:]]
    assert new_prefix == len(verified)
    ref = _plain(target, verified)
    _assert_same(cache.kv[:, :, :new_prefix], ref.kv[:, :, :new_prefix])


def test_in_place_keeps_launch_no_copy(monkeypatch):
    """Keeping tree slots 0..n-1 (autoregressive roots, accepted chain prefixes) moves nothing: no copy runs;
    any other order still copies."""
    from runtime.tree_cache import in_place

    assert in_place([0]) and in_place((0, 1, 2)) and in_place([]) and not in_place([0, 2]) and not in_place([1])
    cache = KVCache(1, 16, 1, 4, torch.float32, "cpu")
    calls = []
    monkeypatch.setattr(KVCache, "keep", lambda self, src, dst: calls.append((src.tolist(), dst)))
    assert keep_accepted(cache, 5, (0, 1, 2)) == 8 and calls == []
    assert keep_accepted(cache, 5, (0, 2)) == 7 and calls == [([5, 7], 5)]
    keep_slots(cache, 5, (0, 1, 2))  # a re-root whose kept slots already sit in place
    assert len(calls) == 1
    keep_slots(cache, 5, (0, 2, 3))
    assert calls[-1] == ([5, 7, 8], 5)


class CpuStepGraph:
    """Stands in for `runtime.graphs.StepGraph` on CPU, same constructor (patched into the workers, so their own
    `StepSpec`s are what runs): stages the inputs in a real `StepBuffers` and copies
    them as the graph's first node does, applies the owed compaction from them with `kernels.kv_compact`
    (interpreted) as the graph's first kernel does, then runs the step eagerly and applies the head. With a head or a
    verdict: the outputs' host copies (numpy), then the load's ticket, as the graph's last copies write them;
    `host_outputs` waits on that ticket with `wait_for_ticket`. Not for chained steps."""

    def __init__(self, model, cache, attn, spec: StepSpec, *, pool=None) -> None:
        assert not spec.chain, "the CPU stand-in does not chain autoregressive steps"
        self.model, self.cache, self.attn, self.head, self.verdict = model, cache, attn, spec.head, spec.verdict
        self.rows, self.tree_len, self.readback = spec.rows, spec.tree_len, spec.readback
        self.inputs = StepBuffers(spec.rows, spec.tree_len, "cpu", spec.keep_rows)
        self.chained, self.keep_rows, self.loaded, self.calls, self.moved = False, spec.keep_rows, None, 0, 0
        self.flag, self.host = torch.zeros(1, dtype=torch.long).numpy(), ()

    def host_outputs(self):
        wait_for_ticket(self.flag, self.inputs.loads, lambda: True, "CpuStepGraph")
        return self.host

    @property
    def keeps(self) -> bool:
        return self.keep_rows > 0

    @property
    def token_ids(self) -> torch.Tensor:
        return self.inputs.ids

    @property
    def parents(self) -> torch.Tensor:
        return self.inputs.parents

    def load_inputs(self, inp, prefix_len, keep=None):
        self.inputs.load_inputs(inp, prefix_len, keep)
        self.loaded = (inp, prefix_len)

    def launch(self):
        (inp, prefix_len), self.loaded = self.loaded, None
        self.calls += 1
        self.inputs.capture_copy()
        if self.keeps:
            self.moved += int((self.inputs.keep_src >= 0).sum())
            kv_compact(self.cache.kv, self.inputs.keep_src, self.inputs.keep_dst)
        meta = AttnMeta(positions=inp.positions, write_slots=prefix_len + inp.tree_slots, prefix_len=prefix_len,
                        tree_len=self.tree_len, tree_mask=inp.tree_mask)
        logits = self.model(inp.token_ids, meta, self.cache, self.attn)
        if self.verdict is not None:
            out = verdict_outputs(self.verdict, logits, self.inputs.ids, self.inputs.parents)
        else:
            out = logits if self.head is None else self.head(logits)
        if self.readback:
            self.host = tuple(t.numpy().copy() for t in readback_outputs(out, self.verdict is not None))
            self.flag[0] = int(self.inputs.ticket)
        return out


def _draft_worker(graphs: bool, refill_graph: bool = False) -> DraftWorker:
    """The tiny draft (w 4, top-k 3); `graphs`: kernels.cuda_graphs with `CpuStepGraph` standing in for
    its expansion graphs (`refill_graph`: the one-row one too)."""
    with mock.patch("runtime.draft_worker.StepGraph", CpuStepGraph):
        return DraftWorker(_model("tiny-llama-draft", 2), ATTN, DRAFT,
                           KernelFeatures(cuda_graphs=graphs, refill_graph=refill_graph))


@torch.no_grad()
def test_lone_root_expansions_replay_the_one_row_graph_and_match_eager():
    """kernels.refill_graph: the expansion of a lone root (a request's first, a miss's refill) replays the one-row
    graph, carrying the re-root's owed compaction as the others do; the cache and tree equal the eager worker's, the
    children read from the graphs' host copies (numpy, after their ticket)."""
    runs = []
    for graphs in (False, True):
        worker = _draft_worker(graphs, refill_graph=graphs)
        worker.start(PROMPT)
        assert worker.expand() and worker.last_step_rows == (1 if graphs else 4)  # the lone root
        assert worker.expand() and worker.expand() and worker.last_step_rows == 4  # then two of w rows
        prop = worker.propose(0, 0, bs=4)
        kids = {worker.tree.tokens[c] for c in worker.tree.children(0)}
        bonus = next(t for t in range(100) if t not in kids)
        assert not worker.advance((0,), bonus).hit and len(worker.tree) == 1  # a miss at the root: a lone root
        assert worker.expand() and worker.expand()
        runs.append(worker)
        if graphs:
            assert (worker.refill_graph.rows, worker.refill_graph.keep_rows) == (1, MAX_LEN)
            assert (worker.refill_graph.calls, worker.graph.calls, worker.pending_graph.calls) == (2, 3, 0)
            assert worker.pending_refill_graph.calls == 0 and worker.pending_refill_graph.rows == 2
            spun = [g.flag[0] for g in (worker.refill_graph, worker.graph)]
            assert spun == [2, 3]  # each graph's last ticket reached the host
        assert prop.num_nodes == 4
    eager, graphed = runs
    assert eager.prefix_len == graphed.prefix_len
    _assert_same(graphed.cache.kv, eager.cache.kv)
    assert [(n.token, n.parent) for n in graphed.tree.nodes] == [(n.token, n.parent) for n in eager.tree.nodes]


@pytest.mark.parametrize("refill", [False, True], ids=["w+1-rows", "two-rows"])
@pytest.mark.parametrize("moved", [False, True], ids=["in-place", "moving"])
@torch.no_grad()
def test_pending_expansion_replays_the_pending_graph_and_matches_eager(moved, refill):
    """With graphs, an expansion carrying one pending token (after a miss on a never-expanded leaf: a lone root
    behind it) goes to a graph whose head drops the pending row (and whose first kernel applies the re-root's
    compaction, when it moves anything): the (w + 1)-row graph, or with kernels.refill_graph the two-row one (step
    rows 2). Same cache and tree as the eager worker; the plain graph serves the other expansions."""
    runs = []
    for graphs in (False, True):
        worker = _draft_worker(graphs, refill_graph=graphs and refill)
        worker.start(PROMPT)
        assert worker.expand() and worker.expand()
        _, path = path_to_unexpanded_leaf(worker, worker.propose(0, 0, bs=len(worker.tree)), moved)
        assert worker.advance(tuple(path), 5).pending and len(worker.tree) == 1  # a miss on a never-expanded leaf
        assert worker.expand() and worker.last_step_rows == (2 if graphs and refill else 4)  # the pending one
        assert worker.expand() and worker.last_step_rows == 4  # then a plain one
        runs.append(worker)
        if graphs:
            pending = worker.pending_refill_graph if refill else worker.pending_graph
            first = 2 if refill else 3  # with the refill graphs the request's first expansion (a lone root) is one row
            assert (worker.graph.calls, pending.calls) == (first, 1)
            assert (pending.rows, pending.tree_len) == ((2, MAX_LEN) if refill else (5, MAX_LEN + 1))
            assert (worker.graph.keep_rows, pending.keep_rows) == (MAX_LEN, MAX_LEN)
            assert (worker.graph.moved, pending.moved) == (0, 2 if moved else 0)
            if refill:
                assert (worker.refill_graph.calls, worker.pending_graph.calls) == (1, 0)
    eager, graphed = runs
    assert eager.prefix_len == graphed.prefix_len
    _assert_same(graphed.cache.kv, eager.cache.kv)
    assert [(n.token, n.parent) for n in graphed.tree.nodes] == [(n.token, n.parent) for n in eager.tree.nodes]


def _hit_at_root(worker: DraftWorker) -> int:
    """A hit right below the root: the token of the root's child with the most expanded descendants, so the
    surviving subtree's KV moves (it does not start at tree slot 0)."""
    nodes = worker.tree.nodes

    def expanded_below(i: int) -> int:
        return nodes[i].expanded + sum(expanded_below(c) for c in nodes[i].children)

    return nodes[max(nodes[0].children, key=lambda c: (expanded_below(c), -c))].token


@torch.no_grad()
def test_deferred_compaction_runs_before_the_next_expansion_and_in_order():
    """advance() only re-roots the tree; the KV gather waits for compact() (which the next expand runs first),
    and two re-roots without an expansion between them compact in order: the caches end identical to a worker
    that compacts right away."""
    def worker():
        w = DraftWorker(_model("tiny-llama-draft", 2), ATTN, DRAFT)
        w.start(PROMPT)
        assert w.expand() and w.expand() and w.expand()
        return w

    eager, lazy = worker(), worker()
    for _ in range(2):  # two rounds: lazy re-roots twice before expanding
        for w in (eager, lazy):
            w.propose(0, 0, bs=min(8, len(w.tree)))
            before, owed = w.cache.kv.clone(), w.compaction_pending
            rr = w.advance((0,), _hit_at_root(w))
            assert rr.hit and w.compaction_pending and torch.equal(w.cache.kv, before) != owed  # owed: ran first
            if w is eager:
                assert w.compact()
    assert not eager.compaction_pending and lazy.compaction_pending
    assert lazy.prefix_len == eager.prefix_len
    assert lazy.expand() and eager.expand()  # lazy compacts first, then runs the same forward
    assert not lazy.compaction_pending
    _assert_same(lazy.cache.kv, eager.cache.kv)
    assert [(n.token, n.parent, n.slot) for n in lazy.tree.nodes] == [(n.token, n.parent, n.slot)
                                                                       for n in eager.tree.nodes]


@torch.no_grad()
def test_graphs_apply_the_owed_compaction_in_the_next_expansion_replay():
    """With graphs, a re-root's compaction is owed to the next expansion's replay (`compact()` leaves it, the
    graph's first kernel moves it, reading the staged sources): over re-roots with moving subtrees, each followed
    by an expansion, and two re-roots in a row (the first then forced), cache and tree match an eager worker."""
    def worker(graphs: bool) -> DraftWorker:
        w = _draft_worker(graphs)
        w.start(PROMPT)
        assert w.expand() and w.expand() and w.expand()
        return w

    eager, graphed = worker(False), worker(True)
    for rnd in range(4):
        for w in (eager, graphed):
            w.propose(0, rnd, bs=min(8, len(w.tree)))
            before, owed = w.cache.kv.clone(), w.compaction_pending
            assert w.advance((0,), _hit_at_root(w)).hit
            assert torch.equal(w.cache.kv, before) != owed and w.compaction_pending  # owed: forced first
            if w is graphed:
                assert not w.compact() and w.compaction_pending  # left to the replay
            if rnd != 2:  # round 2: a second re-root follows without an expansion
                assert w.expand() and not w.compaction_pending
    assert graphed.graph.moved > 0 and graphed.graph.calls == 3 + 3  # compactions rode in the replays
    assert eager.prefix_len == graphed.prefix_len
    _assert_same(graphed.cache.kv, eager.cache.kv)
    assert [(n.token, n.parent, n.slot) for n in graphed.tree.nodes] == [(n.token, n.parent, n.slot)
                                                                         for n in eager.tree.nodes]


@torch.no_grad()
def test_a_target_graph_applies_the_owed_keep_in_the_next_verify():
    """With a tree verify graph the KV keep after a verdict is owed to the next verify's replay (its first
    kernel); `flush_keep` applies it for anything else (an eager step). Same logits, verdicts and cache as an
    eager target over verifies whose accepted paths move (and one that does not)."""
    from conf.messages import DraftProposal
    from runtime.target_worker import TargetWorker

    def worker(graphs: bool) -> TargetWorker:
        with mock.patch("runtime.target_worker.StepGraph", CpuStepGraph):
            w = TargetWorker(_model("tiny-llama", 1), ATTN, WorkerSpec(5, CAPACITY), KernelFeatures(cuda_graphs=graphs))
        w.start(PROMPT)
        return w

    eager, graphed = worker(False), worker(True)
    parents = (-1, 0, 0, 1, 2)
    for k, path in enumerate([(0, 2, 4), (0, 1), (0, 1, 3), (0, 2)]):
        proposal = DraftProposal(0, k, (5 + k, 6, 7, 8, 9 + k), parents)
        logits = []
        for w in (eager, graphed):
            w.forward(proposal)
            logits.append(w._logits.clone())
            w.decide(None)
            w.keep(path)
        _assert_same(logits[1], logits[0])
        assert graphed.prefix_len == eager.prefix_len
    assert graphed.graph.keep_rows == 5 and graphed.graph.moved == 3 + 0 + 3  # staged rows; (0, 1) moves nothing
    assert graphed.flush_keep() and not graphed.flush_keep()
    used = eager.prefix_len
    _assert_same(graphed.cache.kv[:, :, :used], eager.cache.kv[:, :, :used])


@torch.no_grad()
@pytest.mark.parametrize("oracle", [False, True], ids=["greedy", "oracle"])
def test_a_target_verdict_graph_decides_as_after_the_replay(oracle):
    """A greedy Triton-backend target's verify graph computes its verdict inside (`StepGraph` verdict: "greedy", or
    "argmax" for an oracle run's placeholder token); the worker then decides from its host copies after their
    ticket. Same verdicts and placeholders as an eager target deciding from the logits, over verifies that accept
    nodes (the root's first child is the target's own token, from a probe forward) and padded ones (`CpuStepGraph`,
    kernels.greedy_verify interpreted)."""
    from conf.messages import DraftProposal
    from runtime.oracle import NO_RANK, OracleOutcome
    from runtime.target_worker import TargetWorker

    class FirstChild:  # an oracle outcome: the root's first child accepted, where the proposal has one
        def walk(self, parents):
            return OracleOutcome((0, 1) if len(parents) > 1 else (0,), NO_RANK)

    def worker(graphs: bool) -> TargetWorker:
        with mock.patch("runtime.target_worker.StepGraph", CpuStepGraph):
            w = TargetWorker(_model("tiny-llama", 1), ATTN, WorkerSpec(5, CAPACITY, oracle=oracle),
                             KernelFeatures(backend="triton", cuda_graphs=graphs))
        w.start(PROMPT)
        return w

    eager, graphed = worker(False), worker(True)
    assert graphed.graph.verdict == ("argmax" if oracle else "greedy") and eager.graph is None
    assert graphed.graph.readback
    accepted = 0
    for k, parents in enumerate([(-1, 0, 0, 1, 2), (-1, 0, 1), (-1,), (-1, 0, 0, 1)]):
        ids = [5 + k, 6, 7, 8, 9][: len(parents)]
        verdicts = []
        for w in (eager, graphed):
            w.forward(DraftProposal(0, k, tuple(ids), parents))  # probe: the target's own token after the root
            if len(ids) > 1:
                ids[1] = int(w._logits[0].argmax())
            w.forward(DraftProposal(0, k, tuple(ids), parents))
            verdicts.append(w.decide(None, FirstChild() if oracle else None))
        assert verdicts[1] == verdicts[0], (k, verdicts)
        assert all(type(t) is int for t in (*verdicts[1].path, verdicts[1].bonus))
        assert graphed.graph.flag[0] == 2 * k + 2  # two loads per round (the probe and the verify)
        accepted += verdicts[0].num_accepted
        for w in (eager, graphed):
            w.keep(verdicts[0].path)
    assert accepted >= 3  # every proposal with a child accepted at least its first


def test_keep_slots_takes_only_forward_compaction():
    """Slots must be ascending (what re-rooting and a target's keep produce): the only overlap pattern the CUDA
    kernel supports for any count; anything else is refused before a launch."""
    cache = KVCache(1, 16, 1, 2)
    cache.kv.copy_(torch.arange(cache.kv.numel(), dtype=torch.float32).view_as(cache.kv))
    before = cache.kv.clone()
    keep_slots(cache, 4, (0, 2, 3))
    _assert_moved(cache.kv, before, [4, 6, 7], 4)
    for bad in ((2, 1), (0, 3, 3), (-1, 2)):
        with pytest.raises(ValueError, match="ascending"):
            keep_slots(cache, 4, bad)


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
@torch.no_grad()
def test_fused_head_grows_the_same_tree(graphs):
    """The draft_head feature (`KernelFeatures(draft_head=True)`: kernels.topk_logprobs, the Triton interpreter here)
    grows the tree the torch head grows, through a pending expansion (its head drops the pending row), with the
    same log-probs to float32 rounding."""
    runs = []
    for fused in (False, True):
        with mock.patch("runtime.draft_worker.StepGraph", CpuStepGraph):
            worker = DraftWorker(_model("tiny-llama-draft", 2), ATTN, DRAFT,
                                 KernelFeatures(cuda_graphs=graphs, draft_head=fused))
        worker.start(PROMPT)
        assert worker.expand() and worker.expand()
        _, path = path_to_unexpanded_leaf(worker, worker.propose(0, 0, bs=len(worker.tree)))
        assert worker.advance(tuple(path), 5).pending  # a miss on a never-expanded leaf
        assert worker.expand() and worker.expand()  # the pending one, then a plain one
        runs.append(worker.tree)
    torch_head, fused_head = runs
    assert [(n.token, n.parent, n.slot) for n in fused_head.nodes] == [(n.token, n.parent, n.slot)
                                                                        for n in torch_head.nodes]
    assert fused_head.weights == pytest.approx(torch_head.weights, abs=1e-5)
