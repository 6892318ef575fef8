"""Cost model: pure functions from a step description to seconds, summed from per-operator terms.

A forward step of one GPU group (`StepDesc`: tokens in the step, keys attended = prefix + tree region, TP
degree) on a model shape costs, per rank (all ranks of a TP group run in lockstep):

    gemm        per layer: qkv, o, gate_up, down (+ the LM head once), each one weight-matrix GEMM call
    attention   per layer: reading the KV of prefix + tree, tokens x kv_len query-key pairs
    allreduce   2 per layer for TP > 1 (after o and down, tokens x hidden bf16) + 1 small logits gather
    overhead    per step: host overhead + kernel launches (`kernels_per_step`)

Each operator time comes from `Operators`: the analytic roofline prior (max(bytes / bandwidth, flops /
FLOP/s) per GEMM and per layer's attention on GPU_PRESETS; alpha-beta links from interconnect.py;
PRIOR_STEP_OVERHEAD_S + launches x `GpuSpec.kernel_launch_s`), or, operator by operator, a fitted profile
(profile.py forms) that takes precedence where it exists and applies. A profile's in-graph fits (`gemm_graph`,
`attention_graph`: exposed time inside captured steps; `step_overhead_graph`: the small kernels of a captured step,
counted per role and rows by `GraphKernels`) price the decode steps of CUDA-graph configs; prefills and eager
steps keep the standalone ones.

Precision: weights of `weight_bits` (16: 2 B/param; 8: the runtime's fp8 layout, below; 4: 0.5 B + fp16 scale and
int4 zero per group of 128, AWQ g128, simulator only) in the decoder layers; embedding and LM head stay
bf16 (SwiftSpec setup); KV cache and activations bf16. Shards round up (zero-padded TP, as the runtime).
At 8 bits the simulator follows the runtime's layout: a decode step of at most SKINNY_MAX_ROWS rows streams fp8
copies with one float32 scale per output row (`streams_fp8`, `matrix_bytes`) through the skinny kernels, priced by the
profile's `gemm_fp8` fit where it has one; a biased QKV, a TP shard's o / down projections (cuBLAS under TP) and
wider steps (prefills) run the 16-bit weights; and a rank holds both copies (`weight_bytes_per_rank`).

Both forms are affine in kv_len for a fixed token count, which `GroupCost` uses to cost a step with two
multiplies on the hot path. What this model does not do: contention, prefill/decode interference, power
or clock throttling, GEMM tile-quantisation steps (a fitted profile absorbs the average).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from conf.presets import LINK_PRESETS, GpuSpec, LinkSpec, ModelShape
from simulator.interconnect import allreduce_time_s, message_time_s
from simulator.profile import (
    Profile,
    allreduce_features,
    attention_features,
    gemm_features,
    message_features,
    step_overhead_features,
    step_overhead_graph_features,
)

GROUP_SIZE = 128
"""Quantisation group of 4-bit weights (AWQ g128): one fp16 scale + int4 zero per 128 weights."""
BYTES_PER_PARAM = {16: 2.0, 4: 0.5 + 2.5 / GROUP_SIZE}
"""Bytes per weight at 16 and 4 bits (8 bits: `fp8_matrix_bytes`, the runtime's layout)."""
ACT_BYTES = 2
"""bf16 activations and KV cache."""
GEMM_BW_EFFICIENCY = 0.85
"""Share of HBM copy bandwidth a weight-streaming GEMM reaches: the Llama-3-8B GEMM chain at 1 token ran at
3.46 of 4.29 TB/s including launch gaps (reference/device-h200.md), about 0.85 without them."""
EAGER_LAUNCH_S = 5.0e-6
"""Per-kernel host dispatch without CUDA graphs (PyTorch eager, order of magnitude)."""
PRIOR_STEP_OVERHEAD_S = 3.0e-5
"""The analytic prior's host time per forward step (scheduling, graph launch) on top of its kernel launches, where
the profile has no step_overhead fit."""
PRIOR_MESSAGE_HOST_S = 2.0e-5
"""The analytic prior's software time per leader message (framework, launch) on top of the link's latency, where the
profile has no message fit."""
PRIOR_TREE_OP_S = 2.0e-5
"""The analytic prior's host time of one re-root + top-bs selection on the draft leader (per round), where the
profile carries no measured `tree_op_s` (and its runtime block no draft_round_s)."""
EAGER_PREFILL_LAUNCH_S = 9.0e-5
"""Host time per kernel launch of an eager prefill (the Triton backend without a captured prefill): such a prefill
costs max(its operators, launches x this). The H200 host's median over four models and 37-1024 tokens; a captured
prefill costs its operators."""
ROLES = ("target", "draft")
"""What a group's decode steps are: target forwards (verifies, autoregressive steps) or draft expansions."""
SKINNY_MAX_ROWS = 64
"""The runtime's skinny-GEMM row limit (runtime.fused_decode.SKINNY_MAX_ROWS, a test keeps them equal): the target's
fused QKV + RoPE GEMM serves steps of up to this many rows."""
ROW_PARALLEL = ("o", "down")
"""The layer matrices whose TP shards are row-parallel: each output is all-reduced (2 per layer at TP > 1)."""
LOGITS_GATHER_BYTES_PER_TOKEN = 16
"""TP > 1: each rank contributes its shard's best (value, index) per token to a small gather."""


@dataclass(frozen=True)
class StepDesc:
    """One forward step of one group: `tokens` queries attending to `kv_len` keys, on `tp` ranks."""

    tokens: int
    kv_len: int
    tp: int


def shard(n: int, tp: int) -> int:
    """Per-rank share of `n` under zero-padded TP."""
    return -(-n // tp)


def layer_matrices(shape: ModelShape, tp: int) -> list[tuple[str, int, int]]:
    """(name, k, n) of the weight matrices of one decoder layer on one rank."""
    q = shard(shape.num_heads, tp) * shape.head_dim
    kv = shard(shape.num_kv_heads, tp) * shape.head_dim
    inter = shard(shape.intermediate_size, tp)
    h = shape.hidden_size
    return [("qkv", h, q + 2 * kv), ("o", q, h), ("gate_up", h, 2 * inter), ("down", inter, h)]


def lm_head_matrix(shape: ModelShape, tp: int) -> tuple[int, int]:
    """(k, n) of the vocabulary-parallel LM head on one rank."""
    return shape.hidden_size, shard(shape.vocab_size, tp)


def streams_fp8(name: str, tp: int, tokens: int, qkv_bias: bool = False) -> bool:
    """Whether a step of `tokens` rows streams the fp8 copy of layer matrix `name` at weight_bits 8
    (runtime/fused_decode.py): only the skinny kernels read fp8 (steps of at most SKINNY_MAX_ROWS rows); a biased QKV
    and, under TP, the row-parallel o / down projections stay on cuBLAS with the 16-bit weights."""
    if tokens > SKINNY_MAX_ROWS:
        return False
    if name == "qkv":
        return not qkv_bias
    return tp == 1 or name not in ("o", "down")


def fp8_matrix_bytes(k: int, n: int) -> float:
    """Bytes of one fp8 copy of a [n, k] matrix: 1 B per weight + a float32 scale per output row."""
    return k * n + 4.0 * n


def matrix_bytes(name: str, k: int, n: int, weight_bits: int, tp: int, tokens: int = 1,
                 qkv_bias: bool = False) -> float:
    """Weight bytes a decode step of `tokens` rows streams for one layer matrix (`layer_matrices`) of one rank. 8 bits:
    the runtime's fp8 copy where it streams one (`streams_fp8`), else the 16-bit weights; 4 bits: AWQ g128 (simulator
    only)."""
    if weight_bits == 8:
        return fp8_matrix_bytes(k, n) if streams_fp8(name, tp, tokens, qkv_bias) else k * n * ACT_BYTES
    return k * n * BYTES_PER_PARAM[weight_bits]


def weight_bytes_per_rank(shape: ModelShape, tp: int, weight_bits: int) -> float:
    """Weight bytes one rank holds: layers at `weight_bits`, embedding and LM head in bf16. At 8 bits the runtime's
    layout: the 16-bit weights (prefills, cuBLAS calls) and an fp8 copy of every layer matrix but a biased QKV."""
    mats = layer_matrices(shape, tp)
    if weight_bits == 8:
        layer = sum(k * n * ACT_BYTES + (0.0 if name == "qkv" and shape.qkv_bias else fp8_matrix_bytes(k, n))
                    for name, k, n in mats)
    else:
        layer = sum(k * n for _, k, n in mats) * BYTES_PER_PARAM[weight_bits]
    k, n = lm_head_matrix(shape, tp)
    emb = k * n * ACT_BYTES * (1 if shape.tie_embeddings else 2)
    return shape.num_layers * layer + emb


def kv_bytes_per_token_per_rank(shape: ModelShape, tp: int) -> float:
    """KV-cache bytes of one token on one rank, all layers."""
    return 2 * shape.num_layers * shard(shape.num_kv_heads, tp) * shape.head_dim * ACT_BYTES


def attention_terms(shape: ModelShape, tp: int, tokens: int, kv_len: int) -> tuple[float, float]:
    """(KV bytes read, FLOPs) of one layer's attention on one rank."""
    kv_bytes = kv_len * 2 * shard(shape.num_kv_heads, tp) * shape.head_dim * ACT_BYTES
    flops = 4.0 * tokens * kv_len * shard(shape.num_heads, tp) * shape.head_dim
    return kv_bytes, flops


def kernels_per_step(shape: ModelShape, tp: int, fused: bool) -> int:
    """Kernel launches of one forward: per layer 2 norms, qkv, rope, attention, o, gate_up, act, down
    (rope and act fused away by the Triton backend) + 2 all-reduces at TP > 1; embedding, final norm, LM
    head, argmax (+ gather)."""
    per_layer = (7 if fused else 9) + (2 if tp > 1 else 0)
    return shape.num_layers * per_layer + 4 + (1 if tp > 1 else 0)


@dataclass(frozen=True)
class GraphKernels:
    """Which small kernels a group's captured decode steps launch: its role and the runtime's kernels switches
    (defaults: conf/kernels/graphs.yaml, what profile_ops' step_graphs section captures)."""

    role: str = "target"
    """target (verifies, autoregressive steps) or draft (expansions)."""
    qkv_rope: bool = True
    """kernels.target_qkv_rope (with kernels.skinny): a target's QKV GEMM does RoPE + the KV write (drafts never)."""
    rope_attention: bool = True
    """kernels.rope_attention: a one-row step's attention does RoPE + the KV write."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"GraphKernels.role: must be one of {ROLES}, got {self.role!r}")

    def counts(self, shape: ModelShape, tokens: int) -> tuple[int, int]:
        """(small kernels, RoPE + KV-write kernels) of one captured decode step of `tokens` rows, per rank: the
        kernels that are neither GEMMs nor attention (calibration/graph_profile.py `kernel_class` "other"), the separate
        RoPE launches apart.

        Small kernels: two norms per layer (residual add included) and, per step, the embedding, the final norm and
        the head: a target's verdict (one more at one row) or a draft's top-k children and its owed KV compaction
        (`runtime.graphs` captures one in every expansion graph). RoPE + KV write: one launch per layer where
        neither the target's QKV GEMM (no QKV bias, <= SKINNY_MAX_ROWS rows) nor a one-row step's attention does
        it, e.g. a draft's multi-row expansion. With the default switches these equal the `other_calls` of every
        profiled captured step (tests/simulator checks a recorded step trace)."""
        layers, target = shape.num_layers, self.role == "target"
        fused = ((target and self.qkv_rope and not shape.qkv_bias and tokens <= SKINNY_MAX_ROWS)
                 or (self.rope_attention and tokens <= 1))
        small = 2 * layers + (4 + (tokens == 1) if target else 6)
        return small, 0 if fused else layers


def profile_is_eager(profile: Profile) -> bool:
    """Whether the profile's whole-step overheads were measured without CUDA graphs."""
    sw = profile.software
    if "steps_mode" in sw:  # calibration/profile_ops.py since graph timing
        return sw["steps_mode"] != "graphs"
    return sw.get("cuda_graphs") is False or "eager" in str(sw.get("runtime", "")).lower()


GRAPH_OPERATORS = {"gemm_graph": "gemm", "attention_graph": "attention", "step_overhead_graph": "step_overhead"}
"""In-graph operator -> the standalone one that prices captured steps where the profile lacks it."""


class Operators:
    """Per-operator time of one call: profile fit where one exists and applies, else the analytic prior."""

    def __init__(self, gpu: GpuSpec, intra: LinkSpec, allreduce: str, cross: LinkSpec, host_overhead_s: float,
                 step_overhead_s: float, cuda_graphs: bool, profile: Profile | None = None,
                 intra_name: str = "", cross_name: str = "", fused_allreduce: bool = False) -> None:
        self.gpu, self.intra, self.allreduce_alg, self.cross = gpu, intra, allreduce, cross
        # what-if (sim.whatif.fused_allreduce): row-parallel GEMMs overlap their all-reduce (forward_breakdown)
        self.fused_allreduce = fused_allreduce
        self.host_overhead_s, self.base_overhead_s = host_overhead_s, step_overhead_s
        self.launch_s = gpu.kernel_launch_s if cuda_graphs else EAGER_LAUNCH_S
        fits = dict(profile.operators) if profile else {}
        if profile is not None:
            hw = profile.hardware
            if hw.get("intra_group", intra_name) != intra_name or hw.get("allreduce", allreduce) != allreduce:
                fits.pop("allreduce", None)  # measured on another link or algorithm: use the prior
            if hw.get("cross_group", cross_name) != cross_name:
                fits.pop("message", None)
            graph_steps = profile.software.get("steps_mode") == "graphs"
            if (cuda_graphs and profile_is_eager(profile)) or (not cuda_graphs and graph_steps):
                # The fitted step overhead is the host time of steps run the other way: eager steps pay a
                # launch per kernel that a CUDA-graph replay does not, and the reverse; the prior applies.
                fits.pop("step_overhead", None)
            impl = str(profile.software.get("allreduce_impl", "")).lower()
            if ("eager" in impl and cuda_graphs) or ("graph" in impl and not cuda_graphs):
                fits.pop("allreduce", None)  # eager NCCL latency (~45 us) vs ~10 us inside a graph: not one fit
        if not cuda_graphs:  # exposed times inside captured steps: eager steps launch every kernel alone
            for op in GRAPH_OPERATORS:
                fits.pop(op, None)
        self.fits = fits
        self.sources = {op: ("profile" if op in fits else "analytic")
                        for op in ("gemm", "attention", "allreduce", "message", "message_unix", "step_overhead")}
        self.sources["gemm_fp8"] = "profile" if "gemm_fp8" in fits else "as gemm"
        for op, standalone in GRAPH_OPERATORS.items():
            # without an in-graph fit a captured step takes the standalone operator's price
            self.sources[op] = "profile" if op in fits else f"as {standalone}"

    @property
    def graph_fits(self) -> bool:
        """Whether decode steps are priced by in-graph fits (any of GRAPH_OPERATORS; CUDA graphs only)."""
        return any(op in self.fits for op in GRAPH_OPERATORS)

    def gemm_s(self, weight_bytes: float, flops: float, tp: int, graph: bool = False, fp8: bool = False,
               shape: tuple[str, int, int, int] | None = None) -> float:
        """One GEMM call (one weight matrix on one rank); `graph`: inside a captured decode step (`gemm_graph`
        where fitted); `fp8`: a skinny kernel streaming fp8 weights (`gemm_fp8` where fitted, else as 16-bit);
        `shape` (matrix, k, n, M): the fit's measured time of that matrix where the profile has one
        (`OperatorFit.at_shape`)."""
        fit = ((self.fits.get("gemm_fp8") if fp8 else None) or (self.fits.get("gemm_graph") if graph else None)
               or self.fits.get("gemm"))
        if fit is not None:
            measured = fit.at_shape(*shape) if shape is not None and fit.measured else None
            return fit.predict(gemm_features(weight_bytes, flops), tp) if measured is None else measured
        return max(weight_bytes / (self.gpu.hbm_bytes_per_s * GEMM_BW_EFFICIENCY),
                   flops / self.gpu.bf16_flops_per_s)

    def attention_s(self, kv_bytes: float, flops: float, tokens: int, kv_len: int, tp: int,
                    graph: bool = False) -> float:
        """One layer's attention on one rank; `graph`: inside a captured decode step (`attention_graph` where
        fitted)."""
        fit = (self.fits.get("attention_graph") if graph else None) or self.fits.get("attention")
        if fit is not None:
            return fit.predict(attention_features(kv_bytes, tokens, kv_len), tp)
        return max(kv_bytes / self.gpu.hbm_bytes_per_s, flops / self.gpu.bf16_flops_per_s)

    def allreduce_s(self, nbytes: float, tp: int) -> float:
        """One all-reduce of `nbytes` per rank over `tp` ranks (0 at TP 1)."""
        if tp <= 1:
            return 0.0
        fit = self.fits.get("allreduce")
        if fit is not None:
            return fit.predict(allreduce_features(nbytes), tp)
        return allreduce_time_s(self.intra, self.allreduce_alg, tp, nbytes)

    def message_s(self, nbytes: float, receiver_gpus: int, transport: str = "dist") -> float:
        """One cross-group message of `nbytes` delivered to a group of `receiver_gpus`. `transport`: dist (the
        torch.distributed leader channel over the cross-group link) or unix (the Unix-socket leader channel of two
        leaders on one host: the profile's `message_unix`, else the measured `unix-socket` link preset)."""
        if transport == "unix":
            fit = self.fits.get("message_unix")
            if fit is not None:
                return fit.predict(message_features(nbytes))
            return message_time_s(LINK_PRESETS["unix-socket"], self.intra, receiver_gpus, nbytes, 0.0)
        if transport != "dist":
            raise ValueError(f"message transport: {transport!r} is not one of dist, unix")
        fit = self.fits.get("message")
        if fit is not None:
            return fit.predict(message_features(nbytes))
        return message_time_s(self.cross, self.intra, receiver_gpus, nbytes, self.host_overhead_s)

    def step_overhead_s(self, num_kernels: int, tp: int) -> float:
        """Fixed cost of one forward step: host overhead + kernel launches."""
        fit = self.fits.get("step_overhead")
        if fit is not None:
            return fit.predict(step_overhead_features(num_kernels), tp)
        return self.base_overhead_s + num_kernels * self.launch_s

    def graph_overhead_s(self, shape: ModelShape, kernels: GraphKernels, tokens: int, tp: int) -> float | None:
        """The small kernels of one captured decode step (`step_overhead_graph`, counted by `GraphKernels.counts`);
        None where the profile has no such fit."""
        fit = self.fits.get("step_overhead_graph")
        if fit is None:
            return None
        small, rope = kernels.counts(shape, tokens)
        return fit.predict(step_overhead_graph_features(small, rope, shape.hidden_size), tp)


class GemmCall(NamedTuple):
    """One distinct GEMM of a forward step on one rank (`gemm_calls`)."""

    weight_bytes: float
    flops: float
    calls: int
    """per step: num_layers for a layer matrix, 1 for the LM head"""
    fp8: bool
    """the call streams an fp8 copy (`streams_fp8`)"""
    name: str
    """qkv, o, gate_up, down (`layer_matrices`) or lm_head"""
    k: int
    n: int


def gemm_calls(shape: ModelShape, weight_bits: int, step: StepDesc) -> list[GemmCall]:
    """Each distinct GEMM of one forward step on one rank: the layers' matrices (num_layers calls each) and the LM head
    (once, bf16)."""
    tp, t = step.tp, step.tokens
    out = [GemmCall(matrix_bytes(name, k, n, weight_bits, tp, t, shape.qkv_bias), 2.0 * t * k * n, shape.num_layers,
                    weight_bits == 8 and streams_fp8(name, tp, t, shape.qkv_bias), name, k, n)
           for name, k, n in layer_matrices(shape, tp)]
    k, n = lm_head_matrix(shape, tp)
    return out + [GemmCall(k * n * ACT_BYTES, 2.0 * t * k * n, 1, False, "lm_head", k, n)]


def step_operator_features(shape: ModelShape, weight_bits: int, step: StepDesc) -> dict[str, tuple[float, ...]]:
    """The summed features of one forward step's GEMM calls and attention calls (the profile forms are linear in
    their coefficients, so a step's GEMM time is dot(coefficients, these sums)): what calibrate fits `gemm_graph`
    and `attention_graph` on, from the exposed time of each kernel class inside a captured step."""
    gemm = [0.0, 0.0, 0.0]
    for c in gemm_calls(shape, weight_bits, step):
        for i, f in enumerate(gemm_features(c.weight_bytes, c.flops)):
            gemm[i] += c.calls * f
    kv_bytes, _ = attention_terms(shape, step.tp, step.tokens, step.kv_len)
    attn = tuple(shape.num_layers * f for f in attention_features(kv_bytes, step.tokens, step.kv_len))
    return {"gemm_graph": tuple(gemm), "attention_graph": attn}


def forward_breakdown(ops: Operators, shape: ModelShape, weight_bits: int, step: StepDesc,
                      fused: bool = True, graph: bool = False,
                      kernels: GraphKernels = GraphKernels()) -> dict[str, float]:
    """Seconds per operator class of one forward step (keys: gemm, attention, allreduce, overhead). `graph`: a
    captured decode step, whose GEMMs, attention and small kernels take the in-graph fits where the profile has them
    (the small kernels also need the fused Triton path, whose launches `kernels` counts)."""
    tp, t = step.tp, step.tokens
    calls = [(c, ops.gemm_s(c.weight_bytes, c.flops, tp, graph, c.fp8, (c.name, c.k, c.n, t)))
             for c in gemm_calls(shape, weight_bits, step)]
    gemm = sum(c.calls * s for c, s in calls)
    kv_bytes, flops = attention_terms(shape, tp, t, step.kv_len)
    attn = ops.attention_s(kv_bytes, flops, t, step.kv_len, tp, graph)
    one_ar = ops.allreduce_s(t * shape.hidden_size * ACT_BYTES, tp)
    if ops.fused_allreduce and tp > 1:
        # what-if: each row-parallel GEMM (o, down) streams its output into its all-reduce, which then costs only
        # the part that outlasts the GEMM (perfect overlap: a bound on what the fusion can save)
        ar = sum(max(0.0, one_ar - s) for c, s in calls if c.name in ROW_PARALLEL)
    else:
        ar = 2 * one_ar
    gather = ops.allreduce_s(t * LOGITS_GATHER_BYTES_PER_TOKEN, tp)
    overhead = ops.graph_overhead_s(shape, kernels, t, tp) if graph and fused else None
    return {
        "gemm": gemm,
        "attention": shape.num_layers * attn,
        "allreduce": shape.num_layers * ar + gather,
        "overhead": ops.step_overhead_s(kernels_per_step(shape, tp, fused), tp) if overhead is None else overhead,
    }


def forward_time_s(ops: Operators, shape: ModelShape, weight_bits: int, step: StepDesc, fused: bool = True) -> float:
    """Seconds of one forward step (sum of `forward_breakdown`)."""
    return sum(forward_breakdown(ops, shape, weight_bits, step, fused).values())


def compaction_time_s(gpu: GpuSpec, shape: ModelShape, tp: int, kept_tokens: int, launch_s: float) -> float:
    """KV compaction after a verify: one gather over all layers, reading and writing the kept tokens' KV."""
    return launch_s + 2.0 * kept_tokens * kv_bytes_per_token_per_rank(shape, tp) / gpu.hbm_bytes_per_s


NEGATIVE_EXTRA_CAP = 0.25
"""A negative runtime correction (profile `runtime`, fitted where the runtime's fused graph steps beat the sum of
their profiled operators: ~0.5 ms of a ~5.5 ms Llama-3-8B verify) removes at most this share of a decode step's
operator time: fitted on 8B runs, it must not erase a small model's step. Prefills never take a negative one."""


def _with_extra(model_s: float, extra_s: float) -> float:
    """A step's operator time plus its runtime correction (a negative one capped by NEGATIVE_EXTRA_CAP)."""
    return model_s + max(extra_s, -NEGATIVE_EXTRA_CAP * model_s)


class GroupCost:
    """The cost model bound to one group (model shape, precision, TP): fast, cached step costs.

    `forward_s(tokens, kv_len)` = intercept(tokens) + slope(tokens) * kv_len, exact because every operator
    form is affine in kv_len at fixed tokens (the coefficients come from `forward_breakdown` at two points).
    """

    def __init__(self, ops: Operators, shape: ModelShape, weight_bits: int, tp: int, fused: bool = True,
                 extra_s: float = 0.0, extra_per_token_s: float = 0.0, broadcast_s: float = 0.0,
                 extra_per_real_row_s: float = 0.0, prefill_launch_s: float = 0.0,
                 kernels: GraphKernels = GraphKernels(), device_scale: float = 1.0) -> None:
        self.ops, self.shape, self.weight_bits, self.tp, self.fused = ops, shape, weight_bits, tp, fused
        # what-if on the group's kernels (sim.whatif.draft_device_scale): every step's, prefill's and compaction's
        # device time times this; host costs and messages unchanged
        self.device_scale = device_scale
        self.kernels = kernels  # target forwards or draft expansions: which small kernels its captured steps launch
        # an eager prefill's host time per launch (0: a captured prefill, its operators alone)
        self.prefill_host_s = prefill_launch_s * kernels_per_step(shape, tp, fused)
        # fitted host time per step of the runtime's loop (profile `runtime`): constant + per query row + per real
        # (not padding) row
        self.extra_s, self.extra_per_token_s = extra_s, extra_per_token_s
        self.extra_per_real_row_s = extra_per_real_row_s
        # a TP > 1 target's leader broadcasts each step's verdict to its group (not after a prefill)
        self.broadcast_s = broadcast_s
        self._affine: dict[tuple[int, bool], tuple[float, float]] = {}
        self._compaction: dict[tuple[int, bool], float] = {}

    def breakdown(self, tokens: int, kv_len: int, prefill: bool = False) -> dict[str, float]:
        """Per-operator seconds of one step (not cached; for reports): a decode step (priced by the in-graph fits
        where the profile has them), or with `prefill` a prompt prefill (the standalone fits); times `device_scale`."""
        parts = forward_breakdown(self.ops, self.shape, self.weight_bits, StepDesc(tokens, kv_len, self.tp),
                                  self.fused, graph=not prefill and self.ops.graph_fits, kernels=self.kernels)
        return parts if self.device_scale == 1.0 else {k: v * self.device_scale for k, v in parts.items()}

    def _line(self, tokens: int, prefill: bool = False) -> tuple[float, float]:
        line = self._affine.get((tokens, prefill))
        if line is None:
            at0 = sum(self.breakdown(tokens, 0, prefill).values())
            at1 = sum(self.breakdown(tokens, 1024, prefill).values())
            line = (at0, (at1 - at0) / 1024)
            self._affine[(tokens, prefill)] = line
        return line

    def forward_s(self, tokens: int, kv_len: int, real_rows: float | None = None) -> float:
        """Seconds of a decode step (a verify or an expansion) of `tokens` queries over `kv_len` keys, `real_rows`
        of them real (None: all; padding rows cost device time but no host bookkeeping)."""
        a, b = self._line(tokens)
        real = tokens if real_rows is None else real_rows
        extra = self.extra_s + self.extra_per_token_s * tokens + self.extra_per_real_row_s * real
        return _with_extra(a + b * kv_len, extra) + self.broadcast_s

    def prefill_s(self, prompt_tokens: int) -> float:
        """Prompt prefill: all prompt tokens at once, causal (on average half the prompt attended); 0 if empty.
        One step: the constant host extra applies if positive (a negative one is the fused decode graph's saving,
        which an eager cuBLAS prefill does not have); the per-row one (tree bookkeeping per leaf) does not. An eager
        prefill (`prefill_launch_s` > 0) takes at least its launches' host time."""
        if prompt_tokens <= 0:
            return 0.0
        a, b = self._line(prompt_tokens, prefill=True)
        return max(a + b * math.ceil(prompt_tokens / 2), self.prefill_host_s) + max(self.extra_s, 0.0)

    def compaction_s(self, kept_tokens: int, launch: bool = True) -> float:
        """KV compaction of `kept_tokens` tokens on this group; `launch=False`: inside another step's CUDA graph
        (the runtime's graph steps apply an owed compaction as their first kernel: bytes only)."""
        t = self._compaction.get((kept_tokens, launch))
        if t is None:
            t = compaction_time_s(self.ops.gpu, self.shape, self.tp, kept_tokens,
                                  self.ops.launch_s if launch else 0.0) * self.device_scale
            self._compaction[(kept_tokens, launch)] = t
        return t


class FixedCost:
    """A group cost with constant step times (closed-form checks and what-if studies)."""

    def __init__(self, forward_s: float, prefill_s: float = 0.0, compaction_s: float = 0.0) -> None:
        self._forward_s, self._prefill_s, self._compaction_s = forward_s, prefill_s, compaction_s

    def forward_s(self, tokens: int, kv_len: int, real_rows: float | None = None) -> float:
        """The constant forward time, whatever the shape."""
        return self._forward_s

    def prefill_s(self, prompt_tokens: int) -> float:
        """The constant prefill time."""
        return self._prefill_s

    def compaction_s(self, kept_tokens: int, launch: bool = True) -> float:
        """The constant KV-compaction time."""
        return self._compaction_s
