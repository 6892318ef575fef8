"""Fixtures of the simulator tests: cached config composition and constant-cost builders."""

from __future__ import annotations

import json
from functools import cache

from conf.schema import ExperimentConfig
from conf.trace import TraceRecord
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


def span_record(name: str, group: str, rank: int, it: int, dur: float, tokens: int = 0, ctx: int = 0,
                start_s: float = 0.0, **extra) -> TraceRecord:
    """One trace span as a runtime run dir records it (conf.trace.TraceRecord), `extra` as its JSON fields: for the
    tests of what reads measured run dirs (simulator/runtime_fit.py, calibration/span_split.py)."""
    return TraceRecord(name=name, shapes="", tp=1, ctx=ctx, device="sim", start_s=start_s, duration_s=dur,
                       run_id="t", group=group, rank=rank, iteration=it, tokens=tokens,
                       extra=json.dumps(extra) if extra else "")
