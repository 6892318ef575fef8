"""Figure scripts: every figure is built from run dirs written here with known values, and the plotted data
(series, values, labels) is checked against those values; broken run dirs give errors naming the folder.

Run dirs are written with the project's own writers (conf.rundir.write_run, conf.trace.write_traces), so a
change of the on-disk format breaks these tests rather than the paper figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from analysis import (
    fig01_gpu_split,
    fig02_acceptance,
    fig03_interconnect,
    fig04_parity,
    fig05_timeline,
    fig06_ablation,
    fig07_acceptance_hist,
)
from analysis.runs import RunDirError, find_run_dirs, load_run, load_runs
from analysis.style import save_figure
from conf.rundir import atomic_write_csv, write_run
from conf.trace import TraceRecord, write_traces

REPO = Path(__file__).resolve().parents[2]


def metrics(**kw: Any) -> dict[str, Any]:
    """A complete metrics.json (the contract's keys) with overrides."""
    base: dict[str, Any] = dict(
        source="sim", mode="async_tree", model="llama3-70b_llama3.2-1b", target_gpus=6, draft_gpus=2, bs=8,
        w=8, d="auto", gamma=4, interconnect="nvlink", gpu="h200", acceptance_scale=1.0, acceptance_top1=0.62,
        oracle=True,
        num_requests=1, generated_tokens=64, wall_s=1.0, tokens_per_s=64.0, time_per_output_token_s=1 / 64,
        iterations=20, iteration_time_s=0.05, verify_time_s=0.03, expand_time_s=0.01, mean_accept_len=3.2,
        accept_len_hist={"1": 2, "2": 3, "3": 5}, hit_rate=0.5, busy_fraction={"target": 0.9, "draft": 0.7},
    )
    base.update(kw)
    return base


def make_run(root: Path, name: str, backend: str = "reference", traces: list[TraceRecord] | None = None,
             iterations: list[dict[str, float]] | None = None, spec: dict[str, Any] | None = None,
             **metric_kw: Any) -> Path:
    """Write a run dir `root/name`: config.json (an older run's kernels.backend), metrics.json, optional traces and
    iterations.csv."""
    run_dir = root / name
    m = metrics(**metric_kw)
    config = {"spec": {"mode": m["mode"], **(spec or {})}, "kernels": {"backend": backend}}
    write_run(run_dir, config, {"git_sha": "test", "seed": 0}, m)
    if traces is not None:
        write_traces(run_dir / "traces.jsonl", traces)
    if iterations is not None:
        atomic_write_csv(run_dir / "iterations.csv", iterations)
    return run_dir


def iteration_rows(emitted: list[int]) -> list[dict[str, float]]:
    """iterations.csv rows (the contract's columns) of request 0 with the given tokens emitted."""
    return [dict(request=0, iteration=i, start_s=0.1 * i, end_s=0.1 * i + 0.1, verify_s=0.06, expand_s=0.03,
                 reroot_s=0.005, message_s=0.002, target_idle_s=0.0, draft_idle_s=0.01, accepted=k - 1,
                 emitted=k, hit=1) for i, k in enumerate(emitted)]


def rec(name: str, group: str, start_s: float, duration_s: float, iteration: int, rank: int = 0) -> TraceRecord:
    """A step or message trace record."""
    return TraceRecord(name=name, shapes="", tp=1, ctx=0, device="sim:h200", start_s=start_s,
                       duration_s=duration_s, run_id="t", group=group, rank=rank, iteration=iteration)


def test_fig01_series_per_model_ordered_by_split(tmp_path):
    for model, tputs in [("a_b", {(7, 1): 100.0, (6, 2): 120.0, (4, 4): 90.0}), ("c_d", {(7, 1): 80.0, (6, 2): 70.0})]:
        for (t, d), v in tputs.items():
            make_run(tmp_path, f"{model}-{t}x{d}", model=model, target_gpus=t, draft_gpus=d, tokens_per_s=v)
    make_run(tmp_path, "a_b-6x2-seed1", model="a_b", target_gpus=6, draft_gpus=2, tokens_per_s=140.0)
    fig, data = fig01_gpu_split.make_figure(load_runs([tmp_path]))
    p = data.panels["split"]
    assert set(p.series) == {"a / b", "c / d"}
    assert p.series["a / b"].x == ["7:1", "6:2", "4:4"]
    assert p.series["a / b"].y == pytest.approx([100.0, 130.0, 90.0])  # two 6:2 runs averaged
    assert p.series["a / b"].extra["n"] == [1, 2, 1]
    assert p.series["c / d"].x == ["7:1", "6:2"] and p.series["c / d"].y == [80.0, 70.0]
    assert "tokens/s" in p.ylabel and "target GPUs : draft GPUs" in p.xlabel
    assert "8 GPUs" in data.title
    ax = fig.axes[0]
    assert ax.get_ylabel() == p.ylabel
    assert [t.get_text() for t in ax.get_xticklabels()] == ["7:1", "6:2", "4:4"]


def test_fig01_names_the_draft_when_runs_mix_drafts(tmp_path):
    for top1, tputs in [(0.62, (100.0, 120.0)), (0.9, (130.0, 170.0))]:  # the default table and the strong preset
        for (t, d), v in zip([(7, 1), (6, 2)], tputs):
            make_run(tmp_path, f"{top1}-{t}x{d}", target_gpus=t, draft_gpus=d, acceptance_top1=top1, tokens_per_s=v)
    _, data = fig01_gpu_split.make_figure(load_runs([tmp_path]))
    p = data.panels["split"]
    assert set(p.series) == {"llama3-70b / llama3.2-1b, draft top-1 0.62", "llama3-70b / llama3.2-1b, draft top-1 0.90"}
    assert p.series["llama3-70b / llama3.2-1b, draft top-1 0.90"].y == [130.0, 170.0]


def test_fig02_speedup_uses_fastest_matching_ar(tmp_path):
    make_run(tmp_path, "ar8", mode="autoregressive", target_gpus=8, draft_gpus=0, tokens_per_s=50.0,
             acceptance_scale=1.0, hit_rate=None)
    make_run(tmp_path, "ar4", mode="autoregressive", target_gpus=4, draft_gpus=0, tokens_per_s=40.0,
             acceptance_scale=1.0, hit_rate=None)
    make_run(tmp_path, "ar-pcie", mode="autoregressive", interconnect="pcie4", tokens_per_s=500.0)  # not matching
    for top1, v_async, v_serial in [(0.5, 75.0, 60.0), (0.9, 150.0, 100.0)]:  # e.g. a weak and the strong preset
        make_run(tmp_path, f"async{top1}", acceptance_top1=top1, tokens_per_s=v_async)
        make_run(tmp_path, f"serial{top1}", mode="serial_tree", acceptance_top1=top1, tokens_per_s=v_serial)
    _, data = fig02_acceptance.make_figure(load_runs([tmp_path / "ar8", tmp_path / "ar4", str(tmp_path / "*0.5"),
                                                      str(tmp_path / "*0.9")]))
    tput, speed = data.panels["tokens_per_s"], data.panels["speedup"]
    assert list(tput.series) == ["AR", "serial tree", "async tree"]
    assert tput.series["async tree"].x == [0.5, 0.9] and tput.series["async tree"].y == [75.0, 150.0]
    assert speed.series["async tree"].y == pytest.approx([1.5, 3.0])  # over the 8-GPU AR run (50 tokens/s)
    assert speed.series["serial tree"].y == pytest.approx([1.2, 2.0])
    assert "AR" not in speed.series
    assert "top-1 acceptance" in tput.xlabel and "speedup" in speed.ylabel


def test_fig02_without_ar_says_so(tmp_path):
    make_run(tmp_path, "a", tokens_per_s=10.0)
    _, data = fig02_acceptance.make_figure(load_runs([tmp_path]))
    assert data.panels["speedup"].series == {}
    assert any("no AR" in n for n in data.panels["speedup"].notes)


def test_fig03_bars_and_relative_to_nvlink(tmp_path):
    for ic, a, s in [("pcie4", 90.0, 50.0), ("nvlink", 100.0, 80.0), ("cross_node_ib", 95.0, 60.0)]:
        make_run(tmp_path, f"async-{ic}", interconnect=ic, tokens_per_s=a)
        make_run(tmp_path, f"serial-{ic}", mode="serial_tree", interconnect=ic, tokens_per_s=s)
    fig, data = fig03_interconnect.make_figure(load_runs([tmp_path]))
    tput, rel = data.panels["tokens_per_s"], data.panels["relative"]
    assert list(tput.series) == ["serial tree", "async tree"]
    assert tput.series["async tree"].x == ["nvlink", "pcie4", "cross_node_ib"]
    assert tput.series["async tree"].y == [100.0, 90.0, 95.0]
    assert rel.series["serial tree"].y == pytest.approx([1.0, 50 / 80, 60 / 80])
    assert "NVLink" in rel.ylabel
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()][0] == "NVLink 4"


def test_fig04_pairs_by_key_and_reports_bands(tmp_path):
    make_run(tmp_path, "meas-a", source="runtime", tokens_per_s=100.0)
    make_run(tmp_path, "sim-a", source="sim", tokens_per_s=104.0)  # +4%
    make_run(tmp_path, "meas-b", source="runtime", mode="serial_tree", tokens_per_s=50.0)
    make_run(tmp_path, "sim-b", source="sim", mode="serial_tree", tokens_per_s=46.0)  # -8%
    make_run(tmp_path, "sim-b-other-split", source="sim", mode="serial_tree", target_gpus=4, draft_gpus=4,
             tokens_per_s=1.0)  # different key: must not pair
    make_run(tmp_path, "meas-c", source="runtime", mode="chain", tokens_per_s=30.0)  # no simulated partner
    _, data = fig04_parity.make_figure(load_runs([tmp_path]))
    p = data.panels["parity"]
    assert p.series["async tree"].x == [100.0] and p.series["async tree"].y == [104.0]
    assert p.series["async tree"].extra["rel_error"] == pytest.approx([0.04])
    assert p.series["serial tree"].x == [50.0] and p.series["serial tree"].y == [46.0]
    assert "chain" not in p.series
    assert "1/2 within ±5%" in data.title and "2/2 within ±10%" in data.title
    assert "1 measured configs unmatched" in data.title
    assert p.xlabel.startswith("measured") and p.ylabel.startswith("simulated")


def test_fig04_pairs_on_configured_widths(tmp_path):
    """The simulator reports the resolved d and chain's effective bs/w; the runtime reports what was asked."""
    configured = {"bs": 8, "w": 8, "d": "auto"}
    make_run(tmp_path, "meas", source="runtime", mode="chain", d="auto", spec=configured, tokens_per_s=100.0)
    make_run(tmp_path, "sim", source="sim", mode="chain", bs=5, w=1, d=4, spec=configured, tokens_per_s=90.0)
    _, data = fig04_parity.make_figure(load_runs([tmp_path]))
    s = data.panels["parity"].series["chain"]
    assert (s.x, s.y) == ([100.0], [90.0]) and s.extra["rel_error"] == pytest.approx([-0.1])
    assert s.extra["key"][0]["d"] == "auto" and s.extra["key"][0]["bs"] == "8"


def test_fig04_without_measured_runs(tmp_path):
    make_run(tmp_path, "sim-a", source="sim", tokens_per_s=104.0)
    _, data = fig04_parity.make_figure(load_runs([tmp_path]))
    assert "no measured runs" in data.title
    assert data.panels["parity"].series == {}


def _timeline_traces(scale: float, rank: int = 0) -> list[TraceRecord]:
    """Prefill (iteration -1), then three iterations: expand overlaps verify, a message between them; one
    per-operator record that the timeline must leave out."""
    out = [rec("step.prefill", "target", 0.0, 0.5, -1, rank), rec("op.gemm", "target", 1.0, 0.01, 0, rank)]
    for i in range(3):
        t = 1.0 + i * 0.1 * scale
        out += [rec("step.verify", "target", t, 0.06 * scale, i, rank),
                rec("step.expand", "draft", t + 0.01 * scale, 0.03 * scale, i, rank),
                rec("step.reroot", "draft", t + 0.065 * scale, 0.005 * scale, i, rank),
                rec("msg.verified_path", "link", t + 0.06 * scale, 0.002 * scale, i, rank)]
    return out


def test_fig05_gantt_from_traces_both_sources(tmp_path):
    make_run(tmp_path, "meas", source="runtime", traces=_timeline_traces(1.0) + _timeline_traces(1.0, rank=1))
    make_run(tmp_path, "sim", source="sim", traces=_timeline_traces(2.0), iterations=iteration_rows([3, 1, 4]))
    make_run(tmp_path, "sim-untraced", source="sim", mode="chain")
    _, data = fig05_timeline.make_figure(load_runs([tmp_path]), iterations=2)
    rt, sim = data.panels["runtime"], data.panels["sim"]
    assert "no measured runs" not in data.title and "first 2 iterations" in data.title
    # Window = prefill start (t = 0) to the end of the 2nd verify; leader rank only; no op.* records.
    assert rt.series["step.prefill"].x == [0.0] and rt.series["step.prefill"].y == pytest.approx([500.0])
    assert rt.series["step.verify"].x == pytest.approx([1000.0, 1100.0])
    assert rt.series["step.verify"].y == pytest.approx([60.0, 60.0])
    assert rt.series["step.verify"].extra["row"] == ["target", "target"]
    assert rt.series["step.expand"].x == pytest.approx([1010.0, 1110.0])
    assert rt.series["step.reroot"].extra["row"] == ["draft"]  # the 2nd re-root starts after the window
    assert "op.gemm" not in rt.series
    assert sim.series["step.verify"].x == pytest.approx([1000.0, 1200.0])
    assert sim.series["step.verify"].extra["emitted"] == [3, 1]  # from iterations.csv
    assert rt.series["step.verify"].extra["emitted"] == [None, None]  # no iterations.csv
    assert sim.series["msg.verified_path"].y == pytest.approx([4.0])
    assert rt.xlabel == "time since the window start (ms)"


def test_fig05_without_measured_runs(tmp_path):
    make_run(tmp_path, "sim", source="sim", traces=_timeline_traces(1.0))
    _, data = fig05_timeline.make_figure(load_runs([tmp_path]))
    assert "no measured runs" in data.title
    assert data.panels["runtime"].series == {} and "no measured runs" in data.panels["runtime"].notes
    assert len(data.panels["sim"].series["step.verify"].x) == 3  # only 3 iterations exist


def test_fig05_measured_run_of_another_config(tmp_path):
    make_run(tmp_path, "sim", source="sim", traces=_timeline_traces(1.0))
    make_run(tmp_path, "meas", source="runtime", mode="chain", traces=_timeline_traces(1.0))
    _, data = fig05_timeline.make_figure(load_runs([tmp_path]))
    assert "(no measured run of this config)" in data.title
    assert data.panels["sim"].title == "simulated: sim" and data.panels["runtime"].series == {}


def test_fig05_needs_traces(tmp_path):
    make_run(tmp_path, "sim", source="sim")
    with pytest.raises(RunDirError, match="traces.jsonl"):
        fig05_timeline.make_figure(load_runs([tmp_path]))


def test_fig06_ablation_ladder_from_mode_and_kernel_backend(tmp_path):
    make_run(tmp_path, "ar", mode="autoregressive", tokens_per_s=20.0, hit_rate=None)
    make_run(tmp_path, "chain", mode="chain", tokens_per_s=30.0, hit_rate=None)
    make_run(tmp_path, "serial", mode="serial_tree", tokens_per_s=40.0, hit_rate=None)
    make_run(tmp_path, "async", tokens_per_s=50.0)
    make_run(tmp_path, "async-k", backend="triton", tokens_per_s=70.0)
    _, data = fig06_ablation.make_figure(load_runs([tmp_path]))
    (s,) = data.panels["ablation"].series.values()
    assert s.x == ["AR", "chain", "serial tree", "async tree", "async tree + kernels"]
    assert s.y == [20.0, 30.0, 40.0, 50.0, 70.0]
    assert s.extra["speedup"] == pytest.approx([1.0, 1.5, 2.0, 2.5, 3.5])
    assert "tokens/s" in data.panels["ablation"].ylabel


def test_fig06_needs_kernels_backend(tmp_path):
    run = make_run(tmp_path, "a")
    cfg = json.loads((run / "config.json").read_text())
    del cfg["config"]["kernels"]
    (run / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(RunDirError, match=r"a: config.json has no 'kernels.preset' \(nor an older run's "
                                          r"'kernels.backend'\)"):
        fig06_ablation.make_figure(load_runs([run]))


def test_the_kernels_backend_reads_new_and_old_run_dirs(tmp_path):
    """`Run.kernels_backend`: a run since the presets records kernels.preset (triton and graphs run the Triton
    kernels), an older one kernels.backend; fig06 puts both under "+ kernels"."""
    for preset, backend in (("reference", "reference"), ("triton", "triton"), ("graphs", "triton")):
        run = make_run(tmp_path, preset)
        cfg = json.loads((run / "config.json").read_text())
        cfg["config"]["kernels"] = {"preset": preset, "ablate": []}
        (run / "config.json").write_text(json.dumps(cfg))
        assert load_run(run).kernels_backend() == backend
    assert load_run(make_run(tmp_path, "old", backend="triton")).kernels_backend() == "triton"
    assert fig06_ablation.uses_kernels(load_run(tmp_path / "graphs"))
    assert not fig06_ablation.uses_kernels(load_run(tmp_path / "reference"))
    cfg["config"]["kernels"] = {"preset": "triton_graphs"}
    (tmp_path / "graphs" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(RunDirError, match=r"graphs: config.json kernels.preset 'triton_graphs' is not one of"):
        load_run(tmp_path / "graphs").kernels_backend()


def test_fig07_normalised_histograms_and_hit_rate(tmp_path):
    make_run(tmp_path, "async", accept_len_hist={"1": 1, "3": 3}, hit_rate=0.75, mean_accept_len=2.5)
    make_run(tmp_path, "serial", mode="serial_tree", accept_len_hist={"2": 4, "1": 4}, hit_rate=None)
    _, data = fig07_acceptance_hist.make_figure(load_runs([tmp_path]))
    hist, hit = data.panels["hist"], data.panels["hit_rate"]
    assert list(hist.series) == ["serial tree", "async tree"]  # only the mode differs, so only it is named
    assert hist.series["serial tree"].x == [1, 2] and hist.series["serial tree"].y == [0.5, 0.5]
    assert hist.series["async tree"].x == [1, 3] and hist.series["async tree"].y == [0.25, 0.75]
    assert hist.series["async tree"].extra["count"] == [1, 3]
    assert hist.series["async tree"].extra["mean_accept_len"] == [2.5, 2.5]
    assert hit.series["hit rate"].x == ["async tree"] and hit.series["hit rate"].y == [0.75]
    assert hit.notes == ["serial tree: n/a (no re-rooting)"]
    assert "acceptance length" in hist.xlabel


def test_fig07_labels_name_what_differs(tmp_path):
    make_run(tmp_path, "a", target_gpus=7, draft_gpus=1, acceptance_scale=0.5)
    make_run(tmp_path, "b", target_gpus=6, draft_gpus=2, acceptance_scale=0.5)
    make_run(tmp_path, "c", target_gpus=6, draft_gpus=2, acceptance_scale=1.0)
    _, data = fig07_acceptance_hist.make_figure(load_runs([tmp_path]))
    assert list(data.panels["hist"].series) == ["async tree, 7:1 GPUs, acceptance x0.5",  # run dir order
                                                "async tree, 6:2 GPUs, acceptance x0.5",
                                                "async tree, 6:2 GPUs, acceptance x1.0"]


def test_fig07_method_names_kernels_and_skips_ar(tmp_path):
    make_run(tmp_path, "ar", mode="autoregressive", accept_len_hist={"1": 9}, hit_rate=None)
    make_run(tmp_path, "ref", accept_len_hist={"2": 1}, hit_rate=0.5)
    make_run(tmp_path, "tri", backend="triton", accept_len_hist={"3": 1}, hit_rate=0.25)
    _, data = fig07_acceptance_hist.make_figure(load_runs([tmp_path]))
    hist = data.panels["hist"]
    assert list(hist.series) == ["async tree", "async tree + kernels"]
    assert hist.series["async tree + kernels"].x == [3]
    assert data.panels["hit_rate"].series["hit rate"].y == [0.5, 0.25]
    assert hist.notes == ["1 autoregressive runs left out"]
    with pytest.raises(RunDirError, match="all 1 runs are autoregressive"):
        fig07_acceptance_hist.make_figure(load_runs([tmp_path / "ar"]))


def test_fig07_rejects_bad_histogram(tmp_path):
    make_run(tmp_path, "bad", accept_len_hist={"0": 3})
    with pytest.raises(RunDirError, match="bad: metrics.json accept_len_hist"):
        fig07_acceptance_hist.make_figure(load_runs([tmp_path]))


def test_missing_metric_names_folder_and_key(tmp_path):
    run = make_run(tmp_path, "run-x")
    m = json.loads((run / "metrics.json").read_text())
    del m["tokens_per_s"]
    (run / "metrics.json").write_text(json.dumps(m))
    with pytest.raises(RunDirError, match=r"run-x: metrics.json has no key 'tokens_per_s'"):
        fig01_gpu_split.make_figure(load_runs([run]))


def test_bad_run_dirs_give_clear_errors(tmp_path):
    with pytest.raises(RunDirError, match="nothing matches"):
        find_run_dirs([tmp_path / "does-not-exist"])
    with pytest.raises(RunDirError, match="nothing matches"):
        find_run_dirs([str(tmp_path / "nope-*")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunDirError, match=r"empty: no run dir \(config.json \+ metrics.json\)"):
        find_run_dirs([tmp_path / "empty"])
    half = make_run(tmp_path / "sweep", "half")
    (half / "config.json").unlink()
    with pytest.raises(RunDirError, match=r"half: not a complete run dir, config.json is missing"):
        find_run_dirs([tmp_path / "sweep"])
    torn = make_run(tmp_path, "torn")
    (torn / "metrics.json").write_text("{not json")
    with pytest.raises(RunDirError, match=r"torn/metrics.json: not valid JSON"):
        load_run(torn)


def test_find_run_dirs_walks_sweeps_and_globs(tmp_path):
    a = make_run(tmp_path / "sweep", "0_a")
    b = make_run(tmp_path / "sweep", "1_b")
    (tmp_path / "sweep" / ".hydra").mkdir()
    (tmp_path / "sweep" / ".hydra" / "config.json").write_text("{}")  # hidden folders are not runs
    assert find_run_dirs([tmp_path / "sweep"]) == [a, b]
    assert find_run_dirs([str(tmp_path / "sweep" / "*_b"), a]) == [b, a]
    assert find_run_dirs([str(tmp_path / "**" / "metrics.json")]) == [a, b]
    run = load_run(a)
    assert run.number("tokens_per_s") == 64.0 and run.setting("kernels.backend") == "reference"
    assert run.key() == ("async_tree", "llama3-70b_llama3.2-1b", "6", "2", "8", "8", "auto")


def test_save_figure_writes_png_and_pdf(tmp_path):
    make_run(tmp_path, "a")
    fig, _ = fig06_ablation.make_figure(load_runs([tmp_path]))
    paths = save_figure(fig, tmp_path / "out" / "fig")
    assert [p.name for p in paths] == ["fig.png", "fig.pdf"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[1].read_bytes()[:5] == b"%PDF-"
    assert not list((tmp_path / "out").glob(".*tmp"))  # no temporary files left behind


def test_cli_writes_figure_and_data_and_fails_cleanly(tmp_path):
    make_run(tmp_path / "runs", "a", accept_len_hist={"2": 1})
    out = tmp_path / "figs" / "fig07"
    script = str(REPO / "analysis" / "fig07_acceptance_hist.py")
    ok = subprocess.run([sys.executable, script, str(tmp_path / "runs"), "--out", str(out)],
                        capture_output=True, text=True, cwd=REPO, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout.strip().splitlines()[-1])["runs"] == 1
    saved = json.loads(out.with_suffix(".json").read_text())
    assert saved["panels"]["hist"]["series"]["async tree"]["y"] == [1.0]
    assert out.with_suffix(".png").is_file() and out.with_suffix(".pdf").is_file()
    bad = subprocess.run([sys.executable, script, str(tmp_path / "missing"), "--out", str(out)],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert bad.returncode == 2 and "missing: no such run dir" in bad.stderr and "Traceback" not in bad.stderr
