"""The `kernels` config group (conf/kernels/*.yaml): a preset, and the preset's features switched off for an ablation
(part of conf/schema.py's ExperimentConfig, re-exported there).

    kernels=reference                          plain torch (exact on CPU)
    kernels=triton                             the Triton kernels, eager steps
    kernels=graphs                             everything the GPU runtime runs fastest (FEATURES, all on)
    kernels=graphs kernels.ablate=[pdl,draft_head]
                                               the same without PDL launches and the Triton draft head

`KernelFeatures` is the per-feature table: one field per feature with what it does and what it needs. A config
resolves to one (`KernelsConfig.features`); the runtime's workers, the fused decode path, the simulator and calibration
read it, through the same names on KernelsConfig (`cfg.kernels.skinny`).

Ablation rule: a feature that others need (NEEDS) cannot be ablated alone; the error names its dependents, which the
list must switch off too (`kernels.ablate=[skinny,target_qkv_rope]`), so the list always states every feature that
is off.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from conf.frozen import _Frozen, _require

DRAFT_HEAD_MAX_TOPK = 64
"""kernels.topk_logprobs.MAX_K: the top-k the fused draft head unrolls at most (tests/conf check they agree)."""


@dataclass(frozen=True)
class KernelFeatures:
    """What a run's kernels do: `backend` and one switch per feature (FEATURES). Built from a preset by
    `KernelsConfig.features`; a unit test may build any combination (e.g. a CPU stand-in for the CUDA graphs)."""

    backend: str = "reference"
    """reference (plain torch, exact on CPU) | triton (the Triton kernels: fused decoder path, tree attention,
    greedy verify)."""
    cuda_graphs: bool = False
    """Capture verify and expand steps in CUDA graphs (GPU only; needs backend triton). Each graph copies its inputs
    from pinned host memory itself and its small outputs (the draft's top-k children, a greedy verify's verdict,
    computed inside the graph) back; the host spins on the copy instead of a read-back and a stream sync
    (runtime/graphs.py)."""
    skinny: bool = False
    """Decode-sized steps run their projections through the Triton skinny GEMM, the o and down ones as split-K
    partials summed inside the next add + RMSNorm (`runtime.fused_decode`; needs backend triton)."""
    pdl: bool = False
    """Programmatic dependent launch for the Triton kernels with kernels/pdl.py's DEFAULT_POLICY trigger per kernel
    role (takes effect on sm90+ GPUs; a benchmark that tries another policy passes it to `kernels.pdl.pdl`)."""
    rope_attention: bool = False
    """Single-token steps (kernels.tree_attention.ROPE_FASTER_MAX_TOKENS) rotate q and write the new K/V inside the
    tree-attention launch (`kernels.rope_tree_attention`) instead of a separate `kernels.rope_kv_write` (needs backend
    triton). Tree steps keep the separate RoPE kernel."""
    target_qkv_rope: bool = False
    """The target's decode steps run its QKV projection as `kernels.qkv_rope_kv_write` (RoPE and the K/V cache write
    in the GEMM's epilogue, two programs per head), and its attention loads its prefix beside that launch: one launch
    fewer per layer than the skinny GEMM + `kernels.rope_kv_write` (tree steps) or the fused RoPE attention
    (single-token steps, which it replaces for the target). The draft keeps `rope_attention` (its 1B single-token step
    was slower this way), and so does a target whose QKV has a bias (Qwen2; `KernelPlan.for_role`). Needs skinny. The
    simulator does not switch on it: its verify cost is the calibrated profile's, timed with the graphs preset's
    features (calibration.profile_steps)."""
    draft_head: bool = False
    """The draft expansion's top-k children and their log-probs from `kernels.topk_logprobs` (two small launches)
    instead of torch's log_softmax + topk (needs backend triton; spec.topk <= DRAFT_HEAD_MAX_TOPK)."""
    refill_graph: bool = False
    """A draft expansion of a lone root (after a miss, or a hit on a never-expanded leaf) replays a captured one-row
    step instead of the w-row one (a smaller attention and head; the weights' bytes are the same), and a lone root
    behind one pending token (a miss at a never-expanded leaf, frequent in serial_tree) a two-row step instead of the
    w + 1-row one. Needs cuda_graphs."""
    prefill_graph: bool = False
    """A prompt prefill replays a graph captured for its length bucket (the next power of two >= 16; captured on the
    bucket's first prompt; the padding rows come last and write K/V past the prompt, which later steps overwrite)
    instead of an eager forward, and skips the LM head (a prefill keeps only the K/V). The eager prefill is host-bound
    (one host launch per Triton kernel). Prompts longer than the largest bucket that fits the cache stay eager, and so
    do TP > 1 groups (`prefill_graph_for`). Needs cuda_graphs."""

    def prefill_graph_for(self, group_gpus: int) -> bool:
        """Whether a group of `group_gpus` GPUs replays its prefills (prefill_graph): one-GPU groups only, since a TP
        group's captured prefill (its all-reduces in the graph) has not run on GPUs yet (tests/gpu multi_gpu). The
        runtime's workers and the simulator's prefill price both ask here."""
        return self.prefill_graph and group_gpus == 1


FEATURES = tuple(f.name for f in fields(KernelFeatures) if f.name != "backend")
"""The switches a preset turns on and `kernels.ablate` can turn off, in the table's order."""

NEEDS = {"target_qkv_rope": "skinny", "refill_graph": "cuda_graphs", "prefill_graph": "cuda_graphs"}
"""feature -> the feature it needs (every feature needs backend triton, which the presets that have them use)."""

PRESETS = {
    "reference": KernelFeatures(),
    "triton": KernelFeatures(backend="triton"),
    "graphs": KernelFeatures(backend="triton", **dict.fromkeys(FEATURES, True)),
}
"""`kernels=<preset>` (conf/kernels/<preset>.yaml sets `kernels.preset`) -> its features."""


def preset_features(preset: str) -> tuple[str, ...]:
    """The FEATURES `preset` turns on (what `kernels.ablate` may name)."""
    return tuple(name for name in FEATURES if getattr(PRESETS[preset], name))


@dataclass
class KernelsConfig(_Frozen):
    """Kernel selection (group `kernels`): a preset minus an ablation list. The per-feature names (`backend`,
    `cuda_graphs`, `skinny`, ...) read the resolved `features`."""

    preset: str = "reference"
    """reference (plain torch) | triton (Triton kernels, eager steps) | graphs (every feature of KernelFeatures:
    Triton kernels, CUDA graphs, skinny GEMMs, PDL, ...); set by `kernels=<preset>`."""
    ablate: list[str] = field(default_factory=list)
    """Features of the preset switched off for an ablation, e.g. `kernels.ablate=[pdl,draft_head]` (names: the
    FEATURES the preset turns on; a feature others need is listed with them: `[skinny,target_qkv_rope]`)."""

    @property
    def features(self) -> KernelFeatures:
        """The preset's KernelFeatures with the ablated ones off."""
        return replace(PRESETS[self.preset], **dict.fromkeys(self.ablate, False))

    @property
    def backend(self) -> str:
        return self.features.backend

    @property
    def cuda_graphs(self) -> bool:
        return self.features.cuda_graphs

    @property
    def skinny(self) -> bool:
        return self.features.skinny

    @property
    def pdl(self) -> bool:
        return self.features.pdl

    @property
    def rope_attention(self) -> bool:
        return self.features.rope_attention

    @property
    def target_qkv_rope(self) -> bool:
        return self.features.target_qkv_rope

    @property
    def draft_head(self) -> bool:
        return self.features.draft_head

    @property
    def refill_graph(self) -> bool:
        return self.features.refill_graph

    @property
    def prefill_graph(self) -> bool:
        return self.features.prefill_graph

    def prefill_graph_for(self, group_gpus: int) -> bool:
        """KernelFeatures.prefill_graph_for of the resolved features."""
        return self.features.prefill_graph_for(group_gpus)

    def validate(self) -> None:
        """The preset's name; the ablated names are features of the preset, each once, with their dependents."""
        _require(self.preset in PRESETS, "kernels.preset",
                 f"{self.preset!r} is not one of {', '.join(PRESETS)} (kernels=<preset>)")
        allowed = preset_features(self.preset)
        for name in self.ablate:
            _require(name in allowed, "kernels.ablate",
                     f"{name!r} is not a feature of kernels={self.preset}; allowed: {', '.join(allowed) or 'none'}")
            _require(self.ablate.count(name) == 1, "kernels.ablate", f"names {name!r} twice")
        for dependent, need in NEEDS.items():
            _require(need not in self.ablate or dependent not in allowed or dependent in self.ablate,
                     "kernels.ablate", f"{dependent} needs {need}: ablate it too "
                     f"(kernels.ablate=[{','.join([*self.ablate, dependent])}])")


def kernels_from_recorded(kernels: dict[str, Any]) -> dict[str, Any]:
    """A recorded config's `kernels` object as {"preset", "ablate"}. One written since the presets hold them is
    returned unchanged (a copy); an older one holds the switches (`backend`, `cuda_graphs`, `skinny`, ...; a field
    its schema did not have yet was off): it maps to the preset of its backend and graphs with the preset's other
    features listed in `ablate`, in FEATURES order. Raises ValueError naming kernels and the values when no preset
    minus an ablation list is that combination. The retired fields (conf/retired.py) are stripped before."""
    if "preset" in kernels or "ablate" in kernels or not kernels:
        return dict(kernels)
    unknown = sorted(set(kernels) - {"backend", *FEATURES})
    on = {name for name in FEATURES if kernels.get(name, False)}
    backend = kernels.get("backend", "reference")
    preset = "reference" if backend == "reference" else "graphs" if on else "triton"
    ablate = [name for name in preset_features(preset) if name not in on] if preset in PRESETS else []
    cfg = KernelsConfig(preset=preset, ablate=ablate)
    try:
        cfg.validate()
        ok = not unknown and cfg.features == KernelFeatures(backend, **{n: n in on for n in FEATURES})
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"kernels: the recorded switches {dict(sorted(kernels.items()))} are no preset minus an "
                         f"ablation list (kernels=reference|triton|graphs with kernels.ablate; docs/CONFIG.md)")
    return {"preset": preset, "ablate": ablate}
