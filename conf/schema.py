"""The typed configuration schema: one dataclass per Hydra config group (the `kernels` group's in
conf/kernels_config.py), registered in the ConfigStore.

Hydra composes `conf/**.yaml` against these classes (structured configs: a typo or a wrong type fails at
compose time). Each entry point calls `conf.build_config(cfg)` once, which converts the DictConfig into an
`ExperimentConfig`, validates it (messages name the field and the allowed values) and freezes it. Below the
entry points only these objects, or their sub-configs, are passed around; nothing reads env vars or argv.

Units: fields with a unit carry it as a suffix (`_s`, `_tokens`, `_bytes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from conf.frozen import _Frozen, _require, freeze  # noqa: F401 (freeze: re-exported, as are the kernels group's names)
from conf.kernels_config import DRAFT_HEAD_MAX_TOPK, KernelFeatures, KernelsConfig  # noqa: F401
from conf.presets import GPU_PRESETS, LINK_PRESETS, check_tp, model_preset, preset_of

MODES = ("autoregressive", "chain", "serial_tree", "async_tree")
DRAFT_MODES = ("chain", "serial_tree", "async_tree")


@dataclass
class ModelConfig(_Frozen):
    """One model: a shape preset plus optional weights."""

    preset: str = "tiny-llama"
    """Shape preset name (conf/presets.py MODEL_PRESETS); must match the checkpoint if one is given."""
    checkpoint: str | None = None
    """Hugging Face safetensors folder or GGUF file; None = random weights from the run's `seed`."""
    dtype: str = "float32"
    """Compute and weight dtype: float32 | bfloat16 | float16."""
    weight_bits: int = 16
    """Weight precision (16, 8 or 4). The simulator costs all three; the runtime runs 16 (`dtype` weights) or 8
    (fp8 e4m3 copies of the layer projections, one scale per output row, streamed by the Triton decode kernels:
    needs the skinny kernels, kernels=graphs; runtime/model.py); 4 is simulator only."""

    def validate(self, name: str) -> None:
        """Check the preset, dtype and weight precision."""
        model_preset(self.preset, f"{name}.preset")
        _require(self.dtype in ("float32", "bfloat16", "float16"), f"{name}.dtype",
                 f"{self.dtype!r} is not one of float32, bfloat16, float16")
        _require(self.weight_bits in (4, 8, 16), f"{name}.weight_bits", f"{self.weight_bits} not in 4, 8, 16")


@dataclass
class ModelPairConfig(_Frozen):
    """Target model and optional draft model (group `model`)."""

    name: str = "tiny"
    """Short name of the pair, used in run-dir names and figure legends."""
    target: ModelConfig = field(default_factory=ModelConfig)
    draft: ModelConfig | None = None
    tokenizer: str | None = None
    """Tokenizer source (HF folder, tokenizer.json or GGUF); None = the target checkpoint's, or bytes."""


@dataclass
class ParallelConfig(_Frozen):
    """GPU split (group `parallel`): target group ranks [0, T), draft group ranks [T, T+D)."""

    target_gpus: int = 1
    """Ranks of the target group; also its TP degree."""
    draft_gpus: int = 1
    """Ranks of the draft group; also its TP degree (0 = no draft group)."""
    device: str = "auto"
    """auto (cuda if available, else cpu) | cuda | cpu."""
    timeout_s: float = 120.0
    """Bound on every wait across ranks; a dead peer ends the run with an error after this long."""
    leader_channel: str = "auto"
    """How the two group leaders exchange messages: auto (unix when both leaders run on one host, else dist),
    dist (torch.distributed: NCCL on GPUs, gloo on CPU), unix (a Unix-domain socket; both leaders on one host:
    a round trip of microseconds instead of hundreds, on the critical path of every verify)."""
    share_gpus: bool = False
    """Let the two groups share GPUs when the host has fewer than target_gpus + draft_gpus: rank r runs on GPU
    r mod (GPUs on the host), so each group still has one GPU per rank (at most as many ranks per group as GPUs) and
    only the cross-group bookkeeping (the world and leader groups) goes over gloo instead of NCCL. For correctness
    runs of the two-group modes (async_tree) on a one-GPU machine: the groups' processes then take turns on the GPU,
    so such a run's timings measure that contention, not the design. Needs the unix leader channel (auto or unix:
    NCCL leaders on one GPU cannot share a communicator)."""

    @property
    def world_size(self) -> int:
        """Ranks the split needs."""
        return self.target_gpus + self.draft_gpus

    def validate(self) -> None:
        """Check the group sizes and the device."""
        _require(self.target_gpus >= 1, "parallel.target_gpus", f"must be >= 1, got {self.target_gpus}")
        _require(self.draft_gpus >= 0, "parallel.draft_gpus", f"must be >= 0, got {self.draft_gpus}")
        _require(self.device in ("auto", "cuda", "cpu"), "parallel.device",
                 f"{self.device!r} is not one of auto, cuda, cpu")
        _require(self.timeout_s > 0, "parallel.timeout_s", f"must be > 0, got {self.timeout_s}")
        _require(self.leader_channel in ("auto", "dist", "unix"), "parallel.leader_channel",
                 f"{self.leader_channel!r} is not one of auto, dist, unix")
        _require(isinstance(self.share_gpus, bool), "parallel.share_gpus",
                 f"expected true or false, got {self.share_gpus!r}")
        _require(not (self.share_gpus and self.leader_channel == "dist"), "parallel.share_gpus",
                 "needs parallel.leader_channel auto or unix, got dist (NCCL leaders cannot share one GPU)")


ACCEPTANCE_KINDS = ("positional", "family", "replay")
"""`acceptance.kind` values."""
FAMILY_RANGES = {"top1": (0.0, 1.0), "decay": (0.0, 10.0), "depth_gain": (0.0, 1.0)}
"""The acceptance family's parameters (kind=family) and their closed valid ranges (policy/acceptance_family.py)."""


@dataclass
class AcceptanceConfig(_Frozen):
    """Acceptance model shared by the simulator and the runtime's oracle (group `acceptance`).

    Positional acceptance: `positional[depth][rank]` is the probability that the rank-th most likely draft
    child of a correct node at that depth is the target's next token. Depths beyond the table reuse its
    last row. `file` (a JSON written by the acceptance report) takes precedence over the inline table.
    The acceptance family (kind=family) builds such a table from `top1`, `decay` and `depth_gain`
    (docs/ACCEPTANCE.md); the defaults are the member fitted to the SmolLM2 pair's pooled table.
    """

    kind: str = "positional"
    """positional | family (the table of `top1`, `decay`, `depth_gain`) | replay (a recorded runtime run's
    verify outcomes, from `file`)."""
    top1: float = 0.653
    """kind=family: the draft's top-ranked child's acceptance at depth 0, in [0, 1]."""
    decay: float = 0.419
    """kind=family: how fast the top-1's miss mass falls off with rank (the top r children leave
    (1 - top1) r^-decay of it), in [0, 10]."""
    depth_gain: float = 0.076
    """kind=family: per-depth growth of the log miss survival (deeper nodes easier), in [0, 1]."""
    positional: list[list[float]] = field(
        default_factory=lambda: [[0.62, 0.12, 0.05, 0.03, 0.02, 0.01, 0.01, 0.01]]
    )
    file: str | None = None
    """Acceptance JSON (acceptance report or recorded run); None = the inline table."""
    domain: str | None = None
    """With `file` an acceptance report: the table of one prompt domain (its `by_domain` entry, e.g. instruction
    or code) instead of the pooled one; None = pooled."""
    scale: float = 1.0
    """Multiplies every probability (for acceptance sweeps); a scale that takes a row's sum above 1 is an error
    naming the largest valid scale (the family's parameters reach stronger drafts)."""
    replay_belief: str = "geometric"
    """kind=replay: the draft log-probability proxy the simulated tree grows by (the replay has no table):
    geometric (rank r weighs 2^-(r+1), a trained draft) | uniform (every rank alike: a random-weight draft,
    whose top-k log-probs are flat, grows its tree breadth-first) | table (the belief of `positional`, the
    inline table: a runtime oracle run grew its tree by it)."""

    def validate(self) -> None:
        """Check the kind and that every row is a sub-probability vector."""
        _require(self.kind in ACCEPTANCE_KINDS, "acceptance.kind",
                 f"{self.kind!r} is not one of {', '.join(ACCEPTANCE_KINDS)}")
        for name, (low, high) in FAMILY_RANGES.items():
            value = getattr(self, name)
            _require(not isinstance(value, bool) and isinstance(value, (int, float)) and low <= value <= high,
                     f"acceptance.{name}", f"{value!r} is outside the acceptance family's range [{low:g}, {high:g}]")
        _require(self.kind != "family" or self.file is None, "acceptance.file",
                 "kind=family builds its table from top1, decay and depth_gain; a file is for positional or replay")
        _require(self.kind != "replay" or self.file is not None, "acceptance.file",
                 "kind=replay needs a recorded run file")
        _require(self.domain is None or (self.kind == "positional" and self.file is not None), "acceptance.domain",
                 f"{self.domain!r} needs kind=positional and an acceptance report in acceptance.file")
        _require(len(self.positional) >= 1, "acceptance.positional", "needs at least one depth row")
        for d, row in enumerate(self.positional):
            _require(len(row) >= 1, f"acceptance.positional[{d}]", "empty row")
            for r, p in enumerate(row):
                _require(0.0 <= p <= 1.0, f"acceptance.positional[{d}][{r}]", f"{p} is outside [0, 1]")
            _require(sum(row) <= 1.0 + 1e-9, f"acceptance.positional[{d}]",
                     f"probabilities sum to {sum(row):.4f} > 1")
        _require(math.isfinite(self.scale) and self.scale >= 0.0, "acceptance.scale",
                 f"must be a finite number >= 0, got {self.scale}")
        if self.kind == "positional" and self.file is None:  # a table from a file is checked as it is read
            check_scale(self.positional, self.scale, "acceptance.positional")
        _require(self.replay_belief in ("geometric", "uniform", "table"), "acceptance.replay_belief",
                 f"{self.replay_belief!r} is not one of geometric, uniform, table")


def max_scale(table: list[list[float]]) -> float:
    """The largest `acceptance.scale` that keeps every row of `table` a sub-probability vector (sum <= 1)."""
    top = max((sum(row) for row in table), default=0.0)
    return math.inf if top <= 0.0 else 1.0 / top


def check_scale(table: list[list[float]], scale: float, where: str) -> None:
    """Raise ConfigError naming `acceptance.scale` and the largest valid scale when the scaled table has a row whose
    sum exceeds 1 (probabilities cannot be scaled past certainty; stronger drafts: kind=family)."""
    top = max((sum(row) for row in table), default=0.0)
    if scale * top > 1.0 + 1e-9:
        _require(False, "acceptance.scale", f"{scale} pushes a row of {where} to sum {scale * top:.4f} > 1; the "
                 f"largest valid scale for this table is {math.floor(1e4 * max_scale(table)) / 1e4:g} "
                 f"(stronger drafts: acceptance.kind=family)")


@dataclass
class SpecConfig(_Frozen):
    """Decoding mode and speculation shape (group `spec`)."""

    mode: str = "async_tree"
    """autoregressive | chain | serial_tree | async_tree."""
    bs: int = 8
    """Verify width: tree nodes per target verify, root included."""
    w: int = 8
    """Draft width: leaves expanded per draft forward."""
    d: str = "auto"
    """Expansions per round: async_tree = draft forwards overlapping one verify (auto: r or r+1 with
    r = floor(t_verify / t_expand), measured after warm-up; poll: expand until the verified path arrives,
    checked between expansions, at most what the tree holds); serial_tree = expansions after the refill (auto: a
    hill climb from ceil((bs - 1) / w), one d at a time up, else down, until two in a row add no expected tokens
    per second, within min(bs - 1, max_tree_nodes // w): the runtime measures trial rounds, the simulator runs
    pilots; policy/depth_tuner.py SerialDepthTuner). A positive integer, auto, or poll (async_tree only)."""
    topk: int = 8
    """Children added per expanded node."""
    gamma: int = 4
    """Draft tokens per round in chain mode."""
    max_tree_nodes: int = 256
    """Capacity of the draft tree region of the KV cache (nodes)."""
    temperature: float = 0.0
    """0 = greedy; > 0 = lossless tree rejection sampling."""
    oracle: bool = False
    """Draw verify outcomes from the acceptance model (shape-realistic runs); outputs are labelled oracle. The
    draft then grows its tree by the acceptance model's belief (log of the positional table, non-increasing in
    rank: a draft whose confidence is calibrated to its acceptance, as the simulator's tree grows), not by a
    random-weight draft's flat log-probs; token ids stay the model's."""

    @property
    def d_fixed(self) -> int | None:
        """`d` as an int, or None for auto / poll."""
        return None if str(self.d) in ("auto", "poll") else int(self.d)

    @property
    def d_poll(self) -> bool:
        """Whether async_tree expands until the verified path arrives (`d=poll`) instead of d times."""
        return str(self.d) == "poll"

    def validate(self) -> None:
        """Check the mode and every width against its bound."""
        _require(self.mode in MODES, "spec.mode", f"{self.mode!r} is not one of {', '.join(MODES)}")
        _require(self.bs >= 2, "spec.bs", f"verify width must be >= 2 (root + one draft token), got {self.bs}")
        _require(self.w >= 1, "spec.w", f"draft width must be >= 1, got {self.w}")
        _require(self.topk >= 1, "spec.topk", f"must be >= 1, got {self.topk}")
        _require(self.gamma >= 1, "spec.gamma", f"must be >= 1, got {self.gamma}")
        d = str(self.d)
        _require(d in ("auto", "poll") or (d.isdigit() and int(d) >= 1), "spec.d",
                 f"{self.d!r} is neither 'auto', 'poll' nor a positive integer")
        _require(d != "poll" or self.mode == "async_tree", "spec.d",
                 f"'poll' overlaps expansions with a verify: async_tree only, not {self.mode}")
        _require(self.max_tree_nodes >= max(self.bs, self.w + 1), "spec.max_tree_nodes",
                 f"{self.max_tree_nodes} < max(bs, w + 1) = {max(self.bs, self.w + 1)}")
        _require(self.temperature >= 0.0, "spec.temperature", f"must be >= 0, got {self.temperature}")


@dataclass
class WorkloadConfig(_Frozen):
    """What to generate (group `workload`)."""

    prompts: list[str] = field(default_factory=list)
    """Prompts as text (runtime; the simulator refuses text prompts); empty: random token prompts of
    `prompt_tokens`, unless `prompt_file` is set."""
    prompt_file: str | None = None
    """JSONL file with one {"prompt": ...} per line (runtime; relative: the working directory, then the repository
    root). When set it is the prompt source and replaces `prompts` (the demo workload's included); a file that is
    missing or malformed fails the run before it starts."""
    prompt_tokens: int = 32
    """Length of random prompts and the simulator's prompt length."""
    num_requests: int | None = 1
    """Requests decoded one after another (batch = 1 request, as in the paper). Text prompts: the first
    num_requests of them, null = all (more than there are is an error); random prompts: this many (>= 1)."""
    max_new_tokens: int = 64
    """Tokens to generate per request (stops earlier at EOS)."""
    max_seq_len_tokens: int = 2048
    """Prefix capacity of the KV cache (prompt + generated); the tree region comes on top."""
    seed: int = 0
    """Seed of random prompts, sampling and the acceptance oracle."""
    eos_token_id: int | None = None
    """End-of-sequence token (runtime): a request stops after emitting it; None = the tokenizer's (real
    checkpoints) or none (random weights). Not in oracle runs, whose tokens are not the model's."""

    def validate(self) -> None:
        """Check counts and that prompt + generation fits in the cache."""
        _require(self.num_requests is not None or bool(self.prompts or self.prompt_file), "workload.num_requests",
                 "null (all text prompts) needs workload.prompts or workload.prompt_file; random prompts need a "
                 "count >= 1")
        _require(self.num_requests is None or self.num_requests >= 1, "workload.num_requests",
                 f"must be >= 1 or null (all text prompts), got {self.num_requests}")
        _require(self.eos_token_id is None or self.eos_token_id >= 0, "workload.eos_token_id",
                 f"must be a token id >= 0 or null, got {self.eos_token_id}")
        _require(self.max_new_tokens >= 1, "workload.max_new_tokens", f"must be >= 1, got {self.max_new_tokens}")
        _require(self.prompt_tokens >= 1, "workload.prompt_tokens", f"must be >= 1, got {self.prompt_tokens}")
        _require(
            self.prompt_tokens + self.max_new_tokens <= self.max_seq_len_tokens,
            "workload.max_new_tokens",
            f"prompt_tokens {self.prompt_tokens} + max_new_tokens {self.max_new_tokens} exceeds the KV cache "
            f"(workload.max_seq_len_tokens = {self.max_seq_len_tokens})",
        )


@dataclass
class HardwareConfig(_Frozen):
    """GPU type (group `hardware`); its node (GPUs per node, links) is the preset's."""

    gpu: str = "h200"
    """GPU preset (conf/presets.py GPU_PRESETS): the GPU's speeds and memory, its link and its node's size
    (`GpuSpec.gpus_per_node`: ranks fill nodes in order, as many nodes as the split needs)."""

    def validate(self) -> None:
        """Check the preset."""
        preset_of(GPU_PRESETS, self.gpu, "hardware.gpu")


@dataclass
class InterconnectConfig(_Frozen):
    """Links inside a group, between the groups, and the all-reduce algorithm (group `interconnect`)."""

    name: str = "nvlink"
    """Scenario name for tables and figures."""
    intra_group: str = "gpu"
    """Link preset between the GPUs of one group (LINK_PRESETS), or gpu: the GPU preset's own link
    (conf/presets.py GpuSpec.link, e.g. nvlink4-h800 for hardware=h800)."""
    cross_group: str = "gpu"
    """Link preset between the draft and target leaders (e.g. ib-ndr when on different nodes), or gpu."""
    allreduce: str = "oneshot"
    """oneshot | ring | tree."""

    def links(self, gpu: str) -> tuple[str, str]:
        """(intra_group, cross_group) link presets on GPU preset `gpu`, "gpu" resolved to the GPU's own link."""
        own = preset_of(GPU_PRESETS, gpu, "hardware.gpu").link
        return (own if self.intra_group == "gpu" else self.intra_group,
                own if self.cross_group == "gpu" else self.cross_group)

    def validate(self) -> None:
        """Check the presets and the all-reduce algorithm."""
        for name in ("intra_group", "cross_group"):
            value = getattr(self, name)
            if value != "gpu":
                preset_of(LINK_PRESETS, value, f"interconnect.{name}")
        _require(self.allreduce in ("oneshot", "ring", "tree"), "interconnect.allreduce",
                 f"{self.allreduce!r} is not one of oneshot, ring, tree")


@dataclass
class WhatIfConfig(_Frozen):
    """`sim.whatif`: the simulator's what-ifs, each pricing something other than what was measured. All at their
    defaults: the calibrated profile (or the analytic prior) as it is, the path the runtime runs."""

    draft_host_scale: float = 1.0
    """Scales the profile's fitted draft host costs (`runtime` block: expand_extra_s, expand_extra_per_row_s,
    draft_round_s); 0 = a draft whose steps cost only their kernels and messages. No effect without a runtime block
    (tools/bench_ratio_bounds.py sweeps it)."""
    draft_device_scale: float = 1.0
    """Scales the device time of the draft group's decode steps, prefills and KV compactions as the profile (or the
    analytic prior) prices them; host costs and messages unchanged. E.g. 0.6: the Llama-3.2-1B one-row step at about
    its byte floor. Must be > 0."""
    runtime_delta: dict[str, float] = field(default_factory=dict)
    """Seconds added to the profile's runtime host costs (its `runtime` block as the config's loop takes it: the top
    level overlaid by its `runtime.loops` entry; after draft_host_scale), keyed by simulator/profile.py RUNTIME_COSTS,
    e.g. `+sim.whatif.runtime_delta.step_extra_s=-5e-5` for every verify 50 us shorter. A key needs its entry in the
    profile; the sum keeps the entry's bounds (>= 0; step_extra_s, ar_step_extra_s, expand_extra_s >= -1 ms)."""
    fused_allreduce: bool = False
    """Prices a fused GEMM + all-reduce the runtime does not run (measured on no GPU yet): a TP > 1 group's
    row-parallel GEMMs (o, down) overlap their all-reduce, so each all-reduce costs only what outlasts its GEMM
    (simulator/cost_model.py forward_breakdown)."""

    def validate(self) -> None:
        """Scales in range; every runtime delta a finite number of seconds (its key is checked against
        simulator/profile.py RUNTIME_COSTS by the simulator's own checks, simulator/checks.py)."""
        _require(math.isfinite(self.draft_host_scale) and self.draft_host_scale >= 0, "sim.whatif.draft_host_scale",
                 f"must be a finite number >= 0, got {self.draft_host_scale}")
        _require(math.isfinite(self.draft_device_scale) and self.draft_device_scale > 0,
                 "sim.whatif.draft_device_scale", f"must be a finite number > 0, got {self.draft_device_scale}")
        for key, value in self.runtime_delta.items():
            _require(not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value),
                     f"sim.whatif.runtime_delta.{key}", f"must be a finite number of seconds, got {value!r}")
        _require(isinstance(self.fused_allreduce, bool), "sim.whatif.fused_allreduce",
                 f"expected true or false, got {self.fused_allreduce!r}")

    def nonzero_deltas(self) -> dict[str, float]:
        """The runtime deltas that change something."""
        return {k: float(v) for k, v in self.runtime_delta.items() if v != 0.0}


@dataclass
class SimConfig(_Frozen):
    """Simulator settings (group `sim`)."""

    profile: str | None = None
    """Fitted profile JSON (calibrate.py); None = the analytic roofline prior."""
    d_rule: str = "round"
    """How spec.d=auto resolves. async_tree: round (d = max(1, round(t_verify / t_expand))) | best_of_two
    (simulate r = floor(t_verify / t_expand) and r + 1 on a short pilot and keep the faster) | runtime (the
    runtime's own DepthTuner on simulated time: skipped, warm-up and trial rounds included, as a measured
    run pays them). serial_tree: round and best_of_two both climb d over pilot simulations from
    ceil((bs - 1) / w) (simulator/simulation.py serial_auto_d); runtime runs the runtime's SerialDepthTuner."""
    whatif: WhatIfConfig = field(default_factory=WhatIfConfig)

    def validate(self) -> None:
        """Check the d rule and the what-ifs."""
        _require(self.d_rule in ("round", "best_of_two", "runtime"), "sim.d_rule",
                 f"{self.d_rule!r} is not one of round, best_of_two, runtime")
        self.whatif.validate()


@dataclass
class TraceConfig(_Frozen):
    """Trace output (group `trace`)."""

    enabled: bool = True
    """Write trace records (shared schema, conf/trace.py) to the run dir."""
    chrome: bool = True
    """Also write a Chrome trace (open in Perfetto)."""
    graph_events: bool = False
    """CUDA events around every graph-replayed verify (not chained autoregressive steps): its device time as
    `device_s` in the leader's step.verify span extra (read after the verdict's own sync; needs kernels=graphs
    without cuda_graphs in kernels.ablate), split into `gpu_inputs_s` (span start -> input copies on the device),
    `gpu_copies_s`,
    `gpu_replay_s`, with the host's marks `inputs_s` (inputs built), `copied_s`, `launched_s` (replay queued)
    and `decided_s` (verdict known), seconds after the span's start. Tells host gaps from device time. Also
    around every replayed draft expansion: `device_s`, `gpu_copies_s`, `gpu_replay_s` and the host's marks
    `planned_s`, `copied_s`, `launched_s` in its step.expand span's extra."""


@dataclass
class ExperimentConfig(_Frozen):
    """The whole resolved configuration of one run."""

    model: ModelPairConfig = field(default_factory=ModelPairConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    spec: SpecConfig = field(default_factory=SpecConfig)
    acceptance: AcceptanceConfig = field(default_factory=AcceptanceConfig)
    kernels: KernelsConfig = field(default_factory=KernelsConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    interconnect: InterconnectConfig = field(default_factory=InterconnectConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    seed: int = 0
    """Global seed: the random weights of both models (runtime; a draft of the target's preset is then the target
    itself) and, with workload.seed, the simulator's draws."""
    run_name: str = "run"
    """Label of the run (run-dir metadata, figure legends)."""

    def validate(self) -> None:
        """Validate every group, then the rules that span groups."""
        self.model.target.validate("model.target")
        if self.model.draft is not None:
            self.model.draft.validate("model.draft")
        for part in (self.parallel, self.spec, self.acceptance, self.kernels, self.workload, self.hardware,
                     self.interconnect, self.sim):
            part.validate()
        mode = self.spec.mode
        if mode in DRAFT_MODES:
            _require(self.model.draft is not None, "model.draft", f"spec.mode={mode} needs a draft model")
        if mode == "async_tree":
            _require(self.parallel.draft_gpus >= 1, "parallel.draft_gpus",
                     "spec.mode=async_tree needs a draft group of >= 1 GPU (disjoint from the target's)")
        target = model_preset(self.model.target.preset, "model.target.preset")
        check_tp(target, self.parallel.target_gpus, "parallel.target_gpus")
        if self.model.draft is not None and self.parallel.draft_gpus >= 1:
            draft = model_preset(self.model.draft.preset, "model.draft.preset")
            check_tp(draft, self.parallel.draft_gpus, "parallel.draft_gpus")
            _require(draft.token_count == target.token_count, "model.draft.preset",
                     f"draft vocabulary ({draft.token_count} tokens) differs from the target's "
                     f"({target.token_count} tokens)")
        _require(self.workload.eos_token_id is None or self.workload.eos_token_id < target.token_count,
                 "workload.eos_token_id", f"{self.workload.eos_token_id} is not a token of {target.name} "
                 f"(0..{target.token_count - 1})")
        cache_tokens = self.workload.max_seq_len_tokens + self.spec.max_tree_nodes
        _require(cache_tokens <= target.max_position, "workload.max_seq_len_tokens",
                 f"cache of {cache_tokens} tokens exceeds {target.name}'s {target.max_position} positions")
        _require(not self.kernels.draft_head or self.spec.topk <= DRAFT_HEAD_MAX_TOPK, "spec.topk",
                 f"kernels.draft_head takes at most {DRAFT_HEAD_MAX_TOPK} children per node (kernels.topk_logprobs), "
                 f"got {self.spec.topk}; add draft_head to kernels.ablate for more")


def register_configs() -> None:
    """Register the schema in Hydra's ConfigStore so every YAML group is type-checked."""
    from hydra.core.config_store import ConfigStore

    from conf.cli import register_resolvers

    register_resolvers()
    cs = ConfigStore.instance()
    cs.store(name="experiment_schema", node=ExperimentConfig)
    for group, node in [
        ("model", ModelPairConfig), ("parallel", ParallelConfig), ("spec", SpecConfig),
        ("acceptance", AcceptanceConfig), ("kernels", KernelsConfig), ("workload", WorkloadConfig),
        ("hardware", HardwareConfig), ("interconnect", InterconnectConfig), ("sim", SimConfig),
        ("trace", TraceConfig),
    ]:
        cs.store(group=group, name=f"{group}_schema", node=node)
