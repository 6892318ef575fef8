"""The `kernels` config group (conf/kernels/*.yaml): which Triton kernels, CUDA graphs and launch / staging modes a run
uses (part of conf/schema.py's ExperimentConfig, re-exported there)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from conf.frozen import _Frozen, _require

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
    """Capture verify and expand steps in CUDA graphs (GPU only; needs backend triton). Each graph copies its inputs
    from pinned host memory itself and its small outputs (the draft's top-k children, a greedy verify's verdict,
    computed inside the graph) back; the host spins on the copy instead of a read-back and a stream sync
    (runtime/graphs.py)."""
    fused_allreduce: bool = False
    """Use the one-shot GEMM + all-reduce for row-parallel linears (GPU, TP > 1)."""
    skinny: bool = False
    """Decode-sized steps run their projections through the Triton skinny GEMM, the o and down ones as split-K
    partials summed inside the next add + RMSNorm (`runtime.fused_decode`; needs backend triton)."""
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
    5% slower this way), and so does a target whose QKV has a bias (Qwen2; `KernelPlan.for_role`). Needs
    kernels.skinny. The simulator does not switch on it: its verify cost is the calibrated
    profile's, timed with the switch as conf/kernels/graphs.yaml had it at calibration (calibration.profile_steps)."""
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
    def prefill_graph_for(self, group_gpus: int) -> bool:
        """Whether a group of `group_gpus` GPUs replays its prefills (kernels.prefill_graph): one-GPU groups only, since
        a TP group's captured prefill (its all-reduces in the graph) has not run on GPUs yet (tests/gpu multi_gpu). The
        runtime's workers and the simulator's prefill price both ask here."""
        return self.prefill_graph and group_gpus == 1

    def validate(self) -> None:
        """Check the backend name and what needs the Triton backend."""
        _require(self.backend in ("reference", "triton"), "kernels.backend",
                 f"{self.backend!r} is not one of reference, triton")
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

