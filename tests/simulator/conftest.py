"""Fixtures of the simulator tests: cached config composition and constant-cost builders."""

from __future__ import annotations

from functools import cache

from conf.schema import ExperimentConfig
from simulator.cost_model import FixedCost
from simulator.simulation import Costs
from tests.conftest import build


@cache
def _cfg(overrides: tuple[str, ...]) -> ExperimentConfig:
    return build("simulate", list(overrides))


def cfg(*overrides: str) -> ExperimentConfig:
    """conf/simulate.yaml with `overrides`, validated and frozen (cached: composing takes ~0.2 s)."""
    return _cfg(tuple(overrides))


def fixed_costs(verify_s: float = 1e-2, expand_s: float = 1e-3, message_s: float = 0.0,
                tree_op_s: float = 0.0) -> Costs:
    """Constant step costs: no prefill or compaction time, symmetric messages."""
    return Costs(target=FixedCost(verify_s), draft=FixedCost(expand_s), proposal_s=message_s,
                 verified_s=message_s, tree_op_s=tree_op_s, source="fixed")
