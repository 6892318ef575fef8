"""calibration/span_split.py: a span's residual split into the device model's error and host time (graph-event runs)."""

import json
from pathlib import Path

import pytest

from calibration.span_split import main, split_run
from conf.rundir import MEASURED_DIR
from conf.trace import TRACE_FILE, TraceRecord, write_traces
from simulator.profile import Profile, load_profile
from simulator.simulation import build_costs
from tests.simulator.conftest import cfg, span_record

REPO = Path(__file__).resolve().parents[2]
EVENTS = MEASURED_DIR / "runtime_runs_2026-12-01_82f9825_colocated_events"


def _span(name: str, it: int, dur: float, tokens: int, ctx: int, **extra) -> TraceRecord:
    """A colocated run's span: the target group's leader records the draft's too."""
    return span_record(name, "target", 0, it, dur, tokens, ctx, start_s=float(it), **extra)


def test_split_recovers_known_device_error_and_host_time(tmp_path):
    """Spans = price + device error + host, with the in-run replay = price + device error: the split returns both
    per span kind and row count (medians); spans without device times are counted, not split."""
    from simulator.main import run as run_sim

    config = cfg("model=llama3-8b_llama3.2-1b", "parallel=1x0", "kernels=triton", "sim=analytic", "spec=serial_tree",
                 "workload.num_requests=1", "workload.prompt_tokens=64", "workload.max_new_tokens=8",
                 "trace.chrome=false")
    run_dir = tmp_path / "colo"
    run_sim(config, run_dir, verbose=False)
    prof = load_profile(REPO / "profiles" / "h200.json")
    costs = build_costs(config, profile=Profile(prof.path, prof.hardware, prof.software, prof.operators))
    recs = []
    for it in range(1, 21):
        ctx = 300 + it
        price = costs.target.forward_s(8, ctx + 8)
        recs.append(_span("step.verify", it, price + 9e-5 + 8e-5, 8, ctx, gpu_replay_s=price + 9e-5))
        price = costs.draft.forward_s(1, ctx + 1)
        recs.append(_span("step.expand", it, price - 1e-5 + 7e-5, 1, ctx, gpu_replay_s=price - 1e-5, rows=1))
        recs.append(_span("step.expand", it, 1e-3, 8, ctx, rows=8))  # no device time: skipped
    write_traces(run_dir / TRACE_FILE, recs)
    rows, skipped = split_run(run_dir, prof)
    assert skipped == 20
    by = {(r["span"], r["rows"]): r for r in rows}
    assert set(by) == {("step.verify", 8), ("step.expand", 1)}
    assert by[("step.verify", 8)]["device_error_us"] == pytest.approx(90.0, abs=1e-6)
    assert by[("step.verify", 8)]["host_us"] == pytest.approx(80.0, abs=1e-6)
    assert by[("step.expand", 1)]["device_error_us"] == pytest.approx(-10.0, abs=1e-6)
    assert by[("step.expand", 1)]["host_us"] == pytest.approx(70.0, abs=1e-6)
    assert by[("step.verify", 8)]["split"] == "1x0" and by[("step.verify", 8)]["n"] == 20


def test_recorded_graph_event_runs_split(tmp_path):
    """The 82f9825 colocated runs: every chain step's host part is 60-100 us at both model sizes (measured: 75-88),
    and the 8B verify's device time is priced short (measured +83 to +91 us)."""
    out = tmp_path / "split.json"
    assert main([str(EVENTS / "small_chain_ev"), str(EVENTS / "large_chain_ev"), "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 4
    for r in rows:
        assert 60 <= r["host_us"] <= 100, r
    verify_8b = next(r for r in rows if r["run"] == "large_chain_ev" and r["span"] == "step.verify")
    assert 50 <= verify_8b["device_error_us"] <= 130


def test_a_run_dir_without_traces_is_named(tmp_path):
    from simulator.main import run as run_sim

    config = cfg("model=tiny", "parallel=1x1", "kernels=reference", "sim=analytic", "spec=chain",
                 "workload.num_requests=1", "workload.prompt_tokens=16", "workload.max_new_tokens=4",
                 "trace.enabled=false", "trace.chrome=false")
    run_sim(config, tmp_path / "r", verbose=False)
    (tmp_path / "r" / TRACE_FILE).unlink(missing_ok=True)
    with pytest.raises(FileNotFoundError, match=r"r: no traces\.jsonl: a runtime run dir with traces is needed"):
        split_run(tmp_path / "r", load_profile(REPO / "profiles" / "h200.json"))
