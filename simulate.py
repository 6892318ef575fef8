"""Simulate SwiftSpec-style decoding (SimPy) on the configured GPU split: `python simulate.py [overrides]`.

Thin Hydra entry point: compose -> validate/freeze once -> simulator.main.run(cfg, run_dir).
Sweeps: `python simulate.py --multirun parallel=4x4,6x2,7x1 acceptance.scale=0.6,0.8,1.0`. In a multirun each job
prints one line (the callback of analysis/sweep.py, naming its swept values) instead of its table, and the sweep
ends with summary.csv / .md / .png in its sweep dir.
A bad input prints one line on stderr and exits with code 2 (docs/ERRORS.md; SWIFTSPEC_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from conf.cli import prepare, run_entry
from conf.frozen import ConfigError
from conf.schema import ExperimentConfig, register_configs

register_configs()


def check_no_prompts(cfg: ExperimentConfig) -> None:
    """The simulator prices prompts of `workload.prompt_tokens` tokens and reads no text: text prompts are an error
    rather than ignored."""
    for name in ("prompts", "prompt_file"):
        if getattr(cfg.workload, name):
            raise ConfigError(f"workload.{name}: the simulator reads no prompts (it simulates prompts of "
                              f"workload.prompt_tokens = {cfg.workload.prompt_tokens} tokens); unset it")


CHECKS = (check_no_prompts,)
"""What simulate.py checks beyond the schema before it starts (`conf.cli.entry_config`)."""


@hydra.main(version_base="1.3", config_path="conf", config_name="simulate")
def main(cfg: DictConfig) -> float:
    """Run one simulation; returns tokens/s (Hydra sweepers can optimise it)."""
    from simulator.main import run

    config, run_dir = prepare(cfg, *CHECKS)
    verbose = HydraConfig.get().mode != RunMode.MULTIRUN
    metrics = run(config, run_dir, command=" ".join(sys.argv), verbose=verbose)
    return float(metrics["tokens_per_s"])


if __name__ == "__main__":
    run_entry(main)
