"""Decoding engine: the four modes in one loop family, and `run_rank`, the entry `launch` calls per rank.

| mode           | proposal per iteration                         | where the draft runs                   |
|----------------|------------------------------------------------|----------------------------------------|
| autoregressive | the root alone (rows = 1)                      | no draft                               |
| chain          | greedy chain of gamma tokens (w = topk = 1)    | target ranks, or its own group; serial |
| serial_tree    | refill + `d` best-first expansions, top-bs     | target ranks, or its own group; serial |
| async_tree     | top-bs; `d` expansions overlap the verify      | its own group (SwiftSpec Algorithm 1)  |

Loops ([P] Algorithm 1; notes §1.2). Target leader: `recv proposal -> verify -> send verified path -> keep
the accepted KV`. Draft leader: `propose -> send -> compact -> [async: expand d times] -> recv verified path
-> re-root -> (refill: compact, expand) -> propose ...`: what is not needed to build the next message (the
target's KV keep, the draft's KV compaction when no refill is needed) runs after the send, off the other
side's critical path. Colocated (no draft group): `propose -> verify -> keep -> advance` on the same ranks.
Inside a group, non-leaders get messages by broadcast (`LeaderChannel`) and run the same forwards (TP).

Stop rule, applied token by token to what a verify emits (the same as `runtime.reference`): after the EOS
token, after `max_new_tokens`, or when prompt + output reaches `workload.max_seq_len_tokens`. The target
leader decides and sets `VerifiedPath.stop`.

Metrics: every step is a `Timeline` span (step.prefill / verify / keep / expand / reroot / compact / select /
iteration, and
the channel's comm.* spans); rank 0 gathers all spans and derives the per-iteration rows and the metrics
dict of docs/CONTRACTS.md from them (`iteration_rows`).
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch

from conf.messages import DraftProposal, VerifiedPath
from conf.presets import model_preset
from conf.schema import ExperimentConfig, SpecConfig
from conf.trace import TraceRecord
from policy.predicates import chained_autoregressive
from runtime.attention import make_attention_backend
from runtime.controller import (
    DepthTuner,
    Emitter,
    SerialDepthTuner,
    load_workload,
    prompt_source,
    request_generator,
    stop_reason,
)
from runtime.draft_worker import DraftWorker
from runtime.fused_decode import WEIGHT_BITS, decode_model
from runtime.gc_policy import gc_policy
from runtime.launch import report_partial
from runtime.loader import build_model
from runtime.metrics import Progress, Timeline, device_name, summarize
from runtime.oracle import AcceptanceOracle, OracleOutcome, oracle_belief, resolve_bonus
from runtime.parallel import ParallelContext, leader_ranks
from runtime.target_worker import TargetWorker
from runtime.tree_cache import in_place
from runtime.unix_channel import make_channel, recv_spin_s
from runtime.worker_spec import WorkerSpec


@dataclass(frozen=True)
class SpecShape:
    """The speculation shape a mode runs with."""

    rows: int  # verify width: bs (gamma + 1 in chain mode, 1 autoregressive)
    w: int
    topk: int
    d: int | None  # serial: expansions after the refill; async: expansions per verify (None = auto: the tuner's)


def spec_shape(spec: SpecConfig) -> SpecShape:
    """Chain = a w = topk = 1 tree of gamma + 1 nodes; a tree mode's d is spec.d, None for auto (the depth tuner's:
    policy/depth_tuner.py DepthTuner for async_tree, SerialDepthTuner for serial_tree)."""
    if spec.mode == "autoregressive":
        return SpecShape(1, 1, 1, 0)
    if spec.mode == "chain":
        return SpecShape(spec.gamma + 1, 1, 1, 0)
    return SpecShape(spec.bs, spec.w, spec.topk, spec.d_fixed)


class Engine:
    """One rank's part of a run: its workers, the cross-group channel, and the mode loops."""

    def __init__(self, ctx: ParallelContext, cfg: ExperimentConfig, timeline: Timeline,
                 eos_token_id: int | None) -> None:
        """Build this rank's models (sharded on its group) and workers."""
        check_runtime_support(cfg)
        if cfg.kernels.cuda_graphs and ctx.device.type != "cuda":
            raise ValueError(f"kernels: {cfg.kernels.preset} captures CUDA graphs, which need CUDA devices; this rank "
                             f"runs on {ctx.device}; "
                             f"use kernels=triton or kernels=reference")
        self.ctx, self.cfg, self.tl, self.eos = ctx, cfg, timeline, eos_token_id
        spec, self.shape = cfg.spec, spec_shape(cfg.spec)
        self.mode, self.oracle_on = spec.mode, spec.oracle and spec.mode != "autoregressive"
        self.colocated = ctx.num_draft == 0
        attn = make_attention_backend(cfg.kernels.backend)
        set_launch_policy(cfg)
        target_spec, draft_spec = worker_specs(cfg, self.shape, ctx.group_size)
        self.target = self.draft = None
        if ctx.role == "target":
            self.target = TargetWorker(self._model(cfg.model.target, target=True), attn, target_spec,
                                       cfg.kernels.features)
        if self.mode != "autoregressive" and (ctx.role == "draft" or self.colocated):
            self.draft = DraftWorker(self._model(cfg.model.draft), attn, draft_spec, cfg.kernels.features)
            if self.oracle_on:
                self.draft.belief = oracle_belief(cfg.acceptance, self.shape.topk)
        # Greedy autoregressive decoding on one GPU with graphs: step i + 1 is queued before token i is read.
        self.chained = chained_autoregressive(cfg) and self.target is not None and self.target.can_chain
        if self.chained:  # double-buffered token read-back (runtime/graphs.py, chained steps)
            self._token_host = [torch.empty(1, dtype=torch.long, pin_memory=True) for _ in range(2)]
            self._token_ready = [torch.cuda.Event() for _ in range(2)]
        self.channel = make_channel(ctx, cfg.parallel.leader_channel, self.shape.rows, timeline,
                                    spin_s=recv_spin_s(ctx.device))
        # Auto d never exceeds the expansions an empty tree of max_tree_nodes can take (serial: nor bs - 1).
        self.tuner = (SerialDepthTuner(self.shape.d, ctx, spec.bs, spec.w, spec.max_tree_nodes)
                      if self.mode == "serial_tree" else
                      DepthTuner(self.shape.d, ctx, d_max=max(1, spec.max_tree_nodes // self.shape.w)))
        self.iteration = 0  # global over requests: both sides count proposals the same way
        self.progress = Progress(0, enabled=False)  # run_rank installs the live display (rank 0)
        self.tokens_done = 0  # tokens of finished requests, for the progress display

    def prepare_prefills(self, prompts: list[list[int]]) -> None:
        """kernels.prefill_graph: capture the prefill graphs these prompts need now, before the timed region (every rank
        of a group captures the same buckets, in the same order: a TP group's all-reduces are captured together)."""
        for worker in (self.target, self.draft):
            if worker is not None and worker.prefill_graphs is not None:
                worker.prefill_graphs.prepare([len(p) - 1 for p in prompts])

    def _model(self, mcfg: Any, target: bool = False) -> Any:
        """The decoder of `mcfg` on this rank with the configured kernels for its role
        (`runtime.fused_decode.decode_model`: the plain model, or the fused Triton path given the model's TP group)."""
        return decode_model(self._build_model(mcfg), self.cfg.kernels.features, target=target,
                            weight_bits=mcfg.weight_bits, tp_group=self.ctx.tp_group)

    def _build_model(self, mcfg: Any) -> Any:
        """Build (load or seed) the model's shard on this rank; benchmarks override this to cache models."""
        return build_model(model_preset(mcfg.preset), mcfg.dtype, self.ctx.device, self.cfg.seed,
                           group=self.ctx.tp_group, checkpoint=mcfg.checkpoint)

    # ---- one request: the loops ----------------------------------------------------------------------------
    def generate(self, rid: int, prompt: list[int]) -> list[int] | None:
        """Decode one request; the generated tokens on the target leader, None elsewhere."""
        if self.ctx.role == "target":
            emitter = Emitter(prompt, self.cfg.workload.max_new_tokens, self.cfg.workload.max_seq_len_tokens,
                              None if self.oracle_on else self.eos)
            if self.chained:
                self._autoregressive_chained(rid, prompt, emitter)
            elif self.colocated or self.mode == "autoregressive":
                self._colocated_loop(rid, prompt, emitter)
            else:
                self._target_loop(rid, prompt, emitter)
            return emitter.tokens if self.ctx.is_leader else None
        if self.mode != "autoregressive":
            self._draft_loop(rid, prompt)
        return None

    def _target_loop(self, rid: int, prompt: list[int], emitter: Emitter) -> None:
        """[P] Algorithm 1, target worker: receive a subtree, verify it, send the verified path, keep its KV."""
        gen, oracle, _ = self._generators(rid)
        self._prefill(prompt)
        while True:
            start, it = self.tl.now(), self._next_iteration()
            prop = self._receive_proposal(rid, it)
            vp = self._verify(prop, emitter, gen, oracle)
            if self.ctx.is_leader:
                self.channel.send(vp)
            self._keep(vp)  # after the send: the draft's re-root does not wait for it
            self._iteration_done(start, it, rid, emitter)
            if vp.stop:
                return

    def _draft_loop(self, rid: int, prompt: list[int]) -> None:
        """[P] Algorithm 1, draft worker: propose (refill + select), send, compact the last re-root's KV, expand d
        times while the target verifies (async_tree; d = 0 in the serial modes), receive the verified path, re-root."""
        oracle = self._generators(rid)[2]
        self._prefill(prompt)
        first = True  # the request's first round (the depth tuner does not time it)
        while True:
            it = self._next_iteration()
            prop = self._propose(rid, it)
            self._send_proposal(prop, first)
            d = self.tuner.shared_d() if self.mode == "async_tree" else 0  # overlapped expansions this round
            # the last re-root's KV gather, after the send (a refill already ran it); with graphs the next
            # expansion's replay applies it, so it runs here only if no expansion follows before the next re-root
            self._compact(it, force=not (d > 0 and self.draft.can_expand()))
            # Oracle runs: draw this proposal's outcome now, while the target verifies (same seeded stream as
            # the target's): oracle bookkeeping, which a real draft does not have, stays off the critical path.
            outcome = oracle.walk(prop.parent_indices) if oracle is not None else None
            for _ in range(d):
                self._expand(it, "overlap")
            vp = self._receive_verified()
            self._advance(prop, vp, oracle, outcome)
            if vp.stop:
                return
            first = False

    def _colocated_loop(self, rid: int, prompt: list[int], emitter: Emitter) -> None:
        """Draft and target on the same ranks, in turn (chain, serial_tree; autoregressive: no draft, the root alone):
        propose, verify, keep, advance."""
        gen, t_oracle, d_oracle = self._generators(rid)
        self._prefill(prompt)
        first = True  # the request's first round (the depth tuner does not time it)
        while True:
            start, it = self.tl.now(), self._next_iteration()
            if self.draft is not None:
                prop = self._propose(rid, it)
                self._tuner_sent(first)
            else:  # autoregressive: the root alone, i.e. the last token so far
                prop = DraftProposal(rid, it, ((emitter.tokens or prompt)[-1],), (-1,))
            vp = self._verify(prop, emitter, gen, t_oracle)
            self._keep(vp)
            if self.draft is not None:
                self.tuner.received(vp.num_accepted + 1)
                self._advance(prop, vp, d_oracle)
            first = False
            self._iteration_done(start, it, rid, emitter)
            if vp.stop:
                return

    def _autoregressive_chained(self, rid: int, prompt: list[int], emitter: Emitter) -> None:
        """Greedy autoregressive decoding that keeps the GPU busy: step k + 1 (fed on the device with step k's argmax,
        `TargetWorker.chain_step`) is queued before the host reads token k, so the host's work per token (read-back,
        stop rule, spans) overlaps the next step instead of idling the GPU. Emits what `_colocated_loop` emits; a step
        past an EOS is computed and dropped (none is queued past `max_new_tokens`). Spans: step k's verify (= iteration)
        span runs from token k - 1's arrival on the host to token k's, the per-token time the host sees."""
        self._prefill(prompt)
        host, ready = self._token_host, self._token_ready

        def queue(k: int, token: int | None) -> None:
            ids = self.target.chain_step(token)
            host[k % 2].copy_(ids, non_blocking=True)
            ready[k % 2].record()

        ctx, start = len(prompt) - 1, self.tl.now()
        queue(0, prompt[-1])
        k = 0
        while True:
            it = self._next_iteration()
            ahead = len(emitter.tokens) + 1 < emitter.limit  # token k is not the last one by length
            if ahead:
                queue(k + 1, None)
            ready[k % 2].synchronize()
            stop = emitter.emit([int(host[k % 2])])
            now = self.tl.now()
            self.tl.add("step.verify", start, now - start, iteration=it, tokens=1, ctx_len=ctx + k,
                        extra={"request": rid, "accepted": 0, "emitted": 1, "chained": True})
            self.tl.add("step.iteration", start, now - start, iteration=it, extra={"request": rid})
            self.progress.update(self.tokens_done + len(emitter.tokens))
            start = now
            if stop:
                if ahead:
                    ready[(k + 1) % 2].synchronize()  # the dropped step: done before the next request's prefill
                return
            k += 1

    # ---- steps: prefill, propose, expand, verify, keep, compact, advance ---------------------------------------
    def _prefill(self, prompt: list[int]) -> None:
        for worker in (self.target, self.draft):
            if worker is not None:
                with self.tl.span("step.prefill", tokens=len(prompt) - 1, extra={"model": type(worker).__name__}):
                    worker.start(prompt)

    def _propose(self, rid: int, it: int) -> DraftProposal:
        """Refill (+ serial modes' extra expansions), then select the top-bs subtree. A re-root's KV compaction
        runs first (its own span) when a forward follows here, else after the send (`_draft_loop`)."""
        rows = self.shape.rows
        serial_d = self.tuner.shared_d() if self.mode == "serial_tree" else 0  # fixed, or the tuner's this round
        if len(self.draft.tree) < rows or serial_d > 0:
            self._compact(it, deferred=False)
        while len(self.draft.tree) < rows and self._expand(it, "refill"):
            pass
        for _ in range(serial_d):
            self._expand(it, "serial")
        with self.tl.span("step.select", iteration=it, tokens=rows):
            return self.draft.propose(rid, it, rows)

    def _expand(self, it: int, phase: str) -> bool:
        """Draft: one expansion (`phase`: refill, serial or overlap), timed for the depth tuner; False if none fits."""
        start = self.tl.now()
        done = self.draft.expand()
        if done:
            took = self.tl.now() - start
            self.tuner.expanded(took)
            extra: dict[str, object] = {"phase": phase, "rows": self.draft.last_rows}
            split = self.draft.last_device_split()  # trace.graph_events: the replay's device time, host marks
            if split is not None:
                extra.update(device_s=split["copies_s"] + split["replay_s"], gpu_copies_s=split["copies_s"],
                             gpu_replay_s=split["replay_s"],
                             **{k: split[k] for k in ("planned_s", "copied_s", "launched_s")})
            # tokens: the step's rows (w; 1 or 2 for a lone root's refill graphs), which calibration prices it at
            self.tl.add("step.expand", start, took, iteration=it, tokens=self.draft.last_step_rows,
                        ctx_len=self.draft.prefix_len, extra=extra)
        return done

    def _verify(self, prop: DraftProposal, emitter: Emitter, gen: torch.Generator | None,
                oracle: AcceptanceOracle | None) -> VerifiedPath:
        """Target group: one forward over the proposal; the leader decides and emits, its TP peers get the verified
        path by broadcast and mirror the output. The KV keep is `_keep`'s."""
        if oracle is not None and emitter.tokens:  # the draft resolved the last bonus (a placeholder): the new root
            emitter.replace_last(prop.token_ids[0])
        start, t0 = self.tl.now(), time.perf_counter()
        self.target.forward(prop)
        vp = decided = None
        if self.ctx.is_leader:
            verdict = self.target.decide(gen, oracle)
            decided = time.perf_counter() - t0
            tokens = tuple(prop.token_ids[k] for k in verdict.path) + (verdict.bonus,)
            vp = VerifiedPath(prop.request_id, prop.iteration, tokens, verdict.path, emitter.emit(list(tokens[1:])))
        if self.ctx.group_size > 1:
            vp = self.channel.broadcast_in_group(vp)
            if not self.ctx.is_leader:  # mirror the leader's output: autoregressive steps feed its last token
                emitter.emit(list(vp.token_ids[1:]))
        duration = self.tl.now() - start
        self.tl.add("step.verify", start, duration, iteration=prop.iteration, tokens=self.shape.rows,
                    ctx_len=self.target.prefix_len, extra=self._verify_extra(vp, t0, decided))
        return vp

    def _verify_extra(self, vp: VerifiedPath, t0: float, decided: float | None) -> dict[str, Any]:
        """The step.verify span's extra: the verdict, and on the leader with trace.graph_events the replay's device
        time and its parts, and the host's marks in seconds after the start (`t0`): inputs built, copied, replay
        queued, verdict decided (the verdict synchronised: reading the events waits for nothing)."""
        extra: dict[str, Any] = {"request": vp.request_id, "accepted": vp.num_accepted, "emitted": vp.num_accepted + 1}
        split = self.target.last_device_split() if self.ctx.is_leader else None
        if split is not None:
            marks = self.target.host_marks
            extra.update(device_s=split["copies_s"] + split["replay_s"], **{f"gpu_{k}": v for k, v in split.items()},
                         **{f"{k}_s": marks[k] - t0 for k in ("inputs", "copied", "launched")}, decided_s=decided)
        return extra

    def _keep(self, vp: VerifiedPath) -> None:
        """Target group: keep the root and accepted nodes' KV of the last verify (a no-op launch-wise for a
        chain or autoregressive step, whose accepted nodes already sit in place)."""
        start, ctx = self.tl.now(), self.target.prefix_len
        self.target.keep(vp.node_indices)
        self.tl.add("step.keep", start, self.tl.now() - start, iteration=vp.iteration,
                    tokens=len(vp.node_indices), ctx_len=ctx, extra={"moved": not in_place(vp.node_indices)})

    def _compact(self, it: int, deferred: bool = True, force: bool = False) -> None:
        """Draft: the KV compaction of the last re-root, if still pending: after the send (`deferred`), or before
        the forwards of a refill or serial expansions. With CUDA graphs it rides in the next expansion's replay
        instead (`DraftWorker.compact` leaves it; no span) unless `force`."""
        start = self.tl.now()
        if self.draft.compact(force=force):
            self.tl.add("step.compact", start, self.tl.now() - start, iteration=it - 1, ctx_len=self.draft.prefix_len,
                        extra={"deferred": deferred})

    def _advance(self, prop: DraftProposal, vp: VerifiedPath, oracle: AcceptanceOracle | None,
                 outcome: OracleOutcome | None = None) -> None:
        """Draft: re-root along the verified path (oracle: resolve the drawn bonus rank first; `outcome`: the
        proposal's draw if already made)."""
        start = self.tl.now()
        bonus = vp.bonus_token
        if oracle is not None:
            outcome = outcome or oracle.walk(prop.parent_indices)
            if outcome.path != vp.node_indices:
                raise RuntimeError(f"oracle draws diverged: draft {outcome.path}, target {vp.node_indices}")
            bonus = resolve_bonus(self.draft.children_tokens(vp.node_indices[-1]), outcome.bonus_rank, bonus)
        ranks = self.draft.verified_ranks(vp.node_indices, bonus)
        reroot = self.draft.advance(vp.node_indices, bonus)
        extra = {"hit": reroot.hit, "d": self._round_d(), "ranks": ranks}
        self.tl.add("step.reroot", start, self.tl.now() - start, iteration=vp.iteration,
                    tokens=len(reroot.keep_slots), extra=extra)

    # ---- messages ------------------------------------------------------------------------------------------
    def _receive_proposal(self, rid: int, it: int) -> DraftProposal:
        """Target group: the draft's proposal for iteration `it` of request `rid` (anything else is a bug)."""
        prop = self.channel.recv()
        if (prop.request_id, prop.iteration) != (rid, it):
            raise RuntimeError(f"{self.ctx.label}: expected request {rid} iteration {it}, got {prop}")
        return prop

    def _send_proposal(self, prop: DraftProposal, first: bool) -> None:
        """Draft group: the leader sends; every rank starts the depth tuner's round (auto d's trials weigh it by the
        proposal's expected yield, policy/depth_tuner.py; a fixed d needs none). `first`: the request's first."""
        if self.ctx.is_leader:
            self.channel.send(prop)
        self._tuner_sent(first)

    def _tuner_sent(self, first: bool) -> None:
        """The depth tuner's round ends with a proposal out (auto d's trials weigh it by its expected yield)."""
        self.tuner.sent(new_request=first,
                        expected_tokens=self.draft.expected_tokens() if self.tuner.fixed is None else None)

    def _receive_verified(self) -> VerifiedPath:
        """Draft group: the verified path of the last proposal; the depth tuner's round ends."""
        vp = self.channel.recv()
        self.tuner.received(vp.num_accepted + 1)
        return vp

    # ---- helpers -----------------------------------------------------------------------------------------
    def _iteration_done(self, start: float, it: int, rid: int, emitter: Emitter) -> None:
        """Target group: the progress display, and the iteration's span (from `start`)."""
        self.progress.update(self.tokens_done + len(emitter.tokens))
        self.tl.add("step.iteration", start, self.tl.now() - start, iteration=it, extra={"request": rid})

    def _round_d(self) -> int:
        """Expansions per round: overlapped ones in async_tree, serial ones after the refill otherwise."""
        return self.tuner.round_d if self.mode in ("async_tree", "serial_tree") else self.shape.d

    def _next_iteration(self) -> int:
        self.iteration += 1
        return self.iteration - 1

    def _generators(self, rid: int) -> tuple[torch.Generator | None, AcceptanceOracle | None,
                                             AcceptanceOracle | None]:
        """(sampling generator, target-side oracle, draft-side oracle) of request `rid`."""
        seed = self.cfg.workload.seed
        gen = request_generator(seed, rid, "sample", self.ctx.device) if self.cfg.spec.temperature > 0 else None
        if not self.oracle_on:
            return gen, None, None
        oracles = [AcceptanceOracle(self.cfg.acceptance, request_generator(seed, rid, "oracle", "cpu"))
                   for _ in range(2)]
        return gen, oracles[0], oracles[1]

    def close(self) -> None:
        """Flush outstanding sends and close the leader channel (leaders)."""
        if self.ctx.is_leader and self.ctx.peer_leader_rank is not None:
            self.channel.close()


def worker_specs(cfg: ExperimentConfig, shape: SpecShape, group_gpus: int) -> tuple[WorkerSpec, WorkerSpec]:
    """The (target, draft) `WorkerSpec`s of a run, on a group of `group_gpus` GPUs."""
    spec = cfg.spec
    common = {"max_seq_len": cfg.workload.max_seq_len_tokens, "temperature": spec.temperature,
              "group_gpus": group_gpus, "graph_events": cfg.trace.graph_events}
    target = WorkerSpec(shape.rows, oracle=spec.oracle and spec.mode != "autoregressive", **common)
    draft = WorkerSpec(shape.w, topk=shape.topk, max_tree_nodes=spec.max_tree_nodes, **common)
    return target, draft


def set_launch_policy(cfg: ExperimentConfig) -> None:
    """kernels.pdl: programmatic dependent launch for every Triton launch of this process, kernels/pdl.py's
    DEFAULT_POLICY trigger per kernel role (a no-op before sm90 and on CPU; a reference run imports no Triton)."""
    if cfg.kernels.backend == "triton" or "kernels.pdl" in sys.modules:
        from kernels.pdl import set_pdl

        set_pdl(cfg.kernels.pdl)


def check_runtime_support(cfg: ExperimentConfig) -> None:
    """Refuse settings the runtime does not implement yet (the simulator can still cost them)."""
    if cfg.spec.d_poll:
        raise ValueError("spec.d=poll: simulator only (the runtime overlaps a fixed or auto-tuned d); "
                         "use spec.d=auto or a positive integer")
    for role in ("target", "draft"):
        mcfg = getattr(cfg.model, role)
        if mcfg is None or mcfg.weight_bits == 16:
            continue
        if mcfg.weight_bits not in WEIGHT_BITS:
            raise ValueError(f"model.{role}.weight_bits={mcfg.weight_bits}: simulator only; the runtime runs "
                             f"{' or '.join(map(str, WEIGHT_BITS))} (8: fp8 weights in the Triton decode kernels)")
        if cfg.kernels.backend != "triton" or not cfg.kernels.skinny:
            raise ValueError(f"model.{role}.weight_bits={mcfg.weight_bits}: the fp8 weights stream through the Triton "
                             f"skinny decode kernels; needs kernels=graphs without skinny in kernels.ablate, got "
                             f"kernels={cfg.kernels.preset} kernels.ablate={cfg.kernels.ablate}")
    if cfg.trace.graph_events and not cfg.kernels.cuda_graphs:
        raise ValueError("trace.graph_events: times CUDA-graph replays; needs kernels=graphs (without cuda_graphs "
                         "in kernels.ablate)")


# ---- run entry and metrics -------------------------------------------------------------------------------
def run_rank(ctx: ParallelContext, cfg: ExperimentConfig, prompts: list[list[int]] | None = None,
             eos_token_id: int | None = None, *, engine_cls: type[Engine] | None = None) -> dict[str, Any] | None:
    """Decode the workload on this rank; rank 0 returns outputs, metrics, iteration rows and traces.

    `prompts` / `eos_token_id` override the workload (tests); by default prompts come from
    `cfg.workload` (text through the tokenizer, a JSONL file, or seeded random tokens) and EOS from the
    tokenizer. `engine_cls` substitutes an Engine subclass (benchmarks cache models across runs).
    The timed region starts and ends with the device synchronised.
    """
    prompts_given = prompts is not None
    prompts, eos = load_workload(cfg, prompts, eos_token_id)
    timeline = Timeline.start(ctx, run_id=cfg.run_name)
    engine = (engine_cls or Engine)(ctx, cfg, timeline, eos)
    engine.prepare_prefills(prompts)
    profiler = cProfile.Profile() if os.environ.get(CPROFILE_ENV) else None
    outputs = []
    # what setup made stays out of the decode loop's collections; pauses recorded as host.gc spans
    with gc_policy(timeline) as between_requests:
        _sync(ctx.device)
        start = time.perf_counter()
        engine.progress = Progress(len(prompts) * cfg.workload.max_new_tokens, enabled=ctx.rank == 0)
        if profiler is not None:
            profiler.enable()
        for rid, prompt in enumerate(prompts):
            outputs.append(engine.generate(rid, prompt))
            if ctx.rank == 0:  # kept by the launching process should the run be interrupted
                report_partial({"request": rid, "prompt": list(prompt), "output": outputs[-1], "stop": stop_reason(
                    outputs[-1] or [], len(prompt), cfg.workload.max_new_tokens, cfg.workload.max_seq_len_tokens,
                    None if engine.oracle_on else eos)})
            engine.tokens_done += len(outputs[-1] or [])
            if rid + 1 < len(prompts):
                between_requests()
        engine.progress.close()
        _sync(ctx.device)
        wall_s = time.perf_counter() - start
    if profiler is not None:
        profiler.disable()
        dump_profile(profiler, os.environ[CPROFILE_ENV], ctx.rank)
    engine.close()
    records = timeline.gather(ctx)
    if ctx.rank != 0:
        return None
    leaders = set(leader_ranks(ctx.num_target, ctx.num_draft))
    rows = iteration_rows(records, leaders, engine.colocated)
    generated = sum(len(o) for o in outputs if o is not None)
    d_used = [r.extra_fields()["d"] for r in records if r.name == "step.reroot"]
    # d_rule (tree modes): fixed, or runtime (auto: the depth tuner's); a serial_tree record with d auto that lacks
    # it ran the breadth rule (calibration/validation_replay.py recorded_serial_d)
    tree = cfg.spec.mode in ("serial_tree", "async_tree")
    metrics = summarize(cfg, rows, generated, wall_s, gpu=device_name(ctx.device), num_requests=len(prompts),
                        d_used=d_used[-1] if d_used else None,
                        **({"d_rule": "fixed" if cfg.spec.d_fixed is not None else "runtime"} if tree else {}),
                        **({"oracle_belief": "table"} if engine.oracle_on else {}),  # replays read it
                        **({"leader_channel": engine.channel.kind} if ctx.peer_leader_rank is not None else {}))
    eos_used = None if engine.oracle_on else eos
    metrics["prompt_source"] = "argument" if prompts_given else prompt_source(cfg)
    metrics["stop_reasons"] = [  # why each request ended (docs/CONTRACTS.md): a run that stops early says so
        stop_reason(o or [], len(p), cfg.workload.max_new_tokens, cfg.workload.max_seq_len_tokens, eos_used)
        for p, o in zip(prompts, outputs)]
    return {"metrics": metrics, "iterations": rows, "traces": records, "outputs": outputs, "prompts": prompts,
            "oracle": engine.oracle_on, "eos_token_id": None if engine.oracle_on else eos}


CPROFILE_ENV = "SWIFTSPEC_CPROFILE"
"""Set to a folder: every rank's decode loop runs under cProfile (host-time hunting, e.g. on the GPU)."""


def dump_profile(profiler: cProfile.Profile, folder: str, rank: int, top: int = 40) -> None:
    """Write `rank<r>.prof` (pstats) and `rank<r>.txt` (top functions by own time, then by cumulative)."""
    os.makedirs(folder, exist_ok=True)
    profiler.dump_stats(os.path.join(folder, f"rank{rank}.prof"))
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    with open(os.path.join(folder, f"rank{rank}.txt"), "w") as f:
        f.write(text.getvalue())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def iteration_rows(records: list[TraceRecord], leaders: set[int], colocated: bool) -> list[dict[str, Any]]:
    """One iterations.csv row per verify (ITERATION_COLUMNS), from the leaders' spans.

    verify_s: the target's verify step and its KV keep; expand_s: draft expansions for that proposal (refill,
    serial or overlapped with the verify); reroot_s: re-root + compaction + selection; message_s: sends and in-group
    broadcasts; idle: a leader waiting in recv (colocated: the target idles while the draft works and
    vice versa). `emitted` counts accepted + bonus before the stop rule truncates. `refills`: the refill
    expansions (`step.expand` phase refill) of the request's next proposal, None after its last verify.
    """
    by: dict[tuple[str, int], list[TraceRecord]] = defaultdict(list)
    for r in records:
        if r.rank in leaders:
            by[(r.name, r.iteration)].append(r)

    def total(name: str, it: int, group: str | None = None) -> float:
        return sum(r.duration_s for r in by[(name, it)] if group is None or r.group == group)

    rows = []
    iterations = sorted((r for (name, _), rs in list(by.items()) if name == "step.iteration" for r in rs),
                        key=lambda r: r.start_s)
    for rec in iterations:
        it = rec.iteration
        verify = by[("step.verify", it)]
        info = verify[0].extra_fields() if verify else {}
        reroot = by[("step.reroot", it)]
        rinfo = reroot[0].extra_fields() if reroot else None
        verify_s = total("step.verify", it) + total("step.keep", it)
        rows.append({
            "request": info.get("request", -1), "iteration": it, "start_s": rec.start_s,
            "end_s": rec.start_s + rec.duration_s, "verify_s": verify_s, "expand_s": total("step.expand", it),
            "reroot_s": total("step.reroot", it) + total("step.select", it) + total("step.compact", it),
            "message_s": total("comm.send", it) + total("comm.broadcast", it),
            "target_idle_s": rec.duration_s - verify_s if colocated else total("comm.recv", it, "target"),
            "draft_idle_s": verify_s if colocated else total("comm.recv", it, "draft"),
            "accepted": info.get("accepted", 0), "emitted": info.get("emitted", 1),
            "hit": rinfo["hit"] if rinfo else None,
            "ranks": ".".join(map(str, rinfo.get("ranks", []))) if rinfo else "",
        })
    for row, nxt in zip(rows, [*rows[1:], None]):  # the refill of the request's next proposal (None after its last)
        row["refills"] = (sum(r.extra_fields().get("phase") == "refill" for r in by[("step.expand", nxt["iteration"])])
                          if nxt is not None and row["hit"] is not None and nxt["request"] == row["request"] else None)
    return rows
