"""Replays of recorded serial_tree runs with d auto keep the d they ran: records from before the serial depth tuner
(no `d_rule` in their metrics or benchmark row) ran the breadth rule ceil((bs - 1) / w) and are simulated there;
records the tuner decided (`d_rule` runtime) are simulated with the tuner (`sim.d_rule=runtime`)."""

from __future__ import annotations

import json

from calibration.sim_vs_bench import row_overrides
from calibration.validation_replay import recorded_serial_d
from conf.rundir import MEASURED_DIR
from tests.simulator.conftest import cfg

COLOCATED = MEASURED_DIR / "runtime_runs_2026-12-01_5fa8232_colocated" / "small_serial_tree"


def test_recorded_serial_d_of_each_kind_of_record():
    serial = cfg("spec=serial_tree", "spec.bs=16", "spec.w=8")
    assert recorded_serial_d(serial, {"d": "auto", "d_used": 2}) == 2  # runtime, before the tuner: breadth rule
    assert recorded_serial_d(serial, {"d": "auto"}) == 2  # (without d_used too)
    assert recorded_serial_d(serial, {"d": "auto", "d_used": 9, "d_rule": "runtime"}) is None  # the tuner's
    assert recorded_serial_d(serial, {"d": 10, "d_rule": "round"}) == 10  # a simulator record: the d it resolved
    assert recorded_serial_d(cfg("spec=serial_tree", "spec.d=3"), {"d": 3}) is None  # fixed: the config's
    assert recorded_serial_d(cfg("spec=async_tree"), {"d": "auto", "d_used": 3}) is None


def test_benchmark_rows_before_the_tuner_are_pinned_to_the_breadth_rule():
    workload = {"model": "llama3-8b_llama3.2-1b", "kernels": "graphs", "prompt_tokens": 37, "max_new_tokens": 64,
                "parallel": "1x1"}
    old = {"mode": "serial_tree", "spec": "bs 16 w 8 d auto=2"}
    ov = row_overrides(workload, old, 1, None, "profiles/h200.json", 37)
    assert "spec.d=2" in ov and "spec.d=auto" not in ov and "sim.d_rule=runtime" not in ov
    tuned = row_overrides(workload, {**old, "spec": "bs 16 w 8 d auto=9", "d_rule": "runtime"}, 1, None,
                          "profiles/h200.json", 37)
    assert "spec.d=auto" in tuned and "sim.d_rule=runtime" in tuned


def test_a_recorded_colocated_serial_auto_run_replays_at_the_d_it_ran(tmp_path):
    """runtime_runs_2026-12-01_5fa8232_colocated/small_serial_tree: spec.d auto, bs 8, w 8, recorded without d_rule:
    validate compare simulates it at ceil(7 / 8) = 1, the d its metrics say it used."""
    from calibration.compare import simulate_run

    measured = json.loads((COLOCATED / "metrics.json").read_text())
    config = json.loads((COLOCATED / "config.json").read_text())["config"]
    assert config["spec"]["d"] == "auto" and "d_rule" not in measured and measured["d_used"] == 1
    row = simulate_run(COLOCATED, "profiles/h200.json", tmp_path / "sim")
    assert row["d_config"] == "auto" and row["d_used"] == 1 == row["d_measured"]
