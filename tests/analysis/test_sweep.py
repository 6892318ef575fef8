"""Sweeps as the README runs them: the summary a multirun ends with (analysis/sweep.py), checked against the jobs'
own run dirs; the callback and `python -m analysis.sweep` giving the same files; the launchers (joblib with a failing
job, submitit_local, generate.py's sequential one); the Optuna sweeper against simulator.autoconfig."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from analysis.sweep import METRICS, SUMMARY_CSV, SUMMARY_MD, SUMMARY_PNG, SweepError, main, read_summary_csv, summarize
from conf.rundir import REPO_ROOT as REPO
from simulator.autoconfig import search
from simulator.main import run
from tests.simulator.conftest import cfg

AR = "autoregressive"
SMALL = ["workload.num_requests=1", "workload.max_new_tokens=32", "trace.enabled=false"]


def multirun(entry: str, sweep_dir: Path, *overrides: str, timeout: int = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, entry, "--multirun", *overrides, f"hydra.sweep.dir={sweep_dir}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def job_overrides(run_dir: Path) -> dict[str, str]:
    listed = OmegaConf.to_container(OmegaConf.load(run_dir / ".hydra" / "overrides.yaml"))
    return dict(str(o).split("=", 1) for o in listed)


def expected_metrics(run_dir: Path) -> dict[str, float | None]:
    m = json.loads((run_dir / "metrics.json").read_text())
    return {**{k: m[k] for k in METRICS if k != "draft_busy_fraction"},
            "draft_busy_fraction": m["busy_fraction"]["draft"]}


def cell(text: str) -> float | None:
    return None if text == "" else float(text)


def check_rows_against_jobs(sweep_dir: Path, rows: list[dict[str, str]], swept: list[str]) -> None:
    """Every row's swept values are its job's overrides and its metrics are its job's metrics.json values."""
    for row in rows:
        run_dir = sweep_dir / row["run_dir"]
        assert {k: row[k] for k in swept} == {k: job_overrides(run_dir)[k] for k in swept}
        if row["error"]:
            assert all(row[k] == "" for k in METRICS)
        else:
            assert {k: cell(row[k]) for k in METRICS} == expected_metrics(run_dir)


def test_joblib_sweep_summary_rows_failed_jobs_seeds_and_the_standalone_command(tmp_path):
    """A sweep on the default (joblib) launcher with a failing value and two seeds: one row per job, the failures as
    rows with their error (Hydra still exits non-zero), the seeds' median and spread in summary.md;
    `python -m analysis.sweep` (its main) afterwards writes byte-identical files."""
    sweep = tmp_path / "sweep"
    proc = multirun("simulate.py", sweep, "spec.w=8,0", "seed=0,1", *SMALL)
    assert proc.returncode == 2 and "error: spec.w: draft width must be >= 1, got 0" in proc.stderr  # the failed job
    assert "sweep summary (4 jobs, 2 failed)" in proc.stdout
    rows = read_summary_csv(sweep / SUMMARY_CSV)
    swept = ["spec.w", "seed"]
    assert list(rows[0]) == ["job", *swept, *METRICS, "error", "run_dir"]  # no AR job: no speedup column
    assert [(r["job"], r["spec.w"], r["seed"]) for r in rows] == [("0", "8", "0"), ("1", "8", "1"), ("2", "0", "0"),
                                                                  ("3", "0", "1")]
    check_rows_against_jobs(sweep, rows, swept)
    for r in rows:  # the per-job line names the job's swept values
        assert f"job {r['job']} [spec.w={r['spec.w']} seed={r['seed']}]: " in proc.stdout
    failed = [r for r in rows if r["error"]]
    assert [r["spec.w"] for r in failed] == ["0", "0"]
    assert all("spec.w: draft width must be >= 1" in r["error"] for r in failed)
    assert all((sweep / r["run_dir"] / "error.txt").is_file() for r in failed)
    md = (sweep / SUMMARY_MD).read_text()
    assert "4 jobs (2 finished, 2 failed)" in md and "## Over `seed`" in md
    tps = [float(r["tokens_per_s"]) for r in rows if not r["error"]]
    assert f"| 8 | 2 | {statistics.median(tps):.4g} [{max(tps) - min(tps):.4g}] |" in md

    written = {name: (sweep / name).read_bytes() for name in (SUMMARY_CSV, SUMMARY_MD, SUMMARY_PNG)}
    for name in written:
        (sweep / name).unlink()
    assert main([str(sweep)]) == 0
    assert {name: (sweep / name).read_bytes() for name in written} == written


def test_submitit_local_launcher(tmp_path):
    """hydra/launcher=submitit_local (the local twin of submitit_slurm): each job in its own process, then the
    summary in the launching one."""
    sweep = tmp_path / "sweep"
    proc = multirun("simulate.py", sweep, "hydra/launcher=submitit_local", "parallel=6x2,7x1", *SMALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_summary_csv(sweep / SUMMARY_CSV)
    assert [r["parallel"] for r in rows] == ["6x2", "7x1"]
    check_rows_against_jobs(sweep, rows, ["parallel"])
    assert (sweep / SUMMARY_PNG).stat().st_size > 0


def test_generate_multirun_is_sequential_and_summarised(tmp_path):
    """generate.py's multirun: the basic (one job at a time) launcher; the runtime's metrics in the same table."""
    sweep = tmp_path / "sweep"
    proc = multirun("generate.py", sweep, "model=tiny", "parallel=1x0", "workload=default",
                    "workload.num_requests=1", "workload.max_new_tokens=8", "spec=autoregressive,chain", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    launcher = OmegaConf.load(sweep / "multirun.yaml").hydra.launcher._target_
    assert launcher == "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
    rows = read_summary_csv(sweep / SUMMARY_CSV)
    assert [r["spec"] for r in rows] == ["autoregressive", "chain"]
    check_rows_against_jobs(sweep, rows, ["spec"])
    ar, chain = (float(r["tokens_per_s"]) for r in rows)
    assert [float(r["speedup_vs_ar"]) for r in rows] == pytest.approx([1.0, chain / ar], rel=1e-12)


def test_optuna_sweeper_finds_autoconfigs_optimum(tmp_path):
    """hydra/sweeper=optuna_search on a small space (3 splits x 2 bs x 2 w x 3 d = 36 configurations, 20 trials):
    every trial's tokens/s is autoconfig's for the same configuration (one objective), and the best trial is within
    1% of autoconfig's best (the exhaustive search's)."""
    splits, bs, w, d = ("4x4", "6x2", "7x1"), (4, 8), (4, 8), ("auto", "2", "4")
    sweep = tmp_path / "sweep"
    proc = multirun("simulate.py", sweep, "hydra/sweeper=optuna_search", "hydra/launcher=basic",
                    "hydra.sweeper.n_trials=20", "hydra.sweeper.n_jobs=1", f"parallel=choice({','.join(splits)})",
                    f"spec.bs=choice({','.join(map(str, bs))})", f"spec.w=choice({','.join(map(str, w))})",
                    f"spec.d=choice({','.join(d)})", *SMALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranked = search(cfg(*SMALL), splits=[int(s.split("x")[0]) for s in splits], bs_values=bs, w_values=w,
                    d_values=d)
    by_config = {(f"{c.target_gpus}x{c.draft_gpus}", str(c.bs), str(c.w), c.d): c.tokens_per_s for c in ranked}
    rows = read_summary_csv(sweep / SUMMARY_CSV)
    swept = ["parallel", "spec.bs", "spec.w", "spec.d"]
    assert len(rows) == 20 and all(k in rows[0] for k in swept) and not any(r["error"] for r in rows)
    check_rows_against_jobs(sweep, rows, swept)
    for r in rows:
        assert float(r["tokens_per_s"]) == pytest.approx(by_config[tuple(r[k] for k in swept)], rel=1e-9)
    best = OmegaConf.load(sweep / "optimization_results.yaml")
    assert best.best_value == pytest.approx(max(float(r["tokens_per_s"]) for r in rows), rel=1e-12)
    assert best.best_value >= 0.99 * ranked[0].tokens_per_s


def test_job_dirs_without_hydra_files_and_a_killed_job(tmp_path, capsys):
    """Job dirs written with hydra.output_subdir=null: the swept values are the resolved-config keys that differ;
    a job dir with neither metrics nor error.txt is a row saying the job did not finish; no job: an error."""
    with pytest.raises(SweepError, match="no job dir in it"):
        summarize(tmp_path)
    assert main([str(tmp_path / "missing")]) == 2 and "no such sweep dir" in capsys.readouterr().err
    for name, overrides in (("a", ["spec.w=4"]), ("b", ["spec.w=8"]), ("e", ["spec=autoregressive", "parallel=8x0"])):
        run(cfg(*SMALL, *overrides), tmp_path / name, verbose=False)
    (tmp_path / "c" / ".hydra").mkdir(parents=True)
    (tmp_path / "c" / ".hydra" / "overrides.yaml").write_text("- spec.w=16\n")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "error.txt").write_text("")
    assert main([str(tmp_path)]) == 0
    rows = read_summary_csv(tmp_path / SUMMARY_CSV)
    swept = ["parallel.target_gpus", "parallel.draft_gpus", "spec.mode", "spec.w"]  # differing, in config order
    assert list(rows[0]) == ["job", *swept, *METRICS, "speedup_vs_ar", "error", "run_dir"]
    assert [(r["run_dir"], r["spec.w"], r["spec.mode"]) for r in rows] == [
        ("a", "4", "async_tree"), ("b", "8", "async_tree"), ("c", "16", ""), ("d", "", ""), ("e", "8", AR)]
    assert [r["error"] for r in rows] == ["", "", "no metrics.json and no error.txt (the job did not finish)",
                                          "failed (empty error.txt)", ""]
    ar = float(rows[4]["tokens_per_s"])  # AR on all 8 GPUs: the baseline of the 6 + 2 async runs (same shapes)
    for r in (rows[0], rows[1], rows[4]):
        assert {k: cell(r[k]) for k in METRICS} == expected_metrics(tmp_path / r["run_dir"])
        assert float(r["speedup_vs_ar"]) == pytest.approx(float(r["tokens_per_s"]) / ar, rel=1e-12)
    assert rows[2]["speedup_vs_ar"] == rows[3]["speedup_vs_ar"] == ""
