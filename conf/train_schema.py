"""Typed config of `train_draft.py` (distilling the SmolLM2 draft) and of the acceptance report.

Registered in Hydra's ConfigStore as `train_draft_schema` (composed from `conf/train_draft.yaml`) and
`acceptance_report_schema` (the report composes the registered node itself; no YAML). Kept apart from
`conf/schema.py`: these are offline tools, not parts of an experiment. No torch import.
"""

from __future__ import annotations

from dataclasses import dataclass

from conf.presets import model_preset
from conf.schema import _Frozen, _require

DEVICES = ("auto", "cuda", "cpu")


@dataclass
class TrainDraftConfig(_Frozen):
    """Distillation of a draft (student) from the target (teacher); see train_draft.py."""

    teacher: str = ".cache/models/smollm2-135m-instruct.gguf"
    """GGUF file of the target, or `random:<preset>` (random weights, for CPU tests)."""
    student_preset: str = "smollm2-draft"
    """Shape preset of the draft (conf/presets.py); must share the teacher's vocabulary."""
    init_embedding: str = "svd"
    """svd (teacher embedding projected on its top principal directions) | random."""
    device: str = "auto"
    """auto | cuda | cpu."""
    autocast_bf16: bool = True
    """bf16 autocast for teacher and student forwards on CUDA (ignored on CPU, which runs fp32)."""
    seed: int = 0

    # Budget: training stops at `steps` or after `max_train_s` seconds of optimisation, whichever comes first.
    # The cosine schedule follows progress = max(step / steps, train_s / max_train_s), so a time budget
    # still ends the schedule at its minimum learning rate.
    steps: int = 1000
    max_train_s: float = 0.0
    """Seconds of optimisation (data prep and teacher generation excluded); 0 = no time limit."""
    batch_size: int = 32
    seq_len: int = 512

    lr: float = 3e-3
    min_lr_ratio: float = 0.05
    warmup_steps: int = 50
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    kl_weight: float = 1.0
    """Weight of KL(teacher || student) over the full vocabulary."""
    ce_weight: float = 0.0
    """Weight of cross-entropy towards the teacher's argmax (helps top-1 agreement)."""

    # Data: Python standard library source (split by file) + text the teacher generates.
    code_eval_percent: int = 5
    """Percent of stdlib files held out (by a hash of their relative path; never trained on)."""
    code_max_file_bytes: int = 200_000
    """Skip larger stdlib files (generated tables)."""
    code_max_tokens: int = 0
    """Stop tokenising the stdlib after this many tokens (0 = all; small runs tokenise what they need)."""
    prompts_train: str = "data/prompts_train.jsonl"
    prompts_eval: str = "data/prompts_eval.jsonl"
    """Held-out instructions: greedy teacher completions for the end-of-training agreement table only."""
    generate_samples: int = 2048
    """Teacher generations in total: instruction completions plus code continuations."""
    code_generate_fraction: float = 0.25
    """Share of `generate_samples` that continue training-set code snippets (greedy)."""
    generate_max_new_tokens: int = 320
    generate_temperature: float = 0.8
    """Sampling temperature of instruction completions after the first (greedy) pass over the prompts."""
    generate_batch_size: int = 512
    generate_max_s: float = 0.0
    """Wall-time bound of all teacher generation (0 = none); calls stop early with shorter samples."""
    code_prompt_tokens: int = 192
    """Length of the code snippets the teacher continues."""
    mix_code: float = 0.4
    """Share of batch rows drawn from raw stdlib code."""
    mix_code_generated: float = 0.2
    """Share of batch rows drawn from teacher continuations of code."""
    mix_instruction: float = 0.4
    """Share of batch rows drawn from teacher instruction completions."""

    # Outputs.
    out_dir: str = "runs/train_draft/latest"
    """Run dir: checkpoints, loss curves (CSV + PNG), the final HF folder in `final/`."""
    export_dir: str | None = "models/smollm2-draft"
    """Where the final checkpoint is copied (with MODEL_CARD.md); null = nowhere."""
    resume: bool = False
    """Continue from `out_dir/checkpoint.pt` (and its prepared data, `data.pt`) if they exist."""
    stop_after: int = 0
    """End this invocation after this many steps (a run split over sessions; 0 = run to the end)."""
    checkpoint_every: int = 250
    log_every_s: float = 10.0
    """Minimum seconds between progress lines."""
    eval_tokens: int = 16384
    """Held-out tokens per domain for the final agreement/loss table (0 = skip)."""

    def validate(self) -> None:
        """Check ranges and the student preset."""
        model_preset(self.student_preset, "student_preset")
        if self.teacher.startswith("random:"):
            model_preset(self.teacher.removeprefix("random:"), "teacher")
        _require(self.device in DEVICES, "device", f"{self.device!r} is not one of {', '.join(DEVICES)}")
        _require(self.init_embedding in ("svd", "random"), "init_embedding",
                 f"{self.init_embedding!r} is not one of svd, random")
        _require(self.steps >= 1, "steps", f"must be >= 1, got {self.steps}")
        _require(self.max_train_s >= 0, "max_train_s", f"must be >= 0, got {self.max_train_s}")
        _require(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        _require(self.seq_len >= 8, "seq_len", f"must be >= 8, got {self.seq_len}")
        _require(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        _require(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", f"must be in [0, 1], got {self.min_lr_ratio}")
        _require(self.kl_weight >= 0 and self.ce_weight >= 0 and self.kl_weight + self.ce_weight > 0,
                 "kl_weight", "kl_weight and ce_weight must be >= 0 and not both 0")
        _require(0 <= self.code_eval_percent < 100, "code_eval_percent", "must be in [0, 100)")
        _require(self.generate_samples >= 0, "generate_samples", "must be >= 0")
        _require(0 <= self.code_generate_fraction <= 1, "code_generate_fraction", "must be in [0, 1]")
        mix = (self.mix_code, self.mix_code_generated, self.mix_instruction)
        _require(min(mix) >= 0 and sum(mix) > 0, "mix_code", "mixture weights must be >= 0, not all 0")
        _require(self.checkpoint_every >= 1, "checkpoint_every", "must be >= 1")


@dataclass
class AcceptanceReportConfig(_Frozen):
    """Acceptance of a (target, draft) pair on held-out prompts; see runtime/acceptance_report.py."""

    target: str = ".cache/models/smollm2-135m-instruct.gguf"
    """Target GGUF, or `random:<preset>` for tests."""
    draft: str = "models/smollm2-draft"
    """Draft HF folder (config.json + model.safetensors), or `random:<preset>`."""
    device: str = "auto"
    code_prompts: str = "data/prompts_code_eval.jsonl"
    """Held-out stdlib snippets ({"prompt": ..., "file": ...} per line)."""
    instruction_prompts: str = "data/prompts_eval.jsonl"
    """Held-out instructions ({"prompt": ...}); wrapped in the chat template."""
    max_prompts: int = 40
    """Prompts per domain (the first ones of each file)."""
    max_new_tokens: int = 128
    """Positions of the target's greedy continuation used as tree roots."""
    margin_tokens: int = 40
    """Extra continuation tokens so that matches near the last root are not cut short."""
    depths: int = 12
    """Rows of the positional table."""
    ranks: int = 8
    """Columns of the positional table (= children per expanded node of the draft tree)."""
    gammas: list[int] | None = None
    """Chain lengths (default 1..8)."""
    tree_sizes: list[int] | None = None
    """Verify widths bs (nodes incl. the root; default 4, 8, 16, 32)."""
    batch_roots: int = 256
    """Tree roots grown in parallel."""
    check_prompts: int = 3
    """Prompts per domain of the small fixed set recorded for the CPU reproduction test."""
    check_new_tokens: int = 32
    out: str = "profiles/acceptance/smollm2.json"
    update_card: bool = True
    """Fill the acceptance section of `<draft>/MODEL_CARD.md` with the measured numbers."""

    def validate(self) -> None:
        """Check ranges."""
        _require(self.device in DEVICES, "device", f"{self.device!r} is not one of {', '.join(DEVICES)}")
        _require(self.max_prompts >= 1, "max_prompts", "must be >= 1")
        _require(self.max_new_tokens >= 1, "max_new_tokens", "must be >= 1")
        _require(self.depths >= 1 and self.ranks >= 1, "depths", "depths and ranks must be >= 1")
        for bs in self.tree_sizes or []:
            _require(bs >= 2, "tree_sizes", f"bs must be >= 2, got {bs}")
        for g in self.gammas or []:
            _require(g >= 1, "gammas", f"gamma must be >= 1, got {g}")


def register_train_configs() -> None:
    """Register both schemas in Hydra's ConfigStore."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="train_draft_schema", node=TrainDraftConfig)
    cs.store(name="acceptance_report_schema", node=AcceptanceReportConfig)


def build_train_config(cfg, cls: type) -> _Frozen:
    """DictConfig composed against `cls` -> validated, frozen instance."""
    from omegaconf import DictConfig, OmegaConf

    from conf.schema import freeze

    obj = OmegaConf.to_object(cfg) if isinstance(cfg, DictConfig) else cfg
    if not isinstance(obj, cls):
        raise TypeError(f"expected a config composed against {cls.__name__}, got {type(obj).__name__}")
    obj.validate()
    return freeze(obj)
