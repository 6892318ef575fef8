"""Simulate SwiftSpec-style decoding (SimPy) on the configured GPU split: `python simulate.py [overrides]`.

Thin Hydra entry point: compose -> validate/freeze once -> simulator.main.run(cfg, run_dir).
Sweeps: `python simulate.py --multirun parallel=4x4,6x2,7x1 acceptance.scale=0.6,0.8,1.0`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from conf import build_config
from conf.retired import refuse_retired_overrides
from conf.schema import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="simulate")
def main(cfg: DictConfig) -> float:
    """Run one simulation; returns tokens/s (Hydra sweepers can optimise it)."""
    from simulator.main import run

    config = build_config(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    metrics = run(config, run_dir, command=" ".join(sys.argv))
    return float(metrics["tokens_per_s"])


if __name__ == "__main__":
    refuse_retired_overrides(sys.argv[1:])
    main()
