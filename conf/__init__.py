"""Configuration contracts shared by runtime, simulator and analysis (no torch import).

- `schema`: typed dataclasses of every Hydra group, validation, immutability;
- `presets`: model shapes, GPU and link presets;
- `trace`: the trace-record schema (one record per operator or step) and Chrome-trace export;
- `messages`: the draft <-> target message dataclasses and their wire format;
- `cli`: the entry points' one-line errors (exit code 2) and unique run directories;
- `paths`: how a path in a config resolves;
- `rundir`: run directories (resolved config, git SHA, seed, metrics, traces), written atomically;
- `retired`: the removed fields, refused as overrides and dropped from recorded configs.
"""

from __future__ import annotations

from typing import Any

from conf.schema import ExperimentConfig, freeze


def build_config(cfg: Any) -> ExperimentConfig:
    """Convert a composed Hydra config (DictConfig) into a validated, immutable ExperimentConfig.

    Call once, at an entry point. Raises ConfigError (a ValueError) naming the offending field; a key the schema
    does not have (Hydra's `+key=value` adds it, and the conversion would drop it) is one too.
    """
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        from conf.cli import check_known_keys

        check_known_keys(cfg)
        obj = OmegaConf.to_object(cfg)
    else:
        obj = cfg
    if not isinstance(obj, ExperimentConfig):
        raise TypeError(f"expected a config composed against ExperimentConfig, got {type(obj).__name__}")
    obj.validate()
    return freeze(obj)


def compose_config(config_name: str, overrides: list[str]) -> ExperimentConfig:
    """conf/<config_name>.yaml (simulate, generate, ...) + Hydra overrides -> a validated, frozen ExperimentConfig,
    for scripts and benchmarks that build many configs in one process. Outside a Hydra app it initialises Hydra
    on conf/ for the call; inside one (an initialised Hydra: a `@hydra.main` app of this repository, or a test's
    `initialize`) it composes with that one, which an `initialize_config_dir` would refuse. An override of a removed
    field fails naming it (conf/retired.py)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from conf.retired import check_overrides
    from conf.rundir import REPO_ROOT
    from conf.schema import register_configs

    check_overrides(overrides)
    register_configs()
    if GlobalHydra.instance().is_initialized():
        return build_config(compose(config_name=config_name, overrides=overrides))
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return build_config(compose(config_name=config_name, overrides=overrides))
