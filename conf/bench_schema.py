"""Typed configuration of `python bench/bench_runtime.py` (conf/bench_runtime.yaml), registered in the ConfigStore.

Kept apart from conf/schema.py (the experiment schema): the benchmark is not one experiment but a set of them
(our runtime's four modes) plus peer systems on the same prompts. Each of our runs is still a validated
`ExperimentConfig`, composed from conf/generate.yaml with the overrides that `BenchWorkloadConfig` implies
(`experiment_overrides`), so the runtime sees exactly what `python generate.py` would.

A workload is a named preset (`presets.<name>` in the YAML, picked by `preset=<name>`). No torch import.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from conf.presets import GPU_PRESETS
from conf.schema import MODES, _Frozen, _require, freeze

PEERS = ("hf_greedy", "hf_assisted", "deepspeed", "gptfast_compiled", "transformers_compiled",
         "transformers_compiled_assisted")
"""Peer systems: transformers `generate` eager (greedy; assisted with `assistant_model=` the same draft),
DeepSpeed-Inference AutoTP (autoregressive, `tensor_parallel={"tp_size": N}`), and the compiled single-GPU peers of
bench/compiled_peers.py: our plain model decoded the gpt-fast way (autoregressive, and chain speculation when the
workload has a draft) and transformers' static cache + compiled forward (greedy; assisted)."""
COMPILED_PEERS = ("gptfast_compiled", "transformers_compiled", "transformers_compiled_assisted")
"""The compiled single-GPU peers (bench/compiled_peers.py), each with its own time budget (`peer_budget_s`)."""
DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("auto", "cuda", "cpu")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass
class PeerCompileConfig(_Frozen):
    """torch.compile settings of the compiled peers (recorded in their rows)."""

    enabled: bool = True
    """False: the compiled peers run their step functions eagerly (CPU tests: a cold compile costs ~20 s there)."""
    mode: str = "reduce-overhead"
    """torch.compile mode; reduce-overhead = CUDA graphs (transformers' documented setting, gpt-fast's)."""
    fullgraph: bool = True
    """One graph per step, no graph breaks (a break is an error, not a silent slowdown)."""
    coordinate_descent_tuning: bool = True
    """torch._inductor.config.coordinate_descent_tuning (gpt-fast turns it on): tunes each generated kernel's launch
    configuration at compile time; longer cold compiles."""

    def validate(self) -> None:
        """Check the mode name."""
        _require(self.mode in COMPILE_MODES, "peer_compile.mode",
                 f"{self.mode!r} is not one of {', '.join(COMPILE_MODES)}")


@dataclass
class BenchWorkloadConfig(_Frozen):
    """One benchmark workload: the model pair, how it runs in our runtime, the prompts, the peers."""

    description: str = ""
    """One line for the results table's heading."""
    model: str = "tiny"
    """Model pair: a conf/model/<name>.yaml group option (target + draft presets, checkpoints)."""
    dtype: str | None = None
    """Weight and compute dtype of both models (float32 | bfloat16 | float16); None = the model group's."""
    target_checkpoint: str | None = None
    """Overrides the target's checkpoint (HF folder or GGUF); None = the model group's (random if none)."""
    draft_checkpoint: str | None = None
    """Overrides the draft's checkpoint; None = the model group's (random if none)."""
    require_draft_checkpoint: bool = False
    """Real pairs: skip the whole workload (with a note) when the draft checkpoint has no config.json."""
    oracle: bool = False
    """Our runtime draws acceptance from the oracle (random weights); peers then cannot be compared on
    speculation, only on per-forward cost and autoregressive throughput."""
    kernels: str = "reference"
    """Our runtime's kernels group option (reference | triton | graphs: Triton kernels + CUDA graphs)."""
    parallel: str = "1x1"
    """Our runtime's GPU split (conf/parallel/<name>.yaml); async_tree needs a draft group."""
    prompt_file: str | None = None
    """JSONL with one {"prompt": ...} per line; None = seeded random token prompts of `prompt_tokens`."""
    num_prompts: int = 1
    """Requests: the first `num_prompts` lines of `prompt_file`, or this many random prompts."""
    chat_template: bool = False
    """Wrap text prompts in the target GGUF's chat template (the draft was trained on that format)."""
    prompt_tokens: int = 32
    """Length of random prompts."""
    max_new_tokens: int = 16
    """Tokens generated per request by every system (fewer only where EOS comes first)."""
    max_seq_len_tokens: int = 2048
    """Our runtime's KV-cache prefix capacity (prompt + generated)."""
    peers: list[str] = field(default_factory=lambda: list(PEERS))
    """Peer systems to run (subset of `PEERS`)."""
    check_outputs: bool = True
    """Compare every system's tokens with transformers' greedy output (tie-aware); off for oracle runs."""
    experiment_overrides: list[str] = field(default_factory=list)
    """Further Hydra overrides of conf/generate.yaml for our runs (e.g. spec.bs=16)."""

    def validate(self, name: str) -> None:
        """Check ranges and names; messages name the field."""
        f = f"presets.{name}"
        _require(self.dtype is None or self.dtype in DTYPES, f"{f}.dtype",
                 f"{self.dtype!r} is not one of {', '.join(DTYPES)}")
        _require(self.num_prompts >= 1, f"{f}.num_prompts", f"must be >= 1, got {self.num_prompts}")
        _require(self.prompt_tokens >= 1, f"{f}.prompt_tokens", f"must be >= 1, got {self.prompt_tokens}")
        _require(self.max_new_tokens >= 1, f"{f}.max_new_tokens", f"must be >= 1, got {self.max_new_tokens}")
        bad = [p for p in self.peers if p not in PEERS]
        _require(not bad, f"{f}.peers", f"unknown peers {bad}; allowed: {', '.join(PEERS)}")
        _require(not (self.oracle and self.check_outputs), f"{f}.check_outputs",
                 "oracle runs emit the oracle's tokens, not the model's: set check_outputs=false")


@dataclass
class BenchRuntimeConfig(_Frozen):
    """The runtime benchmark: which workload, which of our modes, how to measure, where results go."""

    preset: str = "tiny"
    """Name of the workload preset in `presets` (not `workload`: that name is the experiment's config group)."""
    presets: dict[str, BenchWorkloadConfig] = field(default_factory=dict)
    """Workload presets (conf/bench_runtime.yaml)."""
    modes: list[str] = field(default_factory=lambda: list(MODES))
    """Our runtime's modes, run in one launch (models built once per rank process)."""
    repeats: int = 3
    """Measured runs per system; tables report medians."""
    warmup_runs: int = 1
    """Unmeasured runs per system before the measured ones (Triton JIT, allocator, cuBLAS heuristics)."""
    warmup_new_tokens: int = 32
    """Tokens per request of a warm-up run (a short decode warms every code path the long one uses)."""
    deepspeed_tp_size: int = 2
    """DeepSpeed-Inference AutoTP degree (GPUs of the peer's target)."""
    peer_compile: PeerCompileConfig = field(default_factory=PeerCompileConfig)
    """torch.compile settings of the compiled peers (gptfast_compiled, transformers_compiled*)."""
    peer_budget_s: dict[str, float] = field(default_factory=lambda: {
        "gptfast_compiled": 150.0, "transformers_compiled": 200.0, "transformers_compiled_assisted": 200.0})
    """Per compiled peer: the time one of its jobs (a mode: cold compiles, warm-up and repeats) may take. A job starts
    only while that much of `budget_s` is left, else its row is skipped with the reason; so a slow peer's compile
    cannot eat another's time, and a stage's timeout never cuts a job that was given its budget."""
    profile_steps: bool = False
    """Per-kernel profiles (torch.profiler, the top kernels by time) of one decode step of ours and of gptfast_compiled
    (target one-token step, chain verify, draft step), after the gptfast jobs; into the results' `kernel_profiles`."""
    device: str = "auto"
    """auto (cuda if available) | cuda | cpu: where our runtime and the peers run."""
    gpu: str = "h200"
    """GPU preset whose HBM bandwidth sets the byte floor (conf/presets.py GPU_PRESETS; h200: 4.29 TB/s)."""
    timeout_s: float = 600.0
    """Bound on every wait across ranks (parallel.timeout_s of the launches)."""
    budget_s: float = 450.0
    """Wall-clock budget: phases and modes not started by then are reported as skipped (budget)."""
    out_dir: str = "runs/bench"
    """Results JSON goes to <out_dir>/runtime_<workload>_<date>_<sha>.json (runs/ is ignored by git; `python -m
    bench.promote` copies one into data/measured/)."""
    doc: str | None = "docs/BENCHMARKS_RUNTIME.md"
    """Markdown file a dated results section is appended to; None = none."""
    seed: int = 0
    """Seed of random prompts (workload.seed of our runs)."""
    oracle_seeds: str = "per_repeat"
    """Oracle workloads: per_repeat: measured repeat k of a mode decodes with workload.seed = seed + k (the prompts
    stay those of `seed`), so the repeats draw k different acceptance streams and their median is not one
    stream's luck (one prompt of 512 tokens is ~200 verifies, whose mean accepted length varies by ~4% between
    streams); fixed: every repeat draws the stream of `seed`."""

    def validate(self) -> None:
        """Check the workload name, the modes and the measurement settings."""
        _require(self.preset in self.presets, "preset",
                 f"unknown workload preset {self.preset!r}; allowed: {sorted(self.presets)}")
        for name, wl in self.presets.items():
            wl.validate(name)
        bad = [m for m in self.modes if m not in MODES]
        _require(not bad, "modes", f"unknown modes {bad}; allowed: {', '.join(MODES)}")
        _require(self.repeats >= 1, "repeats", f"must be >= 1, got {self.repeats}")
        _require(self.warmup_runs >= 0, "warmup_runs", f"must be >= 0, got {self.warmup_runs}")
        _require(self.warmup_new_tokens >= 1, "warmup_new_tokens", f"must be >= 1, got {self.warmup_new_tokens}")
        _require(self.deepspeed_tp_size >= 1, "deepspeed_tp_size", f"must be >= 1, got {self.deepspeed_tp_size}")
        self.peer_compile.validate()
        missing = [p for p in COMPILED_PEERS if p not in self.peer_budget_s]
        unknown = [p for p in self.peer_budget_s if p not in COMPILED_PEERS]
        _require(not missing and not unknown, "peer_budget_s",
                 f"needs exactly the keys {', '.join(COMPILED_PEERS)}; missing {missing}, unknown {unknown}")
        bad_s = {p: s for p, s in self.peer_budget_s.items() if not s > 0}
        _require(not bad_s, "peer_budget_s", f"budgets must be > 0 s, got {bad_s}")
        _require(self.device in DEVICES, "device", f"{self.device!r} is not one of {', '.join(DEVICES)}")
        _require(self.gpu in GPU_PRESETS, "gpu", f"unknown GPU preset {self.gpu!r}; allowed: {sorted(GPU_PRESETS)}")
        _require(self.timeout_s > 0, "timeout_s", f"must be > 0, got {self.timeout_s}")
        _require(self.budget_s > 0, "budget_s", f"must be > 0, got {self.budget_s}")
        _require(self.oracle_seeds in ("per_repeat", "fixed"), "oracle_seeds",
                 f"{self.oracle_seeds!r} is not one of per_repeat, fixed")

    @property
    def selected(self) -> BenchWorkloadConfig:
        """The workload preset this run measures."""
        return self.presets[self.preset]


def build_bench_config(cfg: object) -> BenchRuntimeConfig:
    """A composed DictConfig (or a BenchRuntimeConfig) -> validated, frozen BenchRuntimeConfig."""
    from omegaconf import DictConfig, OmegaConf

    obj = OmegaConf.to_object(cfg) if isinstance(cfg, DictConfig) else cfg
    if not isinstance(obj, BenchRuntimeConfig):
        raise TypeError(f"expected a config composed against BenchRuntimeConfig, got {type(obj).__name__}")
    obj.validate()
    for wl in obj.presets.values():  # freeze() walks dataclasses and lists, not dicts
        freeze(wl)
    return freeze(obj)


def register_bench_configs() -> None:
    """Register BenchRuntimeConfig (and the experiment schema our runs compose against) in the ConfigStore."""
    from hydra.core.config_store import ConfigStore

    from conf.schema import register_configs

    register_configs()
    ConfigStore.instance().store(name="bench_runtime_schema", node=BenchRuntimeConfig)
