"""serial_tree's auto d in the simulator (policy/depth_tuner.py HillClimb): the pilot climb of the default d rule
(simulation.serial_auto_d) against the breadth rule it replaced and against the runtime's SerialDepthTuner run on
simulated time (`sim.d_rule=runtime`), on the acceptance presets at bs 8 and 16 (default pair, 6x2, h200 profile)."""

from __future__ import annotations

import statistics

import pytest

from policy.depth_tuner import breadth_d
from simulator.simulation import Simulation, build_costs, resolve_d, simulate
from tests.simulator.conftest import cfg

QUIET = ("trace.enabled=false",)


def _run(*overrides: str, d: int | None = None) -> Simulation:
    config = cfg(*overrides, *QUIET)
    costs = build_costs(config)
    return Simulation(config, costs, d=d if d is not None else resolve_d(config, costs)).run()


def _speed(sim: Simulation) -> float:
    return sim.tally.generated_tokens / sim.tally.wall_s


def _accept_len(sim: Simulation) -> float:
    return sum(k * n for k, n in sim.tally.accept_hist.items()) / sim.tally.verifies


def test_strong_bs16_verifies_five_tokens_and_beats_the_breadth_rule():
    """Issue 54's `python simulate.py acceptance=strong spec=serial_tree spec.bs=16`: >= 5 tokens per verify, and
    faster than the breadth rule's d (ceil(15 / 8) = 2, which caps the tree near depth 4 whatever the draft)."""
    strong = ("acceptance=strong", "spec=serial_tree", "spec.bs=16")
    auto = _run(*strong)
    breadth = _run(*strong, d=breadth_d(16, 8))
    assert auto.d > breadth.d and _accept_len(auto) >= 5.0 > _accept_len(breadth)
    assert _speed(auto) > _speed(breadth)
    assert simulate(cfg(*strong, *QUIET)).d == auto.d  # simulate() resolves the same d


def test_weak_keeps_the_breadth_rule():
    """A weak draft buys nothing with depth: the climb's first step up is slower, and d0 - 1 does not exist."""
    config = cfg("acceptance=weak", "spec=serial_tree", "spec.bs=8", *QUIET)
    assert resolve_d(config, build_costs(config)) == breadth_d(8, 8) == 1


def test_fixed_d_stays_fixed():
    config = cfg("acceptance=strong", "spec=serial_tree", "spec.bs=16", "spec.d=3", *QUIET)
    assert resolve_d(config, build_costs(config)) is None and simulate(config).d == 3


@pytest.mark.parametrize("bs", [8, 16])
@pytest.mark.parametrize("preset", ["weak", "default", "paper_qwen2", "strong"])
def test_pilot_climb_agrees_with_the_runtime_tuner(preset, bs):
    """The d the runtime's SerialDepthTuner settles on (median over workload seeds; its trials are noisier than the
    pilots: 16 rounds per candidate) runs within 3% of the pilot climb's d in tokens per second, both run at a fixed
    d over the same workload."""
    shape = (f"acceptance={preset}", "spec=serial_tree", f"spec.bs={bs}")
    chosen = []
    for seed in range(3):
        tuned = _run(*shape, "sim.d_rule=runtime", "workload.num_requests=8", f"workload.seed={seed}")
        assert tuned.tuner is not None and tuned.tuner.chosen is not None
        chosen.append(tuned.tuner.chosen)
    pilot = _run(*shape)
    runtime = _run(*shape, d=round(statistics.median(chosen)))
    assert _speed(runtime) == pytest.approx(_speed(pilot), rel=0.03), (pilot.d, chosen)
