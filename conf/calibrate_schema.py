"""Typed configuration of `python calibrate.py` (conf/calibrate.yaml), registered in Hydra's ConfigStore.

Kept apart from conf/schema.py (the experiment schema): calibration is not an experiment, it has its own
primary config. It reuses the `hardware` group (HardwareConfig) for the GPU the traces were measured on.
No torch import.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from conf.presets import LINK_PRESETS
from conf.schema import HardwareConfig, _Frozen, _require, freeze

STEP_KINDS = ("verify", "expand", "forward")
GRAPH_OPERATORS = ("gemm_graph", "attention_graph", "step_overhead_graph")
"""The in-graph profile operators calibrate can fit from op.step_graph records (simulator/profile.py)."""


@dataclass
class CalibrateConfig(_Frozen):
    """What calibrate.py fits, from which traces, and where the profile goes."""

    traces: list[str] = field(default_factory=list)
    """Trace files (JSON Lines, conf/trace.py; globs allowed) written by calibration/profile_ops.py."""
    output: str = "profiles/h200.json"
    """Profile file to write (simulator/profile.py format)."""
    report: str | None = None
    """Fit report JSON; None = next to `output` as <stem>.report.json."""
    holdout_fraction: float = 0.3
    """Share of each operator's rows held out of the fit; fit_error is measured on them."""
    seed: int = 0
    """Seed of the held-out split."""
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    """GPU the traces were measured on (hardware.gpu, a GPU_PRESETS name)."""
    intra_group: str = "nvlink4"
    """Link the all-reduce timings ran over (recorded in the profile; other links keep the prior)."""
    cross_group: str = "nvlink4"
    """Link the draft <-> target message timings ran over."""
    allreduce_mode: str = "graph"
    """Fit the all-reduce timings inside CUDA graphs (graph: what `kernels=graphs` runs; the eager fit, ~45 us per
    call, made the simulator fall back to a ~4 us analytic prior for graph runs and under-predict TP-2 steps) or the
    eager ones (eager)."""
    step_kinds: list[str] = field(default_factory=lambda: ["verify", "expand"])
    """Whole-step record kinds step_overhead is fitted on (verify, expand, forward)."""
    min_samples: int = 3
    """Operators with fewer samples keep the analytic prior."""
    graph_operators: list[str] = field(default_factory=lambda: ["attention_graph", "step_overhead_graph"])
    """In-graph operators to fit from the traces' op.step_graph records (profile_ops' step_graphs section): the
    exposed time of a kernel class inside captured decode steps. Those left out price captured steps by their
    standalone fits (gemm, attention, step_overhead). gemm_graph is not in the default: its one affine form over a
    step's summed calls priced the f7aec85 steps' GEMMs 18-27% short for SmolLM2-135M (121 latency-bound calls) and
    4-6% long for the 8B (weights streamed at ~4.2 TB/s under PDL), where the standalone fit is within -10..+2% on
    both but the tiny draft shape (+20-48%). step_overhead_graph (the small kernels counted per role and rows) prices
    the f7aec85 steps' small kernels within 5.2% held out, where step_overhead's one line over all launches gives
    20.1%."""
    step_overhead_from: str = "auto"
    """What step_overhead is fitted on: host (whole host-timed steps minus their operators), graph (the small
    kernels' exposed time inside captured steps: device only; the runtime block fitted on `runs` then holds the
    host work), auto (graph where the traces have op.step_graph records, else host)."""
    runs: list[str] = field(default_factory=list)
    """Measured runtime run dirs (with traces.jsonl) to fit the profile's `runtime` block on: the host costs
    of the runtime's loop (simulator/runtime_fit.py). Keep them out of any validation of this profile."""

    def validate(self) -> None:
        """Check ranges and names; messages name the field."""
        _require(len(self.traces) >= 1, "traces", "give at least one trace file: traces=[path.jsonl]")
        _require(0.0 <= self.holdout_fraction < 1.0, "holdout_fraction",
                 f"must be in [0, 1), got {self.holdout_fraction}")
        _require(bool(self.output), "output", "must be a file path")
        self.hardware.validate()
        for name in ("intra_group", "cross_group"):
            link = getattr(self, name)
            _require(link in LINK_PRESETS, name, f"unknown link {link!r}; allowed: {sorted(LINK_PRESETS)}")
        _require(self.allreduce_mode in ("eager", "graph"), "allreduce_mode",
                 f"{self.allreduce_mode!r} is not one of eager, graph")
        _require(len(self.step_kinds) >= 1 and all(k in STEP_KINDS for k in self.step_kinds), "step_kinds",
                 f"{list(self.step_kinds)} must be a non-empty subset of {list(STEP_KINDS)}")
        _require(self.min_samples >= 1, "min_samples", f"must be >= 1, got {self.min_samples}")
        _require(all(op in GRAPH_OPERATORS for op in self.graph_operators), "graph_operators",
                 f"{list(self.graph_operators)} must be a subset of {list(GRAPH_OPERATORS)}")
        _require(self.step_overhead_from in ("auto", "graph", "host"), "step_overhead_from",
                 f"{self.step_overhead_from!r} is not one of auto, graph, host")


def build_calibrate_config(cfg: object) -> CalibrateConfig:
    """A composed DictConfig (or a CalibrateConfig) -> validated, frozen CalibrateConfig."""
    from omegaconf import DictConfig, OmegaConf

    obj = OmegaConf.to_object(cfg) if isinstance(cfg, DictConfig) else cfg
    if not isinstance(obj, CalibrateConfig):
        raise TypeError(f"expected a config composed against CalibrateConfig, got {type(obj).__name__}")
    obj.validate()
    return freeze(obj)


def register_calibrate_config() -> None:
    """Register CalibrateConfig (and the experiment groups it reuses) in Hydra's ConfigStore."""
    from hydra.core.config_store import ConfigStore

    from conf.schema import register_configs

    register_configs()
    ConfigStore.instance().store(name="calibrate_schema", node=CalibrateConfig)
