"""bench/host_speed.py: the pure-Python loop per CPU, and the host-only spans of run dirs."""

import json
import os
from pathlib import Path

import pytest

from bench.host_speed import main, probe, run_row
from conf.trace import TRACE_FILE, TraceRecord, write_traces
from tests.simulator.conftest import cfg, span_record

REPO = Path(__file__).resolve().parents[2]
STORED = REPO / "bench" / "results" / "runtime_runs_2026-12-01_e2553d0_cores"


def test_probe_times_every_cpu_per_pass_and_restores_the_affinity():
    allowed = os.sched_getaffinity(0)
    cpus = sorted(allowed)
    rows = probe(cpus, passes=2, reps=3, loops=20_000)
    assert [(r["pass"], r["cpu"]) for r in rows] == [(p, c) for p in (1, 2) for c in cpus]
    assert all(0 < r["min_ms"] <= r["median_ms"] for r in rows)
    assert os.sched_getaffinity(0) == allowed


def _span(name: str, it: int, dur: float, **extra) -> TraceRecord:
    return span_record(name, "draft", 0, it, dur, 8, 100, start_s=float(it), **extra)


def test_runs_report_host_span_medians_and_marks(tmp_path):
    """Medians (us) of the host-only spans and of the replay host marks, with the run's mode and tokens/s; device
    spans without marks and other spans are left out."""
    from simulator.main import run as run_sim

    run_dir = tmp_path / "run"
    run_sim(cfg("spec=serial_tree", "workload.num_requests=1", "workload.prompt_tokens=16",
                "workload.max_new_tokens=4", "trace.chrome=false"), run_dir, verbose=False)
    recs = [_span("step.reroot", it, 4e-5 + 1e-6 * it) for it in range(1, 6)]  # 41..45 us: median 43
    recs += [_span("step.select", it, 2e-5) for it in range(1, 4)]
    recs += [_span("step.expand", it, 1e-3, planned_s=1.2e-5, launched_s=5e-5) for it in range(1, 4)]
    recs += [_span("step.expand", 9, 1e-3), _span("step.prefill", 0, 5e-3)]  # no marks; not a host span
    write_traces(run_dir / TRACE_FILE, recs)
    row = run_row(run_dir)
    assert row["mode"] == "serial_tree" and row["tokens_per_s"] > 0
    assert row["median_us"] == pytest.approx({"reroot": 43.0, "select": 20.0, "expand.planned": 12.0,
                                              "expand.launched": 50.0})
    assert row["n"] == {"reroot": 5, "select": 3, "expand.planned": 3, "expand.launched": 3}


def test_stored_runs_show_the_two_host_speeds(tmp_path):
    """The five runs of one configuration in one call (1 x H200, e2553d0): host-only spans ~2x apart between runs, the
    slowest run's tokens/s the lowest."""
    record = main(["runs", *(str(STORED / f"small_core{c}") for c in (0, 5, 10, 15, "all")),
                   "--out", str(tmp_path / "h.json")])
    assert json.loads((tmp_path / "h.json").read_text()) == json.loads(json.dumps(record))
    reroot = {Path(r["run"]).name: r["median_us"]["reroot"] for r in record["rows"]}
    assert max(reroot.values()) / min(reroot.values()) > 2.0
    slowest = max(reroot, key=reroot.get)
    assert min(record["rows"], key=lambda r: r["tokens_per_s"])["run"].endswith(slowest)


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="no traces.jsonl"):
        run_row(tmp_path)
    with pytest.raises(SystemExit, match="--loops: must be >= 1, got 0"):
        main(["probe", "--loops", "0", "--out", str(tmp_path / "p.json")])
