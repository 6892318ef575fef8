"""One simulation: wires config -> costs, acceptance, tree states, SimPy environment, stores and processes.

`simulate(config)` is the library entry: it resolves `spec.d`, runs one `Simulation` and returns it (records
in `.tally`, `.rows`, `.events`); metrics.py turns that into the metrics contract, main.py writes run dirs.

Mode -> shape of the speculation (all modes share the processes of processes.py):

| mode           | processes                                  | tree                         | d            |
|----------------|--------------------------------------------|------------------------------|--------------|
| autoregressive | decode_autoregressive                      | none                         | 0            |
| chain          | grow_tree_serial + verify_proposals + links| topk 1, w 1, bs = gamma + 1  | gamma        |
| serial_tree    | grow_tree_serial + verify_proposals + links| spec.topk, w, bs             | spec.d / auto|
| async_tree     | grow_tree_async + verify_proposals + links | spec.topk, w, bs             | spec.d / auto|

**d = poll** (async_tree): the draft expands one forward at a time while no verified path is in its inbox
(and the tree has room), as the runtime does; the reported d is the mean number of overlapped expansions.

**d = auto**: the runtime (policy/depth_tuner.py DepthTuner) skips the first rounds (compilation), then
measures t_verify (send of a proposal -> receipt of its verified path) and t_expand (one draft forward of w
leaves), takes r = floor(t_verify / t_expand) clamped to [1, max_tree_nodes // w], runs trial rounds at r
and r + 1 and keeps the faster. The simulator takes
both times from the cost model at the first iteration's context (t_verify = both messages + the verify
forward) and uses d = max(1, round(t_verify / t_expand)) (`sim.d_rule=round`: r or r + 1, whichever the
ratio is nearer; Python rounds halves to even), or simulates a pilot (one request of PILOT_TOKENS) at
max(1, r) and r + 1 and keeps the faster (`sim.d_rule=best_of_two`). serial_tree's auto d is the runtime's
SerialDepthTuner climb (policy/depth_tuner.py: from ceil((bs - 1) / w), one d at a time, kept while the expected
tokens per second rise): under round and best_of_two over pilot simulations (`serial_auto_d`), under runtime the
tuner itself on simulated time. A draft with draft_gpus = 0 shares the target's GPUs (TP = target_gpus) and
messages cost 0.

Seeds: the truth uniforms of request i come from SeedSequence([seed, workload.seed, i]); nothing else is
random. Two simulations share no state (no globals, no class-level counters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import simpy

from conf.messages import DraftProposal
from conf.paths import resolve_path
from conf.presets import GPU_PRESETS, LINK_PRESETS, model_preset
from conf.schema import ExperimentConfig
from policy.acceptance import load_acceptance
from policy.depth_tuner import DepthTuner, SerialDepthTuner, breadth_d, climb, serial_d_max
from policy.predicates import chained_autoregressive, draft_tp, loop_shape, uses_draft
from simulator.checks import check_config
from simulator.cost_model import (
    EAGER_PREFILL_LAUNCH_S,
    PRIOR_MESSAGE_HOST_S,
    PRIOR_STEP_OVERHEAD_S,
    PRIOR_TREE_OP_S,
    GraphKernels,
    GroupCost,
    Operators,
)
from simulator.interconnect import message_bytes, node_of_rank
from simulator.processes import (
    carry_messages,
    decode_autoregressive,
    grow_tree_async,
    grow_tree_serial,
    verify_proposals,
)
from simulator.profile import Profile, ProfileError, load_profile, runtime_bound
from simulator.records import Event, IterationRow, Tally
from simulator.stores import MessageStore
from simulator.tree import TreeStates


class StepCost(Protocol):
    """What processes need from a group's cost model (GroupCost, FixedCost)."""

    def forward_s(self, tokens: int, kv_len: int, real_rows: float | None = None) -> float:
        """Seconds of one forward of `tokens` queries over `kv_len` keys (`real_rows` of them real; None: all)."""
        ...

    def prefill_s(self, prompt_tokens: int) -> float:
        """Seconds of the prompt prefill."""
        ...

    def compaction_s(self, kept_tokens: int) -> float:
        """Seconds of the KV compaction of `kept_tokens` tokens."""
        ...


@dataclass(frozen=True)
class Costs:
    """Every cost a simulation needs: per-group step costs, message delays, host tree bookkeeping."""

    target: StepCost
    draft: StepCost | None
    proposal_s: float
    """Draft -> target message delay."""
    verified_s: float
    """Target -> draft message delay."""
    tree_op_s: float
    source: str = "analytic"
    """analytic | profile:<file> (with the operators that fell back to the prior)."""
    verify_host_s: float = 0.0
    """Target host time per verify for taking the proposal and sending the path (profile `runtime`)."""
    keep_s: float | None = None
    """Target host time of the KV keep after a verify (profile `runtime`); None: the compaction operator."""
    compact_s: float | None = None
    """Draft host time of a re-root's deferred KV compaction (profile `runtime`); None: the compaction operator."""


def proposal_nodes(config: ExperimentConfig) -> int:
    """Nodes per proposal: gamma + 1 in chain mode, else bs."""
    return config.spec.gamma + 1 if config.spec.mode == "chain" else config.spec.bs


PILOT_TOKENS = 128
"""Tokens per pilot simulation of sim.d_rule=best_of_two (one request): enough rounds to rank d = r against r + 1."""

DRAFT_HOST_KEYS = ("expand_extra_s", "expand_extra_per_row_s", "expand_extra_per_real_row_s", "draft_round_s")
"""The profile's fitted draft host costs (`runtime` block) that `sim.whatif.draft_host_scale` scales."""


def runtime_costs_for(profile: Profile, config: ExperimentConfig) -> dict[str, float]:
    """The profile's runtime host costs for the config's runtime loop: the top-level ones, overlaid by the loop's
    entry (`runtime.loops[predicates.loop_shape(config)]`) where the profile has one. An entry with any draft expansion
    cost replaces all of them (its constant and per-row parts are one fit)."""
    host = dict(profile.runtime)
    entry = profile.runtime_loops.get(loop_shape(config), {})
    if any(k.startswith("expand_extra") for k in entry):
        host = {k: v for k, v in host.items() if not k.startswith("expand_extra")}
    host.update(entry)
    return host


def _apply_runtime_deltas(host: dict[str, float], deltas: dict[str, float], profile: Profile | None) -> None:
    """`sim.whatif.runtime_delta`: add each delta to the profile's runtime entry in `host` (in place); a ValueError
    names the key when there is no such entry or when the sum leaves the entry's bounds (>= 0; signed ones >= -1 ms)."""
    if not deltas:
        return
    where = profile.path if profile is not None else "the analytic prior (no sim.profile)"
    for key, delta in deltas.items():  # the keys are RUNTIME_COSTS' (simulator/checks.py check_runtime_deltas)
        if key not in host:
            raise ValueError(f"sim.whatif.runtime_delta.{key}: {where} has no runtime entry {key!r} to change "
                             f"(entries: {', '.join(sorted(host)) or 'none'})")
        value, low = host[key] + delta, runtime_bound(key)
        if value < low:
            raise ValueError(f"sim.whatif.runtime_delta.{key}: {host[key]:.3g} s + {delta:.3g} s = {value:.3g} s is "
                             f"below the entry's bound {low:g} s")
        host[key] = value


def leader_transport(config: ExperimentConfig) -> str:
    """How the two group leaders exchange proposals and verified paths, as the runtime resolves
    `parallel.leader_channel` (runtime/unix_channel.py `make_channel`): unix or dist as set; auto: unix when
    both leaders (world ranks 0 and target_gpus) sit on one node of the GPU preset's `gpus_per_node`, else dist."""
    kind, par = config.parallel.leader_channel, config.parallel
    if kind != "auto":
        return kind
    gpn = GPU_PRESETS[config.hardware.gpu].gpus_per_node
    return "unix" if node_of_rank(0, gpn) == node_of_rank(par.target_gpus, gpn) else "dist"


def _checked_profile(config: ExperimentConfig, profile: Profile | None) -> Profile | None:
    """The profile to price with: `profile` if given, else `sim.profile` loaded; None: the analytic prior. A
    ProfileError when it was measured on another GPU than `hardware.gpu`."""
    if profile is None and config.sim.profile:
        profile = load_profile(resolve_path(config.sim.profile))
    if profile is not None and profile.gpu != config.hardware.gpu:
        raise ProfileError(f"{profile.path}: hardware.gpu: profile measured on {profile.gpu!r} but "
                           f"hardware.gpu={config.hardware.gpu!r}")
    return profile


def host_costs(config: ExperimentConfig, profile: Profile | None) -> dict[str, float]:
    """The fitted runtime host costs the config's loop pays (`runtime_costs_for`; empty without a profile), after
    the config's what-ifs: `sim.whatif.draft_host_scale` on the draft's, then `sim.whatif.runtime_delta`."""
    host = runtime_costs_for(profile, config) if profile is not None else {}
    for key in DRAFT_HOST_KEYS:
        if key in host:
            host[key] *= config.sim.whatif.draft_host_scale
    _apply_runtime_deltas(host, config.sim.whatif.nonzero_deltas(), profile)
    return host


def _target_step_extra_s(config: ExperimentConfig, host: dict[str, float]) -> float:
    """The target's fitted host time per step beyond its operators, by loop shape. Chained autoregressive steps
    (the runtime queues step i + 1 before reading token i) have no host gap of their own. A TP > 1 target's steps
    have their own host cost (the verdict decided on the leader, peers waiting for it): without a TP fit, not the
    one-GPU saving (a TP target's all-reduced projections stay cuBLAS); an autoregressive TP run has its own fit
    when one was among the fit runs."""
    step_extra = host.get("step_extra_s", 0.0)
    if chained_autoregressive(config):
        return host.get("ar_step_extra_s", 0.0)
    if config.parallel.target_gpus > 1:
        step_extra = host.get("tp_step_extra_s", max(step_extra, 0.0))
        if config.spec.mode == "autoregressive":
            step_extra = host.get("tp_ar_step_extra_s", step_extra)
    return step_extra


def _prefill_launch_s(config: ExperimentConfig, tp: int) -> float:
    """The launch floor of a group's prefill: the Triton backend's eager prefill (a group that does not replay its
    prefills, as the runtime decides) is host-bound, launches x host time; 0 otherwise."""
    eager = not config.kernels.prefill_graph_for(tp)
    return EAGER_PREFILL_LAUNCH_S if config.kernels.backend == "triton" and eager else 0.0


def _draft_cost(config: ExperimentConfig, ops: Operators, host: dict[str, float]) -> GroupCost:
    """The draft group's step costs: its model on draft_tp GPUs (the target's with draft_gpus = 0), the fitted
    host time per draft forward (constant, per row, per real row), `sim.whatif.draft_device_scale`."""
    assert config.model.draft is not None
    tp = draft_tp(config)
    return GroupCost(ops, model_preset(config.model.draft.preset), config.model.draft.weight_bits, tp,
                     config.kernels.backend == "triton", extra_s=host.get("expand_extra_s", 0.0),
                     extra_per_token_s=host.get("expand_extra_per_row_s", 0.0),
                     extra_per_real_row_s=host.get("expand_extra_per_real_row_s", 0.0),
                     prefill_launch_s=_prefill_launch_s(config, tp),
                     kernels=GraphKernels("draft", False, config.kernels.rope_attention),
                     device_scale=config.sim.whatif.draft_device_scale)


def _cost_source(config: ExperimentConfig, profile: Profile | None, ops: Operators, host: dict[str, float],
                 transport: str, has_draft: bool) -> str:
    """`Costs.source`: analytic, or profile:<file> (+ runtime when its host costs apply), naming the operators that
    fell back to the prior and the weight widths priced without a fit of their own."""
    if profile is None:
        return "analytic"
    # the leader messages go one way: the other transport's operator is not used (a TP > 1 target's verdict
    # broadcast is a dist message)
    unused = {"message_unix"} if transport == "dist" else {"message"} if config.parallel.target_gpus == 1 else set()
    prior = [op for op, src in ops.sources.items() if src == "analytic" and op not in unused]
    source = (f"profile:{config.sim.profile or profile.path}" + (" + runtime" if host else "")
              + (f" (analytic: {', '.join(prior)})" if prior else ""))
    # narrower weights without a fit of their own (gemm_fp8 for 8 bits; 4 bits never) are priced by their bytes at
    # the 16-bit fit's rate, which the runtime's fp8 draft step did not reach
    narrow = [f"{role} {m.weight_bits}" for role, m in (("target", config.model.target),
                                                          ("draft", config.model.draft if has_draft else None))
              if m is not None and m.weight_bits != 16
              and not (m.weight_bits == 8 and ops.sources["gemm_fp8"] == "profile")]
    if narrow:
        source += f" [weight bits {', '.join(narrow)}: GEMM bytes at the 16-bit fit's rate, not calibrated]"
    return source


def build_costs(config: ExperimentConfig, profile: Profile | None = None) -> Costs:
    """The cost model the config describes: analytic prior, with a fitted profile where one is configured.

    `profile` (already loaded) replaces `sim.profile`. Its `runtime` block, where present, adds the runtime
    loop's fitted host costs (`host_costs`): per target forward, per draft forward, per verify's messages (target)
    and per draft round (replacing the profile's `tree_op_s`, else PRIOR_TREE_OP_S); the last two only with a
    separate draft group. A config whose runtime loop has its own entry in the block (`runtime.loops`,
    `predicates.loop_shape`: colocated, chain) takes that entry's costs in place of the top-level ones
    (`runtime_costs_for`). A TP > 1 target's verify also carries its in-group verdict broadcast (one message).
    `sim.whatif` prices what the runtime does not run: the draft's host and device time scaled, runtime host costs
    shifted, a fused GEMM + all-reduce (`Operators`)."""
    profile = _checked_profile(config, profile)
    ic, par, kcfg = config.interconnect, config.parallel, config.kernels
    intra, cross = ic.links(config.hardware.gpu)  # "gpu": the GPU preset's own link
    ops = Operators(GPU_PRESETS[config.hardware.gpu], LINK_PRESETS[intra], ic.allreduce, LINK_PRESETS[cross],
                    PRIOR_MESSAGE_HOST_S, PRIOR_STEP_OVERHEAD_S, kcfg.cuda_graphs, profile,
                    intra_name=intra, cross_name=cross, fused_allreduce=config.sim.whatif.fused_allreduce)
    host = host_costs(config, profile)
    # A TP > 1 target's leader broadcasts every verdict (the verified path) to its group inside the verify
    # (runtime/engine.py _verify): charged as one leader-channel message of that size, the profiled operator of
    # the same NCCL hop and host copies.
    nbytes = message_bytes(proposal_nodes(config))  # a proposal or a verified path: the same fixed-size wire
    verdict_s = ops.message_s(nbytes, par.target_gpus) if par.target_gpus > 1 else 0.0
    # which small kernels each group's captured steps launch (the in-graph step overhead counts them)
    target = GroupCost(ops, model_preset(config.model.target.preset), config.model.target.weight_bits,
                       par.target_gpus, kcfg.backend == "triton", extra_s=_target_step_extra_s(config, host),
                       broadcast_s=verdict_s, prefill_launch_s=_prefill_launch_s(config, par.target_gpus),
                       kernels=GraphKernels("target", kcfg.target_qkv_rope and kcfg.skinny, kcfg.rope_attention))
    draft = _draft_cost(config, ops, host) if uses_draft(config) else None
    proposal_s = verified_s = 0.0
    transport = "dist"
    tree_op_s = profile.tree_op_s if profile is not None and profile.tree_op_s is not None else PRIOR_TREE_OP_S
    verify_host_s = 0.0
    if draft is not None and par.draft_gpus > 0:  # a separate draft group: messages between the two leaders
        transport = leader_transport(config)
        proposal_s = ops.message_s(nbytes, par.target_gpus, transport)
        verified_s = ops.message_s(nbytes, par.draft_gpus, transport)
        tree_op_s = host.get("draft_round_s", tree_op_s)
        verify_host_s = host.get("verify_message_s", 0.0)
    return Costs(target, draft, proposal_s, verified_s, tree_op_s,
                 _cost_source(config, profile, ops, host, transport, draft is not None), verify_host_s,
                 host.get("keep_s"), host.get("compact_s"))


def d_ratio(config: ExperimentConfig, costs: Costs) -> float:
    """t_verify / t_expand at the first iteration's context, t_verify as the runtime's DepthTuner measures it
    (send of a proposal -> receipt of its verified path: both messages + the verify forward)."""
    assert costs.draft is not None
    ctx = config.workload.prompt_tokens - 1
    bs, w = config.spec.bs, config.spec.w
    t_verify = costs.proposal_s + costs.target.forward_s(bs, ctx + bs) + costs.verify_host_s + costs.verified_s
    return t_verify / costs.draft.forward_s(w, ctx + w)


class Simulation:
    """One simulated run: environment, stores, processes and records. Call `run()` once."""

    def __init__(self, config: ExperimentConfig, costs: Costs, d: int | None = None,
                 num_requests: int | None = None, max_new_tokens: int | None = None,
                 record_events: bool | None = None) -> None:
        spec, wl = config.spec, config.workload
        self.config = config
        self.costs = costs
        self.mode = spec.mode
        self.num_requests = num_requests or wl.num_requests
        self.max_new_tokens = max_new_tokens or wl.max_new_tokens
        self.prompt_tokens = wl.prompt_tokens
        # the event log is what the traces are made of: kept when the run writes traces
        self.record_events = config.trace.enabled if record_events is None else record_events
        chain = self.mode == "chain"
        self.bs = spec.gamma + 1 if chain else spec.bs
        self.w = 1 if chain else spec.w
        self.topk = 1 if chain else spec.topk
        self.target_cost, self.draft_cost = costs.target, costs.draft
        self.proposal_s, self.verified_s, self.tree_op_s = costs.proposal_s, costs.verified_s, costs.tree_op_s
        self.verify_host_s = costs.verify_host_s
        self.keep_s, self.compact_s = costs.keep_s, costs.compact_s
        self.graphs = config.kernels.cuda_graphs  # compactions ride in the next graph step (processes._compaction_s)
        # kernels.refill_graph: a lone root's expansion is a one-row forward (processes._expand_s), as the runtime's
        self.refill_graph = config.kernels.cuda_graphs and config.kernels.refill_graph and self.w > 1
        # Colocated (no draft group): the runtime keeps, re-roots and compacts on the target's ranks, one after
        # another, so nothing the runtime does after a send overlaps the other side's work.
        self.colocated = config.parallel.draft_gpus == 0
        # d_rule = runtime: the runtime's DepthTuner / SerialDepthTuner picks each round's d on simulated time
        tuned = (self.mode in ("async_tree", "serial_tree") and d is None and spec.d_fixed is None
                 and not spec.d_poll and config.sim.d_rule == "runtime")
        self.acceptance = load_acceptance(config.acceptance, self.topk)
        self.trees = TreeStates(self.acceptance.belief(self.topk), self.topk, self.w, spec.max_tree_nodes)
        if self.mode == "autoregressive":
            self.d = 0
        elif chain:
            self.d = spec.gamma
        elif d is not None:
            self.d = d
        elif self.mode == "serial_tree":  # d more expansions after the refill
            self.d = spec.d_fixed or (breadth_d(spec.bs, spec.w) if tuned else serial_auto_d(config, costs))
        else:
            self.d = spec.d_fixed or max(1, round(d_ratio(config, costs)))
        # d = poll: the async draft expands until the verified path is in its inbox (self.d then unused).
        self.poll = self.mode == "async_tree" and spec.d_poll
        self.tuner: DepthTuner | None = None  # under d_rule = runtime (self.d unused)
        if tuned:
            clock = lambda: self.env.now  # noqa: E731
            self.tuner = (DepthTuner(None, d_max=max(1, spec.max_tree_nodes // self.w), clock=clock)
                          if self.mode == "async_tree" else
                          SerialDepthTuner(None, spec.bs, spec.w, spec.max_tree_nodes, clock=clock))
        self._seed = (config.seed, wl.seed)
        self._children: dict[tuple[tuple[int, ...], tuple[int, ...]], dict[tuple[int, int], int]] = {}
        self.tally = Tally()
        self.rows: list[IterationRow] = []
        self.row_base: list[int] = []
        self.events: list[Event] = []
        self.env = simpy.Environment()
        self.draft_outbox = MessageStore(self.env)
        self.target_inbox = MessageStore(self.env)
        self.target_outbox = MessageStore(self.env)
        self.draft_inbox = MessageStore(self.env)
        if self.mode == "autoregressive":
            self.env.process(decode_autoregressive(self))
        else:
            self.env.process(verify_proposals(self))
            draft = grow_tree_async if self.mode == "async_tree" else grow_tree_serial
            self.env.process(draft(self))
            self.env.process(carry_messages(self, self.draft_outbox, self.target_inbox, self.proposal_s,
                                            "msg.proposal"))
            self.env.process(carry_messages(self, self.target_outbox, self.draft_inbox, self.verified_s,
                                            "msg.verified"))

    def uniforms(self, request: int) -> list[float]:
        """The truth uniforms of `request`, one per token position (+ room for the deepest verify)."""
        rng = np.random.default_rng(np.random.SeedSequence([*self._seed, request]))
        return rng.random(self.max_new_tokens + self.bs + 2).tolist()

    def children_of(self, proposal: DraftProposal) -> dict[tuple[int, int], int]:
        """(parent index, token) -> node index of a proposal (memoised by content)."""
        key = (proposal.parent_indices, proposal.token_ids)
        out = self._children.get(key)
        if out is None:
            out = {(p, t): i for i, (p, t) in enumerate(zip(proposal.parent_indices, proposal.token_ids))}
            self._children[key] = out
        return out

    @property
    def d_used(self) -> int:
        """The d the run used: spec / resolved d, or under d = poll the mean overlapped expansions (rounded)."""
        if self.poll:
            return round(self.tally.polled_expansions / max(1, self.tally.polled_rounds))
        if self.tuner is not None:
            return self.tuner.chosen or self.tuner.round_d
        return self.d

    def run(self) -> Simulation:
        """Run to completion (all requests, both groups); returns self."""
        self.env.run()
        if self.tally.generated_tokens != self.num_requests * self.max_new_tokens:
            raise RuntimeError(f"simulation ended early: {self.tally.generated_tokens} of "
                               f"{self.num_requests * self.max_new_tokens} tokens")
        return self


def _pilot(config: ExperimentConfig, costs: Costs, d: int) -> Simulation:
    """A short simulation at `d` that auto-d rules compare: one request of PILOT_TOKENS (or fewer), no event log."""
    return Simulation(config, costs, d=d, num_requests=1, record_events=False,
                      max_new_tokens=min(config.workload.max_new_tokens, PILOT_TOKENS)).run()


def serial_auto_d(config: ExperimentConfig, costs: Costs) -> int:
    """serial_tree's auto d without the runtime's warm-up: the runtime tuner's climb (policy.depth_tuner.climb, from
    the breadth rule within serial_d_max) over pilot simulations, one per candidate d (one request of
    PILOT_TOKENS, as best_of_two's), each scored as the runtime's `SerialDepthTuner` scores its rounds: the
    expected tokens of the proposals sent (`Tally.expected_tokens`) per second of decoding (prefill left out).

    Why pilots and not a formula: a serial tree carries its subtree over a hit, so the tokens a round buys at d
    depend on the mix of trees that d grows, which a pilot samples and a one-round formula would not.
    Why expected tokens: on a pilot the emitted ones swing by more than the few percent between neighbouring d
    (strong at bs 8: emitted tokens climb to d = 4, expected ones to the best fixed d, 6)."""
    spec = config.spec

    def rate(d: int) -> float:
        tally = _pilot(config, costs, d).tally
        return tally.expected_tokens / max(tally.wall_s - tally.prefill_s, 1e-12)

    return climb(rate, breadth_d(spec.bs, spec.w), serial_d_max(spec.bs, spec.w, spec.max_tree_nodes))


def resolve_d(config: ExperimentConfig, costs: Costs) -> int | None:
    """d of the tree modes under `sim.d_rule` (None: the Simulation decides: a fixed d, d = poll, or the runtime's
    tuner under d_rule = runtime). serial_tree's auto d under round and best_of_two alike: `serial_auto_d`."""
    spec = config.spec
    if (spec.mode not in ("async_tree", "serial_tree") or spec.d_fixed is not None or spec.d_poll
            or config.sim.d_rule == "runtime"):
        return None
    if spec.mode == "serial_tree":
        return serial_auto_d(config, costs)
    if config.sim.d_rule == "round":
        return max(1, round(d_ratio(config, costs)))
    r = math.floor(d_ratio(config, costs))
    best: tuple[float, int] | None = None
    for d in sorted({max(1, r), r + 1}):
        tally = _pilot(config, costs, d).tally
        speed = tally.generated_tokens / tally.wall_s
        if best is None or speed > best[0]:
            best = (speed, d)
    assert best is not None
    return best[1]


def simulate(config: ExperimentConfig, costs: Costs | None = None, record_events: bool | None = None) -> Simulation:
    """Check the config, build the costs (unless given), resolve d and run one simulation."""
    check_config(config)
    costs = costs or build_costs(config)
    return Simulation(config, costs, d=resolve_d(config, costs), record_events=record_events).run()
