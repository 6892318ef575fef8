"""`python -m calibration.validate compare` on shipped measured runs (data/measured/): the table against a direct
computation from the run dirs, the decision agreement against every pair counted here, and a planted flip."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from calibration.validate import main
from conf.rundir import MEASURED_DIR, REPO_ROOT

RUNS = MEASURED_DIR / "runtime_runs_2026-12-01_954a1bf"
HELD_OUT = ("chain_g2", "chain_g2__r1", "serial_bs4_w4_d2", "async_bs8_w4_d2", "async_bs8_w4_d2__r1")
"""Held-out configurations of the shipped profile (its report's runtime.runs are others), fixed d: quick to simulate."""
PROFILE = str(REPO_ROOT / "profiles" / "h200.json")


def _metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


def test_the_table_is_the_run_dirs_numbers_and_every_pair_is_a_decision(tmp_path):
    out = tmp_path / "out"
    assert main(["compare", "--runs", *(str(RUNS / n) for n in HELD_OUT), "--profile", PROFILE,
                 "--out", str(out)]) == 0
    result = json.loads((out / "validation.json").read_text())
    rows = {r["name"]: r for r in result["rows"]}
    assert sorted(rows) == sorted(HELD_OUT)
    for name, row in rows.items():
        measured, simulated = _metrics(RUNS / name), _metrics(out / "sim" / name)
        for key in ("tokens_per_s", "iteration_time_s", "mean_accept_len"):
            cell = row[key]
            assert cell["measured"] == measured[key] and cell["simulated"] == simulated[key]
            assert cell["error"] == pytest.approx(simulated[key] / measured[key] - 1.0, rel=1e-12)
        assert row["mean_accept_len"]["error"] == pytest.approx(0.0, abs=1e-12)  # replayed: the run's own outcomes
        predicted = row["predicted_acceptance"]["tokens_per_s"]
        assert predicted["error"] == pytest.approx(predicted["simulated"] / measured["tokens_per_s"] - 1.0, rel=1e-12)
    # every pair of configurations (repeats averaged), counted here
    means = {}
    for name, row in rows.items():
        means.setdefault(name.split("__")[0], []).append(row["tokens_per_s"])
    avg = {c: [sum(v[k] for v in vs) / len(vs) for k in ("measured", "simulated")] for c, vs in means.items()}
    flipped = {tuple(sorted((a, b))) for a, b in itertools.combinations(avg, 2)
               if (avg[a][0] - avg[b][0]) * (avg[a][1] - avg[b][1]) < 0}
    da = result["decision_agreement"]
    assert da["pairs"] == len(avg) * (len(avg) - 1) // 2 == 3
    assert da["agreed"] == da["pairs"] - len(flipped)
    assert {tuple(sorted((f["faster"], f["slower"]))) for f in da["flipped"]} == flipped
    table = (out / "validation.md").read_text()
    assert all(f"| {name} |" in table for name in HELD_OUT) and "Decision agreement" in table
    assert (out / "fig04_parity.png").is_file()


def test_a_planted_flip_is_reported_with_both_errors_and_the_measured_gap(tmp_path):
    """Two held-out runs whose measured tokens/s are swapped: the simulator's order is then the reverse of the
    measured one, and the user command (a subprocess, the repository as a clean clone has it) names the pair."""
    runs = tmp_path / "runs"
    for name in ("chain_g2", "async_bs8_w4_d2"):
        shutil.copytree(RUNS / name, runs / name)
    fast, slow = (_metrics(runs / n)["tokens_per_s"] for n in ("async_bs8_w4_d2", "chain_g2"))
    assert fast > slow  # measured as shipped; the simulator agrees (previous test's table)
    for name, tps in (("async_bs8_w4_d2", slow), ("chain_g2", fast)):
        metrics = _metrics(runs / name)
        metrics["tokens_per_s"] = tps
        (runs / name / "metrics.json").write_text(json.dumps(metrics))
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "OMP_NUM_THREADS", "TRITON_INTERPRET")}
    proc = subprocess.run([sys.executable, "-m", "calibration.validate", "compare", "--runs", str(runs), "--profile",
                           "profiles/h200.json", "--out", str(out)], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=600, env={**env, "PYTHONPATH": str(REPO_ROOT), "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    da = json.loads((out / "validation.json").read_text())["decision_agreement"]
    assert (da["pairs"], da["agreed"], len(da["flipped"])) == (1, 0, 1)
    flip = da["flipped"][0]
    assert (flip["faster"], flip["slower"]) == ("chain_g2", "async_bs8_w4_d2")
    assert flip["measured"] == [fast, slow] and flip["simulated"][0] < flip["simulated"][1]
    assert flip["errors"] == pytest.approx([flip["simulated"][0] / fast - 1, flip["simulated"][1] / slow - 1])
    assert flip["measured_gap"] == pytest.approx(fast / slow - 1)
    assert "flipped: chain_g2 measured" in proc.stdout and "flipped: chain_g2 measured" in (
        out / "validation.md").read_text()


def test_a_path_that_holds_no_run_is_a_one_line_error(tmp_path, capsys):
    assert main(["compare", "--runs", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == (f"compare: --runs: {tmp_path} is neither a run dir (metrics.json) nor a "
                                               f"folder of run dirs (*/metrics.json)")
