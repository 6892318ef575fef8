"""Draft side of speculative decoding: grow the draft tree, propose subtrees, follow verified paths.

One `DraftWorker` per rank of the draft group (or of the target group when the draft is colocated). Every
rank of the group runs the same steps on the same inputs (TP logits are identical on every rank), so the
trees agree without exchanging them; only the leader sends proposals. The worker owns the draft model's
KV cache and the request's `DraftTree`:

    start(prompt)    prefill prompt[:-1]; the tree is the last prompt token alone
    expand()         one draft forward over the w best frontier nodes (and any pending verified
                     tokens); adds their top-k children
    refill(bs)       expand until the tree has >= bs nodes
    propose(...)     select the top-bs subtree -> DraftProposal (remembers the selection)
    advance(...)     re-root along the verified path, count hit / miss; the KV compaction it implies
                     (one gather) is deferred to `compact()`, which the next `expand` runs first, so a
                     proposal that needs no refill can leave before the compaction (async_tree's critical path);
                     with CUDA graphs the next expansion's replay applies it (its first kernel, no host time)

It knows nothing of messages' transport, timing or stop rules (runtime/engine.py).
"""

from __future__ import annotations

import torch

from conf.kernels_config import KernelFeatures
from conf.messages import DraftProposal
from runtime.attention import AttentionBackend
from runtime.fused_decode import Decoder
from runtime.graphs import PrefillGraphs, ReplayTimer, StepGraph, StepSpec
from runtime.kv_cache import KVCache
from runtime.tree import DraftTree, Reroot, StepInputs, TreeStats
from runtime.tree_cache import compaction_sources, keep_slots, prefill, step_meta
from runtime.worker_spec import WorkerSpec


class DraftWorker:
    """The draft model, its KV cache and the current request's tree."""

    def __init__(self, model: Decoder, attn: AttentionBackend, spec: WorkerSpec,
                 kernels: KernelFeatures | None = None) -> None:
        """Allocate the cache: `spec.max_seq_len` prefix slots plus the `spec.max_tree_nodes` tree region; expansions
        run `spec.rows` (w) tree rows and keep `spec.topk` children per node.

        `kernels.cuda_graphs`: capture the expansion step (w rows over the whole tree region, log-softmax and top-k
        included) as one CUDA graph, and a second one for an expansion that carries one pending verified
        token in front (w + 1 rows over 1 + the tree region; `with_pending`): eager, that catch-up step is
        host-bound, several times the replay. More than one pending token (never produced by
        DraftTree.reroot, which leaves at most the path's last node without KV) runs eagerly. Both graphs
        start with the owed re-root compaction (at most `max_tree_nodes` slots: `StepSpec.keep_rows`), and
        end by copying their top-k children to pinned host memory, which the host spins on (`StepGraph.host_outputs`).
        `spec.graph_events` (`trace.graph_events`, CUDA graphs only): CUDA events around every replayed expansion's
        input copies + replay (`last_device_split`). `kernels.draft_head`: the top-k children from
        `kernels.topk_logprobs` instead of torch's log_softmax + topk (eager and captured alike).
        `kernels.refill_graph` (CUDA graphs only): a third graph, one row, for the expansion of a lone root, and a
        fourth, two rows over max_tree_nodes tree slots, for a lone root behind one pending token (a miss at a
        never-expanded leaf, frequent in serial_tree: the w + 1-row pending graph ran 9 rows for these 2 at w 8).
        `kernels.prefill_graph` (CUDA graphs, one-GPU groups): prompt prefills replay graphs per length bucket.
        """
        kernels = kernels or KernelFeatures()
        w, max_tree_nodes, cuda_graphs = spec.rows, spec.max_tree_nodes, kernels.cuda_graphs
        self.model, self.attn = model, attn
        self.w, self.topk, self.max_len = w, spec.topk, max_tree_nodes
        self.temperature = spec.temperature
        self._fused_head = None  # kernels.draft_head: kernels.topk_logprobs, else torch's log_softmax + topk
        if kernels.draft_head:
            from kernels.topk_logprobs import topk_logprobs

            self._fused_head = topk_logprobs
        self.device = model.device
        layers, heads, head_dim = model.cache_spec()
        # Preallocated once for all requests (static shapes).
        self.cache = KVCache(layers, spec.max_seq_len + max_tree_nodes, heads, head_dim, model.dtype, self.device)
        self.prefix_len = 0
        self.tree = DraftTree(0)
        self.pending: tuple[int, ...] = ()  # verified tokens whose KV the draft has not computed yet
        self.selection: list[int] = []  # node ids of the last proposal, in proposal order
        self._deferred: tuple[int, tuple[int, ...]] | None = None  # (old prefix_len, keep slots) to compact
        self.graph = self.pending_graph = self.refill_graph = self.pending_refill_graph = None
        self.belief: list[list[float]] | None = None  # oracle runs: the acceptance table's (runtime/oracle.py)
        if cuda_graphs:
            self._capture_expansions(refill=kernels.refill_graph)
        # kernels.prefill_graph: prompt prefills replayed per length bucket (runtime/graphs.py PrefillGraphs)
        prefill_graph = cuda_graphs and kernels.prefill_graph_for(spec.group_gpus)
        self.prefill_graphs = PrefillGraphs(model, self.cache, attn) if prefill_graph else None
        # trace.graph_events: events and host marks around every replayed expansion's input copies and replay
        self._timer = ReplayTimer("planned") if spec.graph_events and cuda_graphs else None
        self._timed = False  # whether the last expansion was timed (a replay; an eager one is not)
        self.last_rows = 0  # real (not padding) rows of the last expansion: its host cost grows with them
        self.last_step_rows = w  # rows of the last expansion's step: w, or 1 / 2 for the refill graphs

    def _capture_expansions(self, refill: bool) -> None:
        """kernels.cuda_graphs: capture the expansion steps (see `__init__`); each carries the owed re-root compaction
        (at most the tree's slots) and its top-k head."""
        w, n, model, cache, attn = self.w, self.max_len, self.model, self.cache, self.attn
        self.graph = StepGraph(model, cache, attn, StepSpec(w, n, keep_rows=n, head=self._top_children))
        self.pending_graph = StepGraph(model, cache, attn,
                                       StepSpec(w + 1, n + 1, keep_rows=n, head=self._pending_children))
        if refill and w > 1:
            self.refill_graph = StepGraph(model, cache, attn, StepSpec(1, n, keep_rows=n, head=self._top_children))
            # its tree region is max_tree_nodes slots, not + 1 as the w + 1-row graph's: the pending token and the
            # lone root take 2 of them (a 257-slot region costs the 1B's two-row step more than 256 slots)
            self.pending_refill_graph = StepGraph(model, cache, attn,
                                                  StepSpec(2, n, keep_rows=n, head=self._pending_children))

    @property
    def stats(self) -> TreeStats:
        """Hit / miss / expansion counters of the current request."""
        return self.tree.stats

    @torch.no_grad()
    def start(self, prompt: list[int]) -> None:
        """Prefill all prompt tokens but the last, which becomes the root."""
        self._deferred = None  # the previous request's compaction: its KV is overwritten anyway
        self.prefix_len = prefill(self.model, self.cache, self.attn, prompt, self.device, self.prefill_graphs)
        self.tree = DraftTree(prompt[-1])
        self.pending, self.selection = (), []

    @torch.no_grad()
    def expand(self) -> bool:
        """One draft forward over the best `w` frontier nodes; False (and no forward) if none fits.

        Pending verified tokens (see `advance`) ride along in the same forward, in front of the tree rows.
        """
        if not self.can_expand():
            return False
        graph, tree_rows, self.last_step_rows = self._step_graph()
        shift = len(self.pending)
        timer = self._timer if graph is not None else None  # trace.graph_events: time this replay
        self._timed = timer is not None
        if timer is not None:
            timer.begin()
        plan_len = self.max_len if graph is None else graph.tree_len - shift  # mask columns before the pending ones
        nodes, inp = self.tree.plan_expansion(tree_rows, self.prefix_len + shift, plan_len)
        self.last_rows = len(nodes)  # real rows of this expansion (the rest of its step rows are padding)
        if shift:
            inp = with_pending(inp, self.pending, self.prefix_len)
        top_lp, top_tok = self._replay(graph, inp, timer) if graph is not None else self._forward(inp, shift)
        self.prefix_len += shift
        self.pending = ()
        self.tree.grow_topk(nodes, top_lp, top_tok, self.belief)
        return True

    def _replay(self, graph: StepGraph, inp: StepInputs, timer: ReplayTimer | None) -> tuple:
        """A captured expansion: the owed compaction rides in the replay (owed until the load succeeded); returns the
        top-k children as numpy views of the graph's pinned copies (spins until they arrive)."""
        if timer is not None:
            timer.loading()
        graph.load_inputs(inp, self.prefix_len, self._owed_compaction())
        self._deferred = None
        if timer is not None:
            timer.loaded()
        graph.launch()
        if timer is not None:
            timer.launched()
        return graph.host_outputs()

    def _forward(self, inp: StepInputs, shift: int) -> tuple[torch.Tensor, torch.Tensor]:
        """An eager expansion (after the owed compaction) over `shift` pending rows and the tree rows: the tree rows'
        top-k children, on the device."""
        self.compact(force=True)
        logits = self.model(inp.token_ids.to(self.device), step_meta(inp, self.prefix_len, self.device),
                            self.cache, self.attn)  # [shift + w, vocab]
        return self._top_children(logits[shift:])

    def _step_graph(self) -> tuple[StepGraph | None, int, int]:
        """(the captured step the next expansion replays, None: eager; the tree rows it plans; its step rows as the
        trace records them). A lone root takes the one-row graph, or the two-row one behind a pending token
        (`kernels.refill_graph`): step rows 1 / 2. Otherwise w tree rows (step rows w), in the w-row graph or the
        w + 1-row one behind a pending token; more pending tokens run eagerly."""
        shift = len(self.pending)
        if len(self.tree) == 1 and self.refill_graph is not None and shift <= 1:
            return (self.pending_refill_graph if shift else self.refill_graph), 1, 1 + shift
        return (self.graph if not shift else self.pending_graph if shift == 1 else None), self.w, self.w

    def last_device_split(self) -> dict[str, float] | None:
        """The last expansion, if replayed and timed (`graph_events`), else None: device seconds from its start to
        its input copies (`inputs_s`), of the copies (`copies_s`) and from their end to the graph's end (`replay_s`:
        launch latency included), and the host's marks in seconds after the expansion's start: `planned_s` (tree
        planned, inputs built), `copied_s` (copies queued), `launched_s` (replay queued). Call after the expansion
        (which synchronised on its top-k read-back)."""
        if not self._timed:
            return None
        return {**self._timer.device_split(), **self._timer.relative_marks()}

    @property
    def host_marks(self) -> dict[str, float]:
        """Host clock of the last timed expansion: "start", "planned", "copied", "launched"; empty if none."""
        return self._timer.marks if self._timer is not None else {}

    def _top_children(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[w, vocab] logits -> the top-k children's (log-probs, token ids) [w, k], on the device."""
        if self._fused_head is not None:
            scale = 1.0 / self.temperature if self.temperature > 0 else 1.0
            return self._fused_head(logits.float(), min(self.topk, logits.shape[-1]), scale)
        if self.temperature > 0:
            logits = logits / self.temperature
        top = torch.topk(torch.log_softmax(logits.float(), dim=-1), min(self.topk, logits.shape[-1]), dim=-1)
        return top.values, top.indices

    def _pending_children(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The head of a step with one pending row in front: top-k children of the w tree rows."""
        return self._top_children(logits[1:])

    def refill(self, bs: int) -> int:
        """Expand until the tree has at least `bs` nodes (or cannot grow); returns expansions run."""
        done = 0
        while len(self.tree) < bs and self.expand():
            done += 1
        return done

    def propose(self, request_id: int, iteration: int, bs: int) -> DraftProposal:
        """The top-`bs` subtree (best-first) as a message; remembered for `advance`."""
        self.selection = self.tree.select(bs)
        tokens, parents = self.tree.proposal(self.selection)
        return DraftProposal(request_id, iteration, tuple(tokens), tuple(parents))

    def expected_tokens(self) -> float:
        """The last proposal's expected yield under the tree's weights (`DraftTree.expected_tokens`)."""
        return self.tree.expected_tokens(self.selection)

    def verified_ranks(self, node_indices: tuple[int, ...], bonus: int) -> list[int]:
        """Draft ranks of a verified path (proposal indices, root first) and its bonus token, before `advance`:
        each accepted node's rank among its parent's children in the draft tree, then the bonus token's among
        the last node's children (-1: not one of them, a miss). iterations.csv's `ranks` column."""
        tree = self.tree
        path = [self.selection[k] for k in node_indices]
        ranks = [tree.children(p).index(c) for p, c in zip(path, path[1:])]
        kids = [tree.tokens[c] for c in tree.children(path[-1])]
        ranks.append(kids.index(bonus) if bonus in kids else -1)
        return ranks

    def children_tokens(self, proposal_index: int) -> list[int]:
        """Tokens of a proposed node's children in the draft tree, by draft rank (for the oracle)."""
        tree = self.tree
        return [tree.tokens[c] for c in tree.children(self.selection[proposal_index])]

    def advance(self, node_indices: tuple[int, ...], bonus: int) -> Reroot:
        """Follow a verified path (proposal indices, root first) and its bonus token.

        Host bookkeeping only: the cache compaction is deferred to `compact()` (`expand` runs it first), so
        the next proposal can be selected and sent before it. `prefix_len` is already the new one.
        """
        path = [self.selection[k] for k in node_indices]
        reroot = self.tree.reroot(path, bonus)
        self.compact(force=True)  # two re-roots without an expansion between them: keep their order
        self._deferred = (self.prefix_len, reroot.keep_slots)
        self.prefix_len += reroot.num_promoted
        self.tree, self.pending, self.selection = reroot.tree, reroot.pending, []
        return reroot

    @property
    def compaction_pending(self) -> bool:
        """Whether a re-root's KV compaction still waits for `compact()`."""
        return self._deferred is not None

    def compact(self, force: bool = False) -> bool:
        """Apply the last re-root's KV compaction (one gather over every layer) if it is still pending;
        returns whether one ran. With CUDA graphs it is left to the next expansion's replay unless `force`
        (anything else that reads the cache first). Nothing pending costs no torch call (every re-root asks)."""
        if self._deferred is None or (self.graph is not None and not force):
            return False
        old_prefix, slots = self._deferred
        self._deferred = None
        with torch.no_grad():
            keep_slots(self.cache, old_prefix, slots)
        return True

    def can_expand(self) -> bool:
        """Whether `expand` would run a forward now (a frontier node and `w` free tree slots)."""
        return self.tree.can_expand(self.w, self.max_len)

    def _owed_compaction(self) -> tuple[int, list[int]] | None:
        """The owed compaction as (destination, source slots) for a graph replay (None: nothing moves)."""
        if self._deferred is None:
            return None
        old_prefix, slots = self._deferred
        src = compaction_sources(old_prefix, slots)
        return None if src is None else (old_prefix, src)


def with_pending(inp: StepInputs, pending: tuple[int, ...], prefix_len: int) -> StepInputs:
    """Prepend the pending verified tokens to an expansion step, as causal rows at the prefix's end.

    Pending tokens exist only after a miss whose accepted path ended at a leaf the draft never expanded;
    the new tree is then a lone root. `inp` was planned after a prefix of `prefix_len + n` tokens (n =
    len(pending)), so its tree slots and positions already hold; here the tree slots shift right by n and
    the pending rows take tree slots 0..n-1 of the step (= prefix slots prefix_len..prefix_len+n-1):

        pending row i:  sees pending rows 0..i             position prefix_len + i
        tree row:       sees every pending row + its mask  position unchanged
    """
    n, rows, max_len = len(pending), inp.rows, inp.max_len
    cols = n + max_len
    flat = bytearray((n + rows) * cols)
    for i in range(n):  # pending row i: pending rows 0..i
        flat[i * cols:i * cols + i + 1] = b"\x01" * (i + 1)
    for r in range(rows):  # tree row: every pending row, then its own mask
        base = (n + r) * cols
        flat[base:base + n] = b"\x01" * n
        flat[base + n:base + cols] = inp.mask_flat[r * max_len:(r + 1) * max_len]
    return StepInputs(
        ids=list(pending) + inp.ids,
        pos=list(range(prefix_len, prefix_len + n)) + inp.pos,
        slots=list(range(n)) + [s + n for s in inp.slots],
        mask_flat=flat,
        max_len=cols,
        parent_rows=[-1] * n + inp.parent_rows,
        num_real=inp.num_real,
    )
