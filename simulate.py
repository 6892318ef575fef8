"""Simulate SwiftSpec-style decoding (SimPy) on the configured GPU split: `python simulate.py [overrides]`.

Thin Hydra entry point: compose -> validate/freeze once -> simulator.main.run(cfg, run_dir).
Sweeps: `python simulate.py --multirun parallel=4x4,6x2,7x1 acceptance.scale=0.6,0.8,1.0`. In a multirun each job
prints one line (the callback of analysis/sweep.py, naming its swept values) instead of its table, and the sweep
ends with summary.csv / .md / .png in its sweep dir.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from conf import build_config
from conf.schema import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="simulate")
def main(cfg: DictConfig) -> float:
    """Run one simulation; returns tokens/s (Hydra sweepers can optimise it)."""
    from simulator.main import run

    config = build_config(cfg)
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    metrics = run(config, run_dir, command=" ".join(sys.argv), verbose=hydra_cfg.mode != RunMode.MULTIRUN)
    return float(metrics["tokens_per_s"])


if __name__ == "__main__":
    main()
