"""Target side of speculative decoding: verify proposed subtrees in one forward, keep the accepted KV.

One `TargetWorker` per rank of the target group. Each verify is one forward of the proposal's nodes
(padded to `rows`: bs, gamma + 1, or 1 for autoregressive decoding) with the tree's ancestor mask after
the prefix, then the verdict (greedy, sampled or oracle), then `keep_accepted` (root + accepted nodes
become prefix; the bonus token is the next root, fed by the next verify). Autoregressive decoding is the
special case of a root-only proposal.

The verdict is computed on the group leader; `keep` applies a verdict decided elsewhere (a TP peer
receives the leader's). Stop rules, messages and timing are the engine's.
"""

from __future__ import annotations

import time

import torch

from conf.messages import DraftProposal
from runtime.attention import AttentionBackend
from runtime.graphs import StepGraph
from runtime.kv_cache import KVCache
from runtime.model import Transformer
from runtime.oracle import AcceptanceOracle
from runtime.tree import proposal_inputs
from runtime.tree_cache import keep_accepted, prefill, step_meta
from runtime.verify import Verdict, verify_proposal


class TargetWorker:
    """The target model and its KV cache for one request at a time."""

    def __init__(self, model: Transformer, attn: AttentionBackend, *, rows: int, max_seq_len: int,
                 temperature: float, backend: str, cuda_graphs: bool = False, graph_events: bool = False) -> None:
        """Allocate the cache: `max_seq_len` prefix slots plus `rows` verify slots; capture the verify step.

        `graph_events` (`trace.graph_events`, CUDA graphs only): CUDA events around every verify's input copies and
        graph replay, read back (no extra sync) by `last_device_s` once the verdict has synchronised."""
        self.model, self.attn = model, attn
        self.rows, self.temperature, self.backend = rows, temperature, backend
        self.device = model.norm.weight.device
        layers, heads, head_dim = model.cache_spec()
        # Preallocated once for all requests (static shapes).
        self.cache = KVCache(layers, max_seq_len + rows, heads, head_dim, model.dtype, self.device)
        self.prefix_len = 0
        self._logits: torch.Tensor | None = None
        self._inputs = None
        # One CUDA graph of the verify forward at `rows` (runtime/graphs.py); None = eager forwards. A greedy
        # autoregressive target's graph also hands its token to the next step on the device (`chain_step`).
        chain = rows == 1 and temperature == 0
        self.graph = StepGraph(model, self.cache, attn, rows, rows, chain=chain) if cuda_graphs else None
        self._events = ((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                        if graph_events and self.graph is not None else None)
        self._timed = False
        self.launched_at = 0.0  # time.perf_counter() when the last timed replay was queued

    @torch.no_grad()
    def start(self, prompt: list[int]) -> None:
        """Prefill all prompt tokens but the last (the first root)."""
        self.prefix_len = prefill(self.model, self.cache, self.attn, prompt, self.device)

    @torch.no_grad()
    def forward(self, proposal: DraftProposal) -> None:
        """The verify forward: writes the proposal's KV at the tree slots, keeps its logits for `decide`."""
        inp = proposal_inputs(list(proposal.token_ids), list(proposal.parent_indices), self.prefix_len, self.rows)
        if self.graph is not None:  # [rows, vocab]: the graph's output buffer, valid until the next verify
            if self._events is not None:
                self._events[0].record()
            self._logits = self.graph.replay(inp.token_ids, inp.positions, inp.tree_slots, self.prefix_len,
                                             inp.tree_mask)
            if self._events is not None:
                self._events[1].record()
                self.launched_at = time.perf_counter()  # host: the replay is queued
            self._timed = self._events is not None
        else:
            self._logits = self.model(inp.token_ids.to(self.device), step_meta(inp, self.prefix_len, self.device),
                                      self.cache, self.attn)  # [rows, vocab]
        self._inputs = inp

    def decide(self, generator: torch.Generator | None, oracle: AcceptanceOracle | None = None) -> Verdict:
        """The verdict on the last forward: drawn by the oracle if given, else greedy / sampled."""
        inp, logits = self._inputs, self._logits
        if oracle is not None:
            outcome = oracle.walk(inp.parents[: inp.num_real].tolist())
            placeholder = int(logits[outcome.path[-1]].argmax())  # the draft resolves the real token
            return Verdict(outcome.path, placeholder)
        return verify_proposal(logits, inp.token_ids.to(self.device), inp.parents.to(self.device), inp.num_real,
                               self.temperature, generator, self.backend)

    def last_device_s(self) -> float | None:
        """Device seconds of the last verify's input copies + graph replay (`graph_events`), else None. Call after
        its verdict (which synchronised); it waits for the replay otherwise."""
        if not self._timed:
            return None
        self._events[1].synchronize()
        return self._events[0].elapsed_time(self._events[1]) * 1e-3

    @property
    def can_chain(self) -> bool:
        """Whether `chain_step` is available: a captured greedy autoregressive step."""
        return self.graph is not None and self.graph.chained

    @torch.no_grad()
    def chain_step(self, token: int | None) -> torch.Tensor:
        """Queue one greedy autoregressive step without waiting for it and keep its KV (prefix_len + 1).

        `token`: the root to feed (the first step of a request); None feeds the token the previous chained step
        chose, on the device. Returns the [1] int64 device buffer that will hold this step's greedy token
        (overwritten by the next step: copy it out first).
        """
        if not self.can_chain:
            raise ValueError("TargetWorker.chain_step: needs kernels.cuda_graphs, rows 1 and temperature 0")
        if token is None:
            ids = self.graph.replay_chained()
        else:
            inp = proposal_inputs([token], [-1], self.prefix_len, 1)
            self.graph.replay(inp.token_ids, inp.positions, inp.tree_slots, self.prefix_len, inp.tree_mask)
            ids = self.graph.next_ids
        self.prefix_len += 1
        self._logits = self._inputs = None
        return ids

    def keep(self, path: tuple[int, ...]) -> None:
        """Keep the root and accepted nodes' KV (proposal indices, root first); drop the rest."""
        self.prefix_len = keep_accepted(self.cache, self.prefix_len, path)
        self._logits = self._inputs = None
