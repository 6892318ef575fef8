"""calibration/sim_vs_bench.py: the simulator against a recorded runtime benchmark (workload a at 954a1bf, 2 x H200)."""

import json
from pathlib import Path

import pytest

from calibration.sim_vs_bench import main, parse_shape
from conf.rundir import MEASURED_DIR

REPO = Path(__file__).resolve().parents[2]
RESULTS = MEASURED_DIR / "runtime_shape_realistic_2026-12-01_954a1bf.json"


def test_shape_labels_become_spec_overrides():
    assert parse_shape("autoregressive", "") == []
    assert parse_shape("chain", "gamma 4") == ["spec.gamma=4"]
    assert parse_shape("async_tree", "bs 8 w 16 d 3") == ["spec.bs=8", "spec.w=16", "spec.d=3"]
    # a d auto row records the d it settled at; the simulation runs the tuner again
    assert parse_shape("serial_tree", "bs 8 w 8 d auto=1") == ["spec.bs=8", "spec.w=8", "spec.d=auto"]
    with pytest.raises(ValueError, match="lacks w"):
        parse_shape("async_tree", "bs 8 d 3")
    with pytest.raises(ValueError, match="gamma"):
        parse_shape("chain", "")


def test_recorded_benchmark_is_simulated_row_by_row(tmp_path):
    out = tmp_path / "svb.json"
    result = main([str(RESULTS), "--requests", "1", "--seeds", "1", "--max-new-tokens", "96", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    recorded = json.loads(RESULTS.read_text())
    ours = [r for r in recorded["rows"] if r["system"] == "swiftspec"]
    # the peers' rows (transformers, DeepSpeed) are not simulated
    assert [r["mode"] for r in result["rows"]] == [r["mode"] for r in ours] and len(ours) < len(recorded["rows"])
    by_mode = {r["mode"]: r for r in result["rows"]}
    async_ov = by_mode["async_tree"]["overrides"]
    assert {"spec=async_tree", "spec.bs=8", "spec.w=8", "spec.d=auto", "sim.d_rule=runtime",
            "acceptance=smollm2", "parallel=1x1"} <= set(async_ov)
    assert "parallel=1x0" in by_mode["autoregressive"]["overrides"]
    # an autoregressive step has no acceptance luck: the calibrated profile prices it near the measured 4.26 ms
    ar = by_mode["autoregressive"]
    assert abs(ar["verify_time_s"]["error"]) < 0.08 and ar["mean_accept_len"]["simulated"] == 1.0
    for mode in ("chain", "serial_tree", "async_tree"):
        assert by_mode[mode]["mean_accept_len"]["simulated"] > 1.2
        assert abs(by_mode[mode]["verify_time_s"]["error"]) < 0.1
    assert result["summary"]["n"] == len(ours) and result["git_sha"] and result["date"]


def test_bad_inputs_name_the_file_or_flag(tmp_path):
    bad = tmp_path / "not_bench.json"
    bad.write_text(json.dumps({"rows": []}))
    with pytest.raises(SystemExit, match="not_bench.json: no workload_config"):
        main([str(bad), "--out", str(tmp_path / "o.json")])
    with pytest.raises(SystemExit, match="no such results file"):
        main([str(tmp_path / "missing.json")])
    with pytest.raises(SystemExit, match="--requests and --seeds"):
        main([str(RESULTS), "--seeds", "0"])
    with pytest.raises(SystemExit, match="--profile"):
        main([str(RESULTS), "--profile", str(tmp_path / "none.json")])


def test_draft_rows_without_an_oracle_need_an_acceptance_table(tmp_path):
    """The real pair's draft modes ran on real weights (no oracle): skipped with the reason unless --acceptance
    names a table; the autoregressive row needs none. The prompt length is the measured prompts' mean."""
    real = MEASURED_DIR / "runtime_real_pair_2026-12-01_954a1bf_modes.json"
    common = [str(real), "--requests", "1", "--seeds", "1", "--max-new-tokens", "32"]
    plain = main([*common, "--out", str(tmp_path / "a.json")])
    assert [r["mode"] for r in plain["rows"]] == ["autoregressive"]
    assert [s["mode"] for s in plain["skipped"]] == ["chain", "serial_tree", "async_tree"]
    assert all("--acceptance" in s["reason"] for s in plain["skipped"])
    assert "workload.prompt_tokens=38" in plain["rows"][0]["overrides"]  # mean of 37, 40, 39, 37
    table = main([*common, "--acceptance", "smollm2", "--out", str(tmp_path / "b.json")])
    assert [r["mode"] for r in table["rows"]] == ["autoregressive", "chain", "serial_tree", "async_tree"]
    assert not table["skipped"] and "acceptance=smollm2" in table["rows"][3]["overrides"]


def test_a_run_without_the_prefill_switch_is_simulated_with_eager_prefills():
    """The results' recorded kernels config decides whether kernels=graphs ablates prefill_graph: the switch absent
    (runs before it) means the eager prefill those runs had; none recorded adds nothing (the workload's kernels group
    decides)."""
    from calibration.sim_vs_bench import row_overrides

    wl = {"model": "smollm2", "parallel": "1x1", "kernels": "graphs", "max_new_tokens": 16}
    row = {"mode": "autoregressive", "spec": ""}
    args = (wl, row, 1, None, "profiles/h200.json", 38)
    assert row_overrides(*args, kernels={"cuda_graphs": True})[-1] == "kernels.ablate=[prefill_graph]"
    assert row_overrides(*args, kernels={"preset": "graphs", "ablate": ["prefill_graph"]})[-1] == \
        "kernels.ablate=[prefill_graph]"
    for replayed in ({"prefill_graph": True}, {"preset": "graphs", "ablate": []}):
        assert not any("prefill_graph" in o for o in row_overrides(*args, kernels=replayed))
    assert not any("prefill_graph" in o for o in row_overrides(*args))
