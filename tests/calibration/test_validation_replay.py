"""calibration/validate.py's comparison path and calibration/validation_replay.py: a recorded run re-simulated with
its own verify outcomes, the belief its replayed tree grows by, and the draft ranks of runs recorded before
iterations.csv had them."""

from __future__ import annotations

import json

import pytest

from conf.rundir import MEASURED_DIR
from tests.simulator.conftest import cfg

BASE = ("model=llama3-8b_llama3.2-1b", "parallel=1x1", "kernels=triton", "sim=analytic", "workload.num_requests=1",
        "workload.prompt_tokens=512", "workload.max_new_tokens=64", "trace.chrome=false")


@pytest.mark.parametrize("mode", ["autoregressive", "chain", "serial_tree", "async_tree"])
def test_validation_replay_reproduces_a_recorded_run(mode, tmp_path):
    """calibration/validate.py's comparison path: re-simulating a recorded run dir with its own verify outcomes
    replayed (acceptance.kind=replay on its iterations.csv; d as the run's, auto: the DepthTuner) reproduces its
    throughput.

    The recorded run here is a simulator run (the same cost model), so any difference comes from the replay
    alone: it follows the top-ranked chain for the recorded accepted length, which a best-first proposal
    almost always holds (measured: 0% AR / chain, -0.3% async, -3.4% serial at this seed).
    """
    from calibration.compare import simulate_run
    from simulator.main import run as run_sim

    config = cfg("model=llama3-8b_llama3.2-1b", "parallel=1x1", f"spec={mode}", "kernels=triton", "sim=analytic",
                 "workload.num_requests=1",
                 "workload.prompt_tokens=512", "workload.max_new_tokens=128", "trace.chrome=false")
    recorded = run_sim(config, tmp_path / "recorded" / mode, verbose=False)
    row = simulate_run(tmp_path / "recorded" / mode, None, tmp_path / "sim")
    assert row["tokens_per_s"]["measured"] == pytest.approx(recorded["tokens_per_s"])
    assert abs(row["tokens_per_s"]["error"]) <= 0.05, row["tokens_per_s"]
    assert abs(row["mean_accept_len"]["error"]) <= 0.08, row["mean_accept_len"]
    assert (tmp_path / "sim" / mode / "metrics.json").is_file()


def test_replay_belief_table_is_the_positional_tables_belief():
    """acceptance.replay_belief=table (a runtime oracle run with spec.oracle_belief=table): the replayed tree
    grows by the inline positional table's belief, exactly the positional model's; the runtime's draft reads the
    same rows (runtime.oracle.oracle_belief), and a measured run's metrics pick it (calibration/validate.py)."""
    from calibration.validation_replay import replay_belief_of
    from conf.schema import AcceptanceConfig
    from policy.acceptance import PositionalAcceptance, ReplayAcceptance
    from runtime.oracle import oracle_belief

    table = [[0.6, 0.2, 0.1], [0.8, 0.1]]
    replay = ReplayAcceptance([(1, True)], beyond=4, belief="table", table=table).belief(4)
    assert replay == PositionalAcceptance(table).belief(4)
    assert oracle_belief(AcceptanceConfig(positional=table), 4) == replay
    assert replay[1][2] == replay[1][3] < replay[1][1]  # beyond the row: floored, non-increasing
    with pytest.raises(ValueError, match="replay_belief=table"):
        ReplayAcceptance([(1, True)], beyond=4, belief="table")
    config = cfg(*BASE, "spec=async_tree")
    assert replay_belief_of({"source": "runtime", "oracle": True, "oracle_belief": "table"}, config) == "table"
    # model belief with a random-weight draft (no checkpoint): flat log-probs, a breadth-first tree
    assert replay_belief_of({"source": "runtime", "oracle": True, "oracle_belief": "model"}, config) == "uniform"


def test_measured_h200_runs_get_their_oracle_ranks_back(tmp_path):
    """The H200 validation runs of 2026-11-30 (git e92dbf1) predate the `ranks` column: calibration/validate.py
    reconstructs every verify's draft ranks from the run's seed, consistent with the recorded accepted
    counts and hits (a contradicting stream would return None), and the simulator's replay then reproduces
    the recorded accepted counts except in the verifies it counts as divergences (few)."""
    import csv

    from calibration.validate import REPO
    from calibration.validation_replay import replay_belief_of, sim_config, with_oracle_ranks
    from conf.rundir import config_from_dict, read_run
    from simulator.simulation import Simulation, build_costs

    run_dir = MEASURED_DIR / "runtime_runs_2026-11-30_e92dbf1/async_bs8_w8_dauto"
    run = read_run(run_dir)
    config = config_from_dict(run["config"])
    path = with_oracle_ranks(run_dir, config, run["metrics"], tmp_path)
    assert path is not None
    verifies = json.loads(path.read_text())["verifies"]
    with (run_dir / "iterations.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(verifies) == len(rows) == run["metrics"]["iterations"]
    for v, r in zip(verifies, rows):
        assert v["accepted"] == int(r["accepted"]) and len(v["ranks"]) == v["accepted"] + 1
    assert any(x > 0 for v in verifies for x in v["ranks"][:-1])  # the oracle accepted off the rank-0 chain
    assert with_oracle_ranks(run_dir, config, {**run["metrics"], "oracle": False}, tmp_path) is None

    cfg = sim_config(config, str(REPO / "profiles/h200.json"), acceptance_file=str(path),
                     replay_belief=replay_belief_of(run["metrics"], config))
    sim = Simulation(cfg, build_costs(cfg), d=int(run["metrics"]["d_used"])).run()
    mismatched = sum(int(a.accepted != v["accepted"]) for a, v in zip(sim.rows, verifies))
    assert len(sim.rows) == len(verifies)
    assert mismatched <= sim.acceptance.divergences <= len(verifies) // 20, (mismatched, sim.acceptance.divergences)


def test_a_replay_keeps_the_runs_acceptance_table_from_its_file():
    """A run composed with `acceptance=smollm2` (a positional table in a file): its replay takes the file field,
    so sim_config keeps the run's table inline, the one replay_belief=table grows by and draws from."""
    from calibration.validation_replay import sim_config
    from policy.acceptance import load_acceptance

    config = cfg(*BASE, "spec=async_tree", "acceptance=smollm2", "spec.oracle=true")
    table = load_acceptance(config.acceptance, 8).raw
    assert len(table) > 1  # the measured SmolLM2 table, not the one-row inline default
    replay = MEASURED_DIR / "runtime_runs_2026-11-30_e92dbf1/async_bs8_w8_dauto/iterations.csv"
    out = sim_config(config, None, acceptance_file=str(replay), replay_belief="table")
    assert out.acceptance.kind == "replay" and [list(r) for r in out.acceptance.positional] == table
    # a run of one prompt domain's table (acceptance.domain): that table inline, and no domain left on the replay
    config = cfg(*BASE, "spec=async_tree", "acceptance=smollm2_instruction", "spec.oracle=true")
    table = load_acceptance(config.acceptance, 8).raw
    out = sim_config(config, None, acceptance_file=str(replay), replay_belief="table")
    assert out.acceptance.domain is None and [list(r) for r in out.acceptance.positional] == table
