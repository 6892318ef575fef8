"""The `kernels` config group (conf/kernels/*.yaml): which Triton kernels, CUDA graphs and launch / staging modes a run
uses (part of conf/schema.py's ExperimentConfig, re-exported there)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from conf.frozen import _Frozen, _require

INPUT_STAGING = ("pageable", "pinned", "graph")
"""`kernels.input_staging` values: how a CUDA-graph step's inputs reach the device (runtime/graphs.py)."""


READBACK = ("sync", "spin")
"""`kernels.readback` values: how the host reads a CUDA-graph step's small outputs (runtime/graphs.py)."""


DRAFT_HEAD_MAX_TOPK = 64
"""kernels.topk_logprobs.MAX_K: the top-k the fused draft head unrolls at most (tests/conf check they agree)."""


PDL_TRIGGERS = ("default", "off", "early", "late")
"""`kernels.pdl_policy.<role>` values: kernels/pdl.py's TRIGGERS, or "default" (its DEFAULT_POLICY for the role)."""


@dataclass
class PdlPolicy(_Frozen):
    """`kernels.pdl_policy`: the PDL trigger of each kernel role (kernels/pdl.py ROLES and TRIGGERS, which a test holds
    equal to these fields and PDL_TRIGGERS) when kernels.pdl is on, e.g. `kernels.pdl_policy.norm=late` for the norms
    released as their blocks exit instead of early. "default": kernels.pdl.DEFAULT_POLICY's trigger, measured on the
    H200; another GPU may want its own (bench/bench_step_variants.py times them per kernel)."""

    gemm: str = "default"
    small: str = "default"
    pre_attention: str = "default"
    norm: str = "default"

    def validate(self) -> None:
        """Every role's trigger is one of PDL_TRIGGERS."""
        for f in fields(self):
            v = getattr(self, f.name)
            _require(v in PDL_TRIGGERS, f"kernels.pdl_policy.{f.name}",
                     f"{v!r} is not one of {', '.join(PDL_TRIGGERS)}")

    def overrides(self) -> dict[str, str]:
        """The roles whose trigger is not the default: `kernels.pdl.set_pdl`'s keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != "default"}


@dataclass
class KernelsConfig(_Frozen):
    """Kernel selection (group `kernels`)."""

    backend: str = "reference"
    """reference (plain torch, exact on CPU) | triton."""
    cuda_graphs: bool = False
    """Capture verify and expand steps in CUDA graphs (GPU only)."""
    fused_allreduce: bool = False
    """Use the one-shot GEMM + all-reduce for row-parallel linears (GPU, TP > 1)."""
    skinny: bool = False
    """Decode-sized steps run their projections through the Triton skinny GEMM, the o and down ones as split-K
    partials summed inside the next add + RMSNorm (`Transformer.use_fused_kernels`; needs backend triton)."""
    pdl: bool = False
    """Programmatic dependent launch for the Triton kernels (kernels/pdl.py; takes effect on sm90+ GPUs)."""
    pdl_policy: PdlPolicy = field(default_factory=PdlPolicy)
    """With kernels.pdl: the trigger per kernel role (`kernels.pdl_policy.<role>=off|early|late`); all "default"."""
    rope_attention: bool = False
    """Single-token steps (kernels.tree_attention.ROPE_FASTER_MAX_TOKENS) rotate q and write the new K/V inside the
    tree-attention launch (`kernels.rope_tree_attention`) instead of a separate `kernels.rope_kv_write` (needs backend
    triton)."""
    target_qkv_rope: bool = False
    """The target's decode steps run its QKV projection as `kernels.qkv_rope_kv_write` (RoPE and the K/V cache write
    in the GEMM's epilogue, two programs per head), and its attention loads its prefix beside that launch: one launch
    fewer per layer than the skinny GEMM + `kernels.rope_kv_write` (tree steps) or the fused RoPE attention
    (single-token steps, which it replaces for the target). Llama-3-8B CUDA-graph steps on the H200: -1.2 / -2.3% at
    rows 1 / 8 (ctx 1024), -1.4 / -2.9% at ctx 2000. The draft keeps `rope_attention` (its 1B single-token step was
    5% slower this way), and so does a target whose QKV has a bias (Qwen2; `runtime.model.role_kernels`). Needs
    kernels.skinny. The simulator does not switch on it: its verify cost is the calibrated
    profile's, timed with the switch as conf/kernels/graphs.yaml had it at calibration (bench/profile_steps.py)."""
    draft_head: bool = False
    """The draft expansion's top-k children and their log-probs from `kernels.topk_logprobs` (two small launches)
    instead of torch's log_softmax + topk (~0.1 ms per expansion at a 128K vocabulary on an H200; needs backend
    triton)."""
    refill_graph: bool = False
    """CUDA graphs (on in kernels=graphs): a draft expansion of a lone root (after a miss, or a hit on a never-expanded
    leaf: 37-44% of the H200 async rounds) replays a captured one-row step instead of the w-row one (a smaller
    attention and head; the weights' bytes are the same), and a lone root behind one pending token (a miss at a
    never-expanded leaf, frequent in serial_tree) a two-row step instead of the w + 1-row one. Needs
    kernels.cuda_graphs."""
    prefill_graph: bool = False
    """CUDA graphs (on in kernels=graphs): a prompt prefill replays a graph captured for its length bucket (the next
    power of two >= 16; captured on the bucket's first prompt; the padding rows come last and write K/V past the
    prompt, which later steps overwrite) instead of an eager forward, and skips the LM head (a prefill keeps only the
    K/V). The eager prefill is host-bound: ~0.1 ms of host per Triton launch on the H200 host, 15-25 ms per
    SmolLM2-135M prompt (bench/prefill_probe.py). Prompts longer than the largest bucket that fits the cache stay
    eager, and so do TP > 1 groups (a captured prefill with its all-reduces has not run on GPUs yet). Needs
    kernels.cuda_graphs."""
    verdict_graph: bool = False
    """Experiment switch (CUDA graphs, backend triton, greedy): a tree verify's graph also computes what its verdict
    reads (`runtime.graphs.StepGraph` verdict): the greedy verdict (`kernels.greedy_verify` over the rows' argmax), or
    in oracle runs the rows' argmax, so that after the replay one small read-back is left instead of the argmax over
    the logits, the verify kernel and their launches (~73 us from the graph's end to the verdict on the H200 host,
    2026-12-01, bench/results/verify_split_2026-12-01_1651a26.json). Measured on 1 x H200 (2026-12-01, colocated
    chain / serial at workload a, interleaved, bench/results/verdict_graph_ab_2026-12-01_2b13c0b.json): no gain, the
    verify spans 4.58-4.63 ms off against 4.61-4.65 on. Off; `kernels.readback=spin` (on in kernels=graphs) builds the
    verdict into the graph regardless, so this switch matters only with readback=sync."""
    input_staging: str = "pageable"
    """How a CUDA-graph step's inputs are copied (runtime/graphs.py): pageable (each copy waits for the stream) |
    pinned (preallocated pinned buffers, copies that do not block the host) | graph (a pinned buffer the graph copies
    as its first node: the host only writes it and launches; a chained autoregressive graph stages pinned)."""
    readback: str = "sync"
    """How the host reads a CUDA-graph step's small outputs (the draft expansion's top-k children, the verify's
    verdict): sync (a device -> host copy and a stream sync after the replay, ~73 us from the graph's end to the
    verdict on the H200 host, 2026-12-01) | spin (the graph copies them into pinned host memory itself, then the step's
    ticket; the host spins on the ticket and reads numpy views: no CUDA call after the launch). spin builds the verify
    graph with its verdict inside, as kernels.verdict_graph does. Needs kernels.cuda_graphs (and, for the verify,
    kernels.backend=triton). kernels=graphs runs spin with input_staging=graph: workload a on 1 x H200 (draft
    colocated, 4 paired rounds, 2026-12-01): iteration 9.75 -> 9.30 ms (chain), 7.76 -> 7.15 ms (serial_tree); spin
    with pageable staging 9.36 / 7.29 ms (bench/results/host_io_ab_2026-12-01_ab44f24.json)."""

    def prefill_graph_for(self, group_gpus: int) -> bool:
        """Whether a group of `group_gpus` GPUs replays its prefills (kernels.prefill_graph): one-GPU groups only, since
        a TP group's captured prefill (its all-reduces in the graph) has not run on GPUs yet (tests/gpu multi_gpu). The
        runtime's workers and the simulator's prefill price both ask here."""
        return self.prefill_graph and group_gpus == 1

    def validate(self) -> None:
        """Check the backend name and what needs the Triton backend."""
        _require(self.backend in ("reference", "triton"), "kernels.backend",
                 f"{self.backend!r} is not one of reference, triton")
        _require(self.input_staging in INPUT_STAGING, "kernels.input_staging",
                 f"{self.input_staging!r} is not one of {', '.join(INPUT_STAGING)}")
        for name in ("skinny", "pdl", "rope_attention", "draft_head"):
            _require(not getattr(self, name) or self.backend == "triton", f"kernels.{name}",
                     f"needs kernels.backend=triton, got {self.backend!r}")
        self.pdl_policy.validate()
        _require(self.pdl or not self.pdl_policy.overrides(), "kernels.pdl_policy",
                 f"sets {self.pdl_policy.overrides()} but kernels.pdl is false: set kernels.pdl=true (kernels=graphs)")
        _require(not self.target_qkv_rope or self.skinny, "kernels.target_qkv_rope",
                 "replaces the skinny QKV GEMM: needs kernels.skinny=true (or set kernels.target_qkv_rope=false)")
        _require(not self.refill_graph or self.cuda_graphs, "kernels.refill_graph",
                 "a captured one-row draft step: needs kernels.cuda_graphs=true (kernels=graphs)")
        _require(not self.prefill_graph or self.cuda_graphs, "kernels.prefill_graph",
                 "replays captured prefills: needs kernels.cuda_graphs=true (kernels=graphs)")
        _require(self.readback in READBACK, "kernels.readback",
                 f"{self.readback!r} is not one of {', '.join(READBACK)}")
        _require(self.readback == "sync" or self.cuda_graphs, "kernels.readback",
                 "spin reads what a CUDA graph copied to the host: needs kernels.cuda_graphs=true (kernels=graphs)")
        _require(self.input_staging == "pageable" or self.cuda_graphs, "kernels.input_staging",
                 f"{self.input_staging} stages a CUDA graph's inputs: needs kernels.cuda_graphs=true (kernels=graphs)")
        _require(not self.verdict_graph or (self.cuda_graphs and self.backend == "triton"), "kernels.verdict_graph",
                 "the verdict inside the verify graph: needs kernels.cuda_graphs=true and kernels.backend=triton "
                 "(kernels=graphs)")
