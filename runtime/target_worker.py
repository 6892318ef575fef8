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

import torch

from conf.kernels_config import KernelFeatures
from conf.messages import DraftProposal
from runtime.attention import AttentionBackend
from runtime.fused_decode import Decoder
from runtime.graphs import PrefillGraphs, ReplayTimer, StepGraph, StepSpec
from runtime.kv_cache import KVCache
from runtime.oracle import AcceptanceOracle
from runtime.tree import proposal_inputs
from runtime.tree_cache import apply_compaction, compaction_sources, keep_accepted, prefill, step_meta
from runtime.verify import Verdict, verify_proposal
from runtime.worker_spec import WorkerSpec


class TargetWorker:
    """The target model and its KV cache for one request at a time."""

    def __init__(self, model: Decoder, attn: AttentionBackend, spec: WorkerSpec,
                 kernels: KernelFeatures | None = None) -> None:
        """Allocate the cache: `spec.max_seq_len` prefix slots plus `spec.rows` verify slots; with
        `kernels.cuda_graphs` capture the verify step (`verify_step`).

        `spec.graph_events` (`trace.graph_events`, CUDA graphs only): CUDA events around every verify's input copies
        and graph replay, read back (no extra sync) by `last_device_s` once the verdict has synchronised.
        `kernels.prefill_graph` (CUDA graphs, one-GPU groups): prompt prefills replay graphs per length bucket."""
        kernels = kernels or KernelFeatures()
        self.model, self.attn = model, attn
        self.rows, self.temperature, self.backend = spec.rows, spec.temperature, kernels.backend
        self.device = model.device
        layers, heads, head_dim = model.cache_spec()
        # Preallocated once for all requests (static shapes).
        self.cache = KVCache(layers, spec.max_seq_len + spec.rows, heads, head_dim, model.dtype, self.device)
        self.prefix_len = 0
        self._logits: torch.Tensor | None = None
        self._inputs = None
        # One CUDA graph of the verify forward at `rows` (runtime/graphs.py); None = eager forwards.
        self.graph = StepGraph(model, self.cache, attn, verify_step(spec, kernels)) if kernels.cuda_graphs else None
        self._owed_keep: tuple[int, list[int]] | None = None  # (destination, source slots) for the next graph
        # trace.graph_events: events and host marks around every verify's input copies and replay
        self._timer = ReplayTimer("inputs") if spec.graph_events and self.graph is not None else None
        # kernels.prefill_graph: prompt prefills replayed per length bucket (runtime/graphs.py PrefillGraphs)
        prefill_graph = kernels.cuda_graphs and kernels.prefill_graph_for(spec.group_gpus)
        self.prefill_graphs = PrefillGraphs(model, self.cache, attn) if prefill_graph else None

    @torch.no_grad()
    def start(self, prompt: list[int]) -> None:
        """Prefill all prompt tokens but the last (the first root)."""
        self._owed_keep = None  # the previous request's: its slots are overwritten anyway
        self.prefix_len = prefill(self.model, self.cache, self.attn, prompt, self.device, self.prefill_graphs)

    @torch.no_grad()
    def forward(self, proposal: DraftProposal) -> None:
        """The verify forward: writes the proposal's KV at the tree slots, keeps its logits for `decide`."""
        timer = self._timer
        if timer is not None:
            timer.begin()
        inp = proposal_inputs(list(proposal.token_ids), list(proposal.parent_indices), self.prefix_len, self.rows)
        if self.graph is not None:  # [rows, vocab]: the graph's output buffer, valid until the next verify
            if timer is not None:
                timer.loading()
            self.graph.load_inputs(inp, self.prefix_len, self._owed_keep)  # owed until the load succeeded
            self._owed_keep = None
            if timer is not None:
                timer.loaded()
            out = self.graph.launch()
            self._logits = out if isinstance(out, torch.Tensor) else out[0]  # a verdict graph's: (logits, ...)
            if timer is not None:
                timer.launched()
        else:
            self.flush_keep()
            self._logits = self.model(inp.token_ids.to(self.device), step_meta(inp, self.prefix_len, self.device),
                                      self.cache, self.attn)  # [rows, vocab]
        self._inputs = inp

    def decide(self, generator: torch.Generator | None, oracle: AcceptanceOracle | None = None) -> Verdict:
        """The verdict on the last forward: drawn by the oracle if given, else greedy / sampled."""
        inp, logits = self._inputs, self._logits
        argmax = packed = None
        if self.graph is not None and self.graph.readback:  # a verdict graph's outputs (numpy), once the ticket arrived
            argmax, *rest = self.graph.host_outputs()
            packed = rest[0] if rest else None
        if oracle is not None:
            outcome = oracle.walk(inp.parent_rows[: inp.num_real])
            # the draft resolves the real token; a verdict graph computed the rows' argmax: no launch
            last = outcome.path[-1]
            placeholder = int(argmax[last] if argmax is not None else logits[last].argmax())
            return Verdict(outcome.path, placeholder, outcome.bonus_rank)
        if packed is not None and self.temperature == 0:  # the graph's greedy verdict
            *path_list, n, bonus = packed.tolist()
            return Verdict(tuple(path_list[: n + 1]), bonus)
        if self.graph is not None and self.graph.chained:
            # A greedy one-row step (a TP > 1 or unchained autoregressive target): its graph already wrote the
            # argmax of its logits (`StepSpec.chain`), which is the verdict: one device -> host read instead
            # of the verify's argmax, kernel, copies and concatenation (~0.1-0.2 ms of host time on the H200 host).
            return Verdict((0,), int(self.graph.next_ids.item()))
        if self.temperature > 0:  # sampled: the tree walk reads ids and parents on the host (no read-back)
            ids, parents = inp.token_ids, inp.parents
        elif self.graph is not None:  # greedy: the inputs the graph's copy put on the device
            ids, parents = self.graph.token_ids, self.graph.parents
        else:
            ids, parents = inp.token_ids.to(self.device), inp.parents.to(self.device)
        return verify_proposal(logits, ids, parents, inp.num_real, self.temperature, generator, self.backend)

    def last_device_s(self) -> float | None:
        """Device seconds of the last verify's input copies + graph replay (`graph_events`), else None. Call after
        its verdict (which synchronised); it waits for the replay otherwise."""
        split = self.last_device_split()
        return None if split is None else split["copies_s"] + split["replay_s"]

    def last_device_split(self) -> dict[str, float] | None:
        """The last timed verify on the device (`graph_events`), else None: `inputs_s` from its start to its input
        copies (the host building the inputs, or earlier work still queued), `copies_s`, `replay_s` (from the
        copies' end to the graph's end: the graph's launch latency included)."""
        return self._timer.device_split() if self._timer is not None else None

    @property
    def host_marks(self) -> dict[str, float]:
        """Host clock of the last timed verify (`graph_events`): "start", "inputs" (built), "copied", "launched";
        empty if none."""
        return self._timer.marks if self._timer is not None else {}

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
            raise ValueError("TargetWorker.chain_step: needs CUDA graphs (kernels=graphs), rows 1 and temperature 0")
        self.flush_keep()  # (a one-row step's keep never moves anything)
        if token is None:
            ids = self.graph.replay_chained()
        else:
            self.graph.load_inputs(proposal_inputs([token], [-1], self.prefix_len, 1), self.prefix_len)
            self.graph.launch()
            ids = self.graph.next_ids
        self.prefix_len += 1
        self._logits = self._inputs = None
        return ids

    def keep(self, path: tuple[int, ...]) -> None:
        """Keep the root and accepted nodes' KV (proposal indices, root first); drop the rest.

        With a tree verify's CUDA graph the move is owed to the next verify's replay (its first kernel, no host
        time; `runtime.graphs`); `flush_keep` applies it now. `prefix_len` is the new one either way."""
        self.flush_keep()
        if self.graph is not None and self.graph.keeps:
            src = compaction_sources(self.prefix_len, path)
            self._owed_keep = None if src is None else (self.prefix_len, src)
            self.prefix_len += len(path)
        else:
            self.prefix_len = keep_accepted(self.cache, self.prefix_len, path)
        self._logits = self._inputs = None

    def flush_keep(self) -> bool:
        """Apply an owed KV keep now (before anything but the verify graph reads the cache); whether one was owed."""
        owed, self._owed_keep = self._owed_keep, None
        if owed is not None:
            apply_compaction(self.cache, *owed)
        return owed is not None


def verify_step(spec: WorkerSpec, kernels: KernelFeatures) -> StepSpec:
    """The target's captured verify step: `spec.rows` rows over as many tree slots.

    A greedy autoregressive target's step (one row, temperature 0) also hands its token to the next step on the
    device (`chain`, `TargetWorker.chain_step`). Any other applies the last verdict's KV keep in front of its forward
    (`keep_rows`, `TargetWorker.keep`), and a greedy Triton-backend one also computes what its verdict reads
    (`verdict`): the greedy verdict, or with `spec.oracle` (the verdict is drawn; the target only supplies a
    placeholder token) the rows' argmax, copied to pinned host memory, which `decide` spins on
    (`StepGraph.host_outputs`): no read-back call and no stream sync after the replay. A chained or sampled target
    reads its logits on the device."""
    chain = spec.rows == 1 and spec.temperature == 0
    greedy_triton = not chain and spec.temperature == 0 and kernels.backend == "triton"
    verdict = ("argmax" if spec.oracle else "greedy") if greedy_triton else None
    return StepSpec(spec.rows, spec.rows, keep_rows=0 if chain else spec.rows, chain=chain, verdict=verdict)
