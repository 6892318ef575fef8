"""Calibration (simulator/calibrate.py, calibrate.py): fit round trip, profile effect, trace-file errors.

The round-trip tests use a SYNTHETIC trace: every operator time is the simulator's analytic roofline prior
(cost_model.Operators without a profile) times seeded log-normal noise (sigma 3%), over the shapes
calibration/profile_ops.py sweeps; whole-step records add a known step overhead. It checks the fitting machinery
(NNLS in relative error, held-out split, step residual), not the hardware. The recorded-trace test
(`test_recorded_trace_round_trip`) runs the same check on data/measured/profile_traces_*.jsonl from the
GPU profiler when such a file exists, and is skipped otherwise.
"""

from __future__ import annotations

import glob
import json
import math
from pathlib import Path

import numpy as np
import pytest

from conf.calibrate_schema import CalibrateConfig, build_calibrate_config
from conf.presets import GPU_PRESETS, LINK_PRESETS, model_preset
from conf.rundir import MEASURED_DIR
from conf.schema import HardwareConfig
from conf.trace import TraceRecord, write_traces
from simulator.calibrate import GRAPH_ROLES, CalibrationOptions, calibrate, nnls
from simulator.cost_model import (
    GraphKernels,
    GroupCost,
    Operators,
    StepDesc,
    attention_terms,
    forward_breakdown,
    kernels_per_step,
    layer_matrices,
    lm_head_matrix,
)
from simulator.interconnect import message_bytes
from simulator.profile import load_profile, write_profile
from simulator.simulation import build_costs, simulate
from simulator.trace_reader import TraceFileError, read_traces, resolve_trace_paths
from tests.simulator.conftest import cfg

REPO = Path(__file__).resolve().parents[2]
NOISE_SIGMA = 0.03
STEP_A_S, STEP_B_S = 6.0e-5, 2.5e-6  # the synthetic step overhead: a + b * num_kernels
PRESETS = ("llama3-8b", "llama3.2-1b", "llama3-70b", "smollm2-135m", "smollm2-draft")
# Held-out bounds the fit must meet on the synthetic trace (noise alone gives ~2.4% mean |error|). The GEMM and
# attention priors are max(bytes / bandwidth, flops / FLOP/s), not exactly the fitted sum. Attention is looser:
# the prior's FLOPs scale with the head count, which the profile's feature tokens * kv_len does not carry, so
# one coefficient cannot serve GQA shapes from 3 to 64 query heads (measured 11.7% at seed 3).
SYNTHETIC_MAPE_BOUND = {"gemm": 0.06, "attention": 0.15, "allreduce": 0.06, "message": 0.06, "message_unix": 0.06,
                        "step_overhead": 0.06}
# Held-out bounds on a recorded H200 trace: the stated accuracy of the fitted profile per operator.
RECORDED_MAPE_BOUND = {"gemm": 0.20, "attention": 0.30, "allreduce": 0.30, "message": 0.30, "message_unix": 0.30,
                       "step_overhead": 0.30, "gemm_graph": 0.15, "attention_graph": 0.20, "step_overhead_graph": 0.10,
                       "gemm_fp8": 0.30}


def _prior() -> Operators:
    link = LINK_PRESETS["nvlink4"]
    return Operators(GPU_PRESETS["h200"], link, "oneshot", link, 2.0e-5, 3.0e-5, False)


def synthetic_records(seed: int = 0) -> list[TraceRecord]:
    """Operator records in profile_ops.py's format, timed by the analytic prior x log-normal noise."""
    rng = np.random.default_rng(seed)
    ops = _prior()
    out: list[TraceRecord] = []

    def rec(name: str, seconds: float, tp: int = 1, tokens: int = 0, ctx: int = 0, **extra) -> None:
        noisy = seconds * math.exp(rng.normal(0.0, NOISE_SIGMA))
        out.append(TraceRecord(name=name, shapes="", tp=tp, ctx=ctx, device="synthetic", start_s=0.0,
                               duration_s=noisy, run_id="synthetic", tokens=tokens, extra=json.dumps(extra)))

    for preset in PRESETS:
        shape = model_preset(preset)
        for tp in (1, 2, 4, 8):
            if tp > shape.num_heads:
                continue
            mats = [(n, k, nn) for n, k, nn in layer_matrices(shape, tp)] + [("lm_head", *lm_head_matrix(shape, tp))]
            for _, k, n in mats:
                for m in (1, 4, 16, 64):
                    wb, fl = 2.0 * k * n, 2.0 * m * k * n
                    rec("op.gemm", ops.gemm_s(wb, fl, tp), tp, m, weight_bytes=wb, flops=fl)
            for t in (1, 8, 64):
                for ctx in (256, 4096, 16384):
                    kv_bytes, flops = attention_terms(shape, tp, t, ctx + t)
                    rec("op.attention", ops.attention_s(kv_bytes, flops, t, ctx + t, tp), tp, t, ctx,
                        kv_bytes=kv_bytes, kv_len=ctx + t, flops=flops)
    for nbytes in (16, 1024, 65536, 1 << 20, 16 << 20):  # as profile_ops.py: eager and inside a CUDA graph
        rec("op.allreduce", ops.allreduce_s(nbytes, 2) + 3.5e-5, 2, bytes=nbytes, mode="eager")
        rec("op.allreduce", ops.allreduce_s(nbytes, 2), 2, bytes=nbytes, mode="graph", calls_per_graph=10)
    for nodes in (4, 16, 64, 256, 1024):
        rec("op.message", ops.message_s(message_bytes(nodes), 1), bytes=message_bytes(nodes))
        rec("op.message", ops.message_s(message_bytes(nodes), 1, "unix"), bytes=message_bytes(nodes),
            transport="runtime.unix_channel.UnixLeaderChannel")  # calibration/profile_comm.py, leaders on one host
    for preset in PRESETS:
        shape = model_preset(preset)
        for kind, tokens in (("verify", 1), ("verify", 8), ("verify", 16), ("expand", 4), ("expand", 8)):
            for ctx in (256, 1024):
                parts = forward_breakdown(ops, shape, 16, StepDesc(tokens, ctx + tokens, 1), True)
                step = parts["gemm"] + parts["attention"] + parts["allreduce"]
                step += STEP_A_S + STEP_B_S * kernels_per_step(shape, 1, True)
                rec("op.step_overhead", step, 1, tokens, ctx, kind=kind, preset=preset, kv_len=ctx + tokens,
                    backend="triton")
    rec("op.compaction", 5e-6, bytes=1 << 20, impl="keep", kept=4)
    rec("op.compaction", 9e-6, bytes=8 << 20, impl="keep", kept=32)
    rec("op.compaction", 2e-5, bytes=32 << 20, impl="keep", kept=128)
    for kind, s in (("select", 4e-5), ("reroot", 1.5e-4)):
        for _ in range(3):
            rec("op.tree_op", s, kind=kind)
    return out


@pytest.fixture(scope="module")
def synthetic_trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "profile_traces_synthetic.jsonl"
    write_traces(path, synthetic_records())
    return path


def test_nnls_matches_known_solution_and_stays_non_negative():
    rng = np.random.default_rng(1)
    a = rng.random((30, 3)) * np.array([1.0, 1e6, 1e12])
    want = np.array([2e-6, 3e-12, 0.0])
    got = nnls(a, a @ want)
    assert np.allclose(got, want, rtol=1e-6, atol=1e-20)
    # b pulling one coefficient negative: the constrained optimum clamps it at 0
    got = nnls(np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]]), np.array([3.0, 2.0, 1.0]))
    assert got[1] == 0.0 and got[0] == pytest.approx(2.0)


def test_fit_on_half_predicts_other_half_synthetic(synthetic_trace):
    """Fitting on a seeded half of each operator's rows predicts the held-out half within the stated bound."""
    ts = read_traces([synthetic_trace])
    profile, report = calibrate(ts, CalibrationOptions(holdout_fraction=0.5, seed=3))
    assert set(profile.operators) == set(SYNTHETIC_MAPE_BOUND)
    for op, bound in SYNTHETIC_MAPE_BOUND.items():
        err = report["operators"][op]
        assert err["num_holdout"] >= 2, op
        assert err["mape"] <= bound, f"{op}: held-out MAPE {err['mape']:.3f} > {bound}"
        assert all(c >= 0 for c in profile.operators[op].coefficients)
    # the step residual recovers the synthetic overhead's per-kernel slope (the intercept trades off a little)
    a, b = profile.operators["step_overhead"].coefficients
    assert b == pytest.approx(STEP_B_S, rel=0.15)
    # the tree bookkeeping time (the profile's tree_op_s) and report-only diagnostics
    assert profile.tree_op_s == pytest.approx(4e-5 + 1.5e-4, rel=0.2)
    assert "keep" in report["diagnostics"]["compaction"]


GRAPH_GEMM = (1.5e-6, 2.4e-13, 8.0e-16)  # the synthetic in-graph operators' coefficients (gemm_graph form)
GRAPH_ATTN = (4.0e-6, 7.0e-13, 1.5e-10)
GRAPH_OTHER_B = 0.8e-6  # per kernel of the small kernels' exposed time


def graph_step_records(seed: int = 0, noise: float = 0.0) -> list[TraceRecord]:
    """op.step_graph records (calibration/profile_steps.py's format) whose class times follow known coefficients."""
    from simulator.cost_model import step_operator_features

    rng = np.random.default_rng(seed)
    out = []
    for preset in PRESETS:
        shape = model_preset(preset)
        for kind, tokens in (("verify", 1), ("verify", 8), ("expand", 4), ("expand", 16)):
            for ctx in (200, 970):
                feats = step_operator_features(shape, 16, StepDesc(tokens, ctx + tokens, 1))
                times = {"gemm_s": float(np.dot(GRAPH_GEMM, feats["gemm_graph"])),
                         "attention_s": float(np.dot(GRAPH_ATTN, feats["attention_graph"])),
                         "other_s": GRAPH_OTHER_B * kernels_per_step(shape, 1, True)}
                times = {k: v * math.exp(rng.normal(0.0, noise)) for k, v in times.items()}
                out.append(TraceRecord(name="op.step_graph", shapes="", tp=1, ctx=ctx, device="synthetic",
                                       start_s=0.0, duration_s=sum(times.values()), run_id="synthetic",
                                       tokens=tokens, extra=json.dumps({"kind": kind, "preset": preset,
                                                                        "kv_len": ctx + tokens, "backend": "triton",
                                                                        "kernels": 100, **times})))
    return out


def test_graph_steps_fit_in_graph_operators_and_a_device_step_overhead(synthetic_trace, tmp_path):
    """op.step_graph records (per-class exposed time of captured steps) give gemm_graph and attention_graph (one row
    per step, summed call features) and, device only, step_overhead; the host-timed steps are then left to the
    runtime block. Exact records recover the coefficients; `step_overhead_from=host` keeps the old fit."""
    path = tmp_path / "graphs.jsonl"
    write_traces(path, synthetic_records() + graph_step_records())
    ts = read_traces([path])
    assert len(ts.graph_steps) == len(PRESETS) * 8
    profile, report = calibrate(ts, CalibrationOptions(holdout_fraction=0.3, seed=1,
                                                       graph_operators=("gemm_graph", "attention_graph")))
    for op, want in (("gemm_graph", GRAPH_GEMM), ("attention_graph", GRAPH_ATTN)):
        assert profile.operators[op].coefficients == pytest.approx(want, rel=1e-6), op
        assert report["operators"][op]["mape"] < 1e-9 and report["operators"][op]["max_tokens"] == 16
    assert report["operators"]["step_overhead"]["source"] == "graph"
    assert profile.operators["step_overhead"].coefficients == pytest.approx((0.0, GRAPH_OTHER_B), abs=1e-12)
    host, host_report = calibrate(ts, CalibrationOptions(step_overhead_from="host", graph_operators=()))
    assert "gemm_graph" not in host.operators and host_report["operators"]["step_overhead"]["source"] == "host"
    assert host.operators["step_overhead"].coefficients[1] == pytest.approx(STEP_B_S, rel=0.15)
    # no op.step_graph records: auto fits the host-timed steps, as before
    _, plain = calibrate(read_traces([synthetic_trace]), CalibrationOptions())
    assert plain["operators"]["step_overhead"]["source"] == "host" and "attention_graph" in plain["skipped"]
    # the written profile round-trips with the new operators
    write_profile(tmp_path / "p.json", profile)
    assert load_profile(tmp_path / "p.json").operators.keys() == profile.operators.keys()


GRAPH_SMALL = (2.0e-6, 1.8e-6, 3.6e-6, 2.7e-10)  # the synthetic step_overhead_graph coefficients


def test_graph_steps_fit_step_overhead_graph_on_the_counted_small_kernels(tmp_path):
    """step_overhead_graph is fitted on the small kernels' exposed time against the kernels the simulator counts for
    each captured step (GraphKernels: verify -> target, expand -> draft): exact records recover its coefficients,
    the report breaks the fit down by kind and preset, and a record whose recorded launches differ from the count is
    listed (`kernel_count_mismatches`)."""
    from simulator.cost_model import GraphKernels
    from simulator.profile import step_overhead_graph_features

    records = []
    for rec in graph_step_records():
        extra = json.loads(rec.extra)
        shape = model_preset(extra["preset"])
        role = GRAPH_ROLES[extra["kind"]]
        small, rope = GraphKernels(role).counts(shape, rec.tokens)
        extra["other_s"] = float(np.dot(GRAPH_SMALL, step_overhead_graph_features(small, rope, shape.hidden_size)))
        extra["other_calls"] = small + rope
        records.append(TraceRecord(**{**rec.to_dict(), "extra": json.dumps(extra)}))
    odd = json.loads(records[0].extra)
    odd["other_calls"] += 3
    records.append(TraceRecord(**{**records[0].to_dict(), "extra": json.dumps(odd)}))
    path = tmp_path / "graphs.jsonl"
    write_traces(path, synthetic_records() + records)
    ops = ("attention_graph", "step_overhead_graph")
    profile, report = calibrate(read_traces([path]), CalibrationOptions(holdout_fraction=0.3, seed=1,
                                                                        graph_operators=ops))
    assert profile.operators["step_overhead_graph"].coefficients == pytest.approx(GRAPH_SMALL, rel=1e-6)
    fit = report["operators"]["step_overhead_graph"]
    assert fit["mape"] < 1e-9 and set(fit["by_kind"]) == {"verify", "expand"} and set(fit["by_preset"]) == set(PRESETS)
    first = json.loads(records[0].extra)
    assert fit["kernel_count_mismatches"] == [{"preset": first["preset"], "kind": first["kind"],
                                               "tokens": records[0].tokens, "counted": first["other_calls"],
                                               "recorded": first["other_calls"] + 3}]
    # the step_overhead of prefills is still fitted on the same records; left out of graph_operators: not fitted
    assert report["operators"]["step_overhead"]["source"] == "graph"
    plain, _ = calibrate(read_traces([path]), CalibrationOptions(graph_operators=("attention_graph",)))
    assert "step_overhead_graph" not in plain.operators
    write_profile(tmp_path / "p.json", profile)
    assert load_profile(tmp_path / "p.json").operators["step_overhead_graph"].coefficients == pytest.approx(GRAPH_SMALL)


def test_a_bad_step_graph_record_names_file_line_and_field(tmp_path):
    rec = graph_step_records()[0].to_dict()
    extra = json.loads(rec["extra"])
    del extra["attention_s"]
    p = _write_lines(tmp_path / "g.jsonl", [json.dumps({**rec, "extra": json.dumps(extra)})])
    with pytest.raises(TraceFileError, match=r"g\.jsonl:1: op\.step_graph record lacks extra fields \['attention_s'\]"):
        read_traces([p])
    p = _write_lines(tmp_path / "g2.jsonl", [json.dumps({**rec, "tokens": 0})])
    with pytest.raises(TraceFileError, match=r"g2\.jsonl:1: op\.step_graph needs duration_s > 0 and tokens >= 1"):
        read_traces([p])


def test_calibrated_profile_loads_and_changes_simulator_predictions(synthetic_trace, tmp_path):
    # the synthetic steps are eager: fit the eager all-reduce timings too (the default fits those in CUDA graphs)
    config = CalibrateConfig(traces=[str(synthetic_trace)], output=str(tmp_path / "h200.json"),
                             hardware=HardwareConfig(gpu="h200"), holdout_fraction=0.3, allreduce_mode="eager")
    import calibrate as entry

    summary = entry.run(build_calibrate_config(config))
    prof = load_profile(summary["profile"])
    assert set(prof.operators) == set(SYNTHETIC_MAPE_BOUND)
    assert prof.hardware == {"gpu": "h200", "intra_group": "nvlink4", "cross_group": "nvlink4"}
    assert "calibrate_git_sha" in prof.software
    assert json.loads(Path(summary["report"]).read_text())["operators"]["gemm"]["num_samples"] > 0

    overrides = ("model=llama3-8b_llama3.2-1b", "parallel=1x1", "sim=analytic", "workload.num_requests=1",
                 "workload.prompt_tokens=512", "workload.max_new_tokens=64")
    analytic = simulate(cfg(*overrides, "kernels=graphs"))
    # the profile's overheads were fitted from eager steps: compare it in an eager (no-graph) config
    fitted = simulate(cfg(*overrides, "kernels=triton", f"sim.profile={summary['profile']}"))
    assert fitted.costs.source.startswith("profile:") and "analytic" not in fitted.costs.source
    tps_a = analytic.tally.generated_tokens / analytic.tally.wall_s
    tps_f = fitted.tally.generated_tokens / fitted.tally.wall_s
    assert tps_f != pytest.approx(tps_a, rel=1e-3)
    # the synthetic step overhead (60 us + 2.5 us per kernel) exceeds the prior's (simulate.yaml: triton kernels in
    # CUDA graphs, 30 us + 2 us per kernel), so a fitted single-token step is slower than the analytic one
    target = fitted.costs.target
    assert target.forward_s(1, 600) > analytic.costs.target.forward_s(1, 600)


def test_allreduce_fit_applies_only_to_runs_of_its_mode(synthetic_trace, tmp_path):
    """The default calibration fits the all-reduce timed inside CUDA graphs: a graph config uses it, an eager
    config keeps the prior (and an eager fit serves eager configs only)."""
    import calibrate as entry

    overrides = ("model=llama3-8b_llama3.2-1b", "parallel=2x0", "spec=autoregressive", "sim=analytic",
                 "workload.num_requests=1", "workload.prompt_tokens=64", "workload.max_new_tokens=4")
    for mode, served, other in (("graph", "kernels=graphs", "kernels=triton"),
                                ("eager", "kernels=triton", "kernels=graphs")):
        out = tmp_path / f"{mode}.json"
        summary = entry.run(build_calibrate_config(CalibrateConfig(
            traces=[str(synthetic_trace)], output=str(out), hardware=HardwareConfig(gpu="h200"), allreduce_mode=mode)))
        assert load_profile(summary["profile"]).software["allreduce_impl"] == f"nccl {mode}"
        assert build_costs(cfg(*overrides, served, f"sim.profile={out}")).target.ops.sources["allreduce"] == "profile"
        assert build_costs(cfg(*overrides, other, f"sim.profile={out}")).target.ops.sources["allreduce"] == "analytic"


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _good_line() -> str:
    return json.dumps(TraceRecord(name="op.gemm", shapes="1x64,64x64", tp=1, ctx=0, device="x", start_s=0.0,
                                  duration_s=1e-5, run_id="r", tokens=1,
                                  extra=json.dumps({"weight_bytes": 8192, "flops": 8192})).to_dict())


def test_bad_trace_files_name_file_and_line(tmp_path):
    p = _write_lines(tmp_path / "bad_json.jsonl", [_good_line(), "{not json"])
    with pytest.raises(TraceFileError, match=r"bad_json\.jsonl:2: not JSON"):
        read_traces([p])
    rec = json.loads(_good_line())
    rec["extra"] = json.dumps({"weight_bytes": 8192})
    p = _write_lines(tmp_path / "missing.jsonl", [_good_line(), _good_line(), json.dumps(rec)])
    with pytest.raises(TraceFileError, match=r"missing\.jsonl:3: op\.gemm record lacks extra fields \['flops'\]"):
        read_traces([p])
    rec = json.loads(_good_line())
    rec["bogus"] = 1
    p = _write_lines(tmp_path / "unknown.jsonl", [json.dumps(rec)])
    with pytest.raises(TraceFileError, match=r"unknown\.jsonl:1: unknown fields \['bogus'\]"):
        read_traces([p])
    rec = json.loads(_good_line())
    rec["extra"] = json.dumps({"weight_bytes": -1, "flops": 1})
    p = _write_lines(tmp_path / "negative.jsonl", [json.dumps(rec)])
    with pytest.raises(TraceFileError, match=r"negative\.jsonl:1: extra\.weight_bytes: needs a finite number"):
        read_traces([p])
    rec = json.loads(_good_line())
    rec["name"], rec["extra"] = "op.step_overhead", json.dumps({"kind": "verify", "preset": "nope", "kv_len": 9,
                                                                "backend": "triton"})
    p = _write_lines(tmp_path / "preset.jsonl", [json.dumps(rec)])
    with pytest.raises(TraceFileError, match=r"preset\.jsonl:1: extra\.preset: unknown model preset 'nope'"):
        read_traces([p])
    with pytest.raises(FileNotFoundError, match="matches no trace file"):
        resolve_trace_paths([str(tmp_path / "none_*.jsonl")])


def test_fp8_gemm_records_fit_their_own_operator(tmp_path):
    """op.gemm records with weight_bits 8 (profile_ops' gemm_fp8 section) fit `gemm_fp8` and leave the 16-bit `gemm`
    fit as it was; a weight_bits other than 8 or 16 names the file, line and field."""
    rng = np.random.default_rng(5)
    coef = {16: (3e-6, 2.5e-13, 1e-15), 8: (6e-6, 4.0e-13, 3e-15)}
    recs = []
    mats = (("qkv", 2048, 3072), ("gate_up", 2048, 16384), ("down", 8192, 2048), ("qkv", 4096, 6144),
            ("gate_up", 576, 1536))
    for bits, (a, b, c) in coef.items():
        for name, k, n in mats:
            for m in (1, 4, 16, 64):
                wb = k * n + 4.0 * n if bits == 8 else 2.0 * k * n
                fl = 2.0 * m * k * n
                extra = {"weight_bytes": wb, "flops": fl, "matrix": name, "k": k, "n": n, "m": m} | (
                    {"weight_bits": 8} if bits == 8 else {})
                recs.append(TraceRecord(name="op.gemm", shapes="", tp=1, ctx=0, device="x", start_s=0.0,
                                        duration_s=(a + b * wb + c * fl) * math.exp(rng.normal(0, 0.01)),
                                        run_id="t", tokens=m, extra=json.dumps(extra)))
    path = tmp_path / "fp8.jsonl"
    write_traces(path, recs)
    ts = read_traces([str(path)])
    assert len(ts.samples["gemm"]) == len(ts.samples["gemm_fp8"]) == 20
    profile, report = calibrate(ts, CalibrationOptions())
    for op, bits in (("gemm", 16), ("gemm_fp8", 8)):
        assert report["operators"][op]["mape"] < 0.02
        got = profile.operators[op]
        for wb, fl in ((2048 * 3072 * 2.0, 2.0 * 2048 * 3072), (8192 * 2048 * 2.0, 64 * 2.0 * 8192 * 2048)):
            a, b, c = coef[bits]
            assert got.predict((1.0, wb, fl), 1) == pytest.approx(a + b * wb + c * fl, rel=0.03)
    # the fp8 shapes' measured times go along (one M per record here: the measured times are the records')
    assert profile.operators["gemm"].measured == {}
    fp8 = profile.operators["gemm_fp8"].measured
    assert set(fp8) == set(mats)
    assert [m for m, _ in fp8[("qkv", 2048, 3072)]] == [1, 4, 16, 64]
    first = next(r for r in recs if '"weight_bits": 8' in r.extra)
    assert fp8[("qkv", 2048, 3072)][0][1] == first.duration_s
    assert report["operators"]["gemm_fp8"]["measured_shapes"] == 5
    write_profile(tmp_path / "p.json", profile)
    assert load_profile(tmp_path / "p.json").operators["gemm_fp8"] == profile.operators["gemm_fp8"]
    bad = json.loads(_good_line())
    bad["extra"] = json.dumps({"weight_bytes": 8192, "flops": 1, "weight_bits": 4})
    p = _write_lines(tmp_path / "bits.jsonl", [json.dumps(bad)])
    with pytest.raises(TraceFileError, match=r"bits\.jsonl:1: op\.gemm extra\.weight_bits must be 8 or 16, got 4"):
        read_traces([p])


def test_trace_without_operator_records_is_a_clear_error(tmp_path):
    rec = TraceRecord(name="step.verify", shapes="", tp=1, ctx=0, device="x", start_s=0.0, duration_s=1e-3,
                      run_id="r")
    p = tmp_path / "runtime_only.jsonl"
    write_traces(p, [rec])
    with pytest.raises(ValueError, match=r"no operator has >= 3 usable samples .*step\.verify"):
        calibrate(read_traces([p]), CalibrationOptions())


def test_calibrate_yaml_composes_and_validates():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from conf.calibrate_schema import register_calibrate_config

    register_calibrate_config()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        raw = compose(config_name="calibrate", overrides=["traces=[a.jsonl]", "holdout_fraction=0.5"])
    config = build_calibrate_config(raw)
    assert config.traces == ["a.jsonl"] and config.hardware.gpu == "h200" and config.holdout_fraction == 0.5
    bad = CalibrateConfig(traces=["a.jsonl"], allreduce_mode="magic")
    with pytest.raises(ValueError, match="allreduce_mode"):
        bad.validate()
    with pytest.raises(ValueError, match="traces"):
        CalibrateConfig().validate()
    with pytest.raises(ValueError, match=r"graph_operators: \['gemm'\] must be a subset"):
        CalibrateConfig(traces=["a.jsonl"], graph_operators=["gemm"]).validate()
    with pytest.raises(ValueError, match="step_overhead_from: 'device' is not one of auto, graph, host"):
        CalibrateConfig(traces=["a.jsonl"], step_overhead_from="device").validate()


def _recorded_date(path: str) -> str:
    """A recorded trace's date from its meta file (ISO, sorts in time), else its name's: file names end in a
    commit SHA, which does not sort in time."""
    meta = Path(path).with_suffix(".meta.json")
    if meta.is_file():
        return str(json.loads(meta.read_text()).get("date", ""))
    return Path(path).stem


def _record_counts(path: str) -> dict:
    meta = Path(path).with_suffix(".meta.json")
    return json.loads(meta.read_text()).get("record_counts", {}) if meta.is_file() else {}


_TRACES = sorted(glob.glob(str(MEASURED_DIR / "profile_traces_*.jsonl")), key=_recorded_date)
RECORDED = [t for t in _TRACES if {"op.gemm", "op.attention"} <= set(_record_counts(t)) or not _record_counts(t)]
"""Whole calibration traces (a steps-only trace of `profile_ops.py --only steps,step_graphs` is not one, nor a
GEMM-only one of `--only gemm` / `--only gemm_fp8`; the oldest traces' meta files have no record counts)."""
RECORDED_FP8 = [t for t in _TRACES if Path(t).stem.endswith(("gemm_fp8", "gemm_fp8_swept"))]
"""Traces of profile_ops' gemm_fp8 section."""
RECORDED_GRAPHS = [t for t in _TRACES if "op.step_graph" in _record_counts(t)]


def test_recorded_trace_round_trip(tmp_path):
    """Fit on half of the latest recorded H200 trace, predict the other half within RECORDED_MAPE_BOUND."""
    ts = read_traces([RECORDED[-1]])
    profile, report = calibrate(ts, CalibrationOptions(holdout_fraction=0.5, seed=0))
    assert profile.operators, "the recorded trace gave no operator fit"
    for op, r in report["operators"].items():
        assert r["mape"] <= RECORDED_MAPE_BOUND[op], f"{op}: held-out MAPE {r['mape']:.3f}"
    write_profile(tmp_path / "p.json", profile)
    assert load_profile(tmp_path / "p.json").operators.keys() == profile.operators.keys()


def test_recorded_fp8_trace_keeps_every_profiled_matrix(tmp_path):
    """The latest recorded fp8 GEMM trace: gemm_fp8 fitted (held-out MAPE within its bound, 2026-12-02: 23.7-24.9%),
    and every record's matrix kept among the measured shapes, which reproduce each (matrix, k, n, M)'s median."""
    ts = read_traces([RECORDED_FP8[-1]])
    rows = ts.samples["gemm_fp8"]
    assert rows and "gemm" not in ts.samples
    profile, report = calibrate(ts, CalibrationOptions())
    assert report["operators"]["gemm_fp8"]["mape"] <= RECORDED_MAPE_BOUND["gemm_fp8"]
    fit = profile.operators["gemm_fp8"]
    by: dict = {}
    for s in rows:
        by.setdefault((s.extra["matrix"], s.extra["k"], s.extra["n"], s.extra["m"]), []).append(s.seconds)
    assert {key[:3] for key in by} == set(fit.measured)
    for (name, k, n, m), seconds in by.items():
        assert fit.at_shape(name, k, n, m) == pytest.approx(float(np.median(seconds)))


def test_recorded_step_graphs_fit_the_captured_steps(tmp_path):
    """The in-graph operators and the device-side step overhead, fitted on half of the latest recorded step_graphs
    trace (with the latest whole trace's standalone operators), predict the other half within the stated bounds,
    and the captured steps' spans within 10% on average (RECORDED_MAPE_BOUND; measured 2026-12-01, f7aec85 trace:
    gemm_graph 6.5%, attention_graph 10.9%, step_overhead 20.1%, step_overhead_graph 5.2%, spans 5.8% with the
    standalone GEMM fit and step_overhead)."""
    ts = read_traces([RECORDED[-1], RECORDED_GRAPHS[-1]])
    assert len(ts.graph_steps) >= 10
    profile, report = calibrate(ts, CalibrationOptions(holdout_fraction=0.3, seed=0, graph_operators=(
        "gemm_graph", "attention_graph", "step_overhead_graph")))
    assert report["operators"]["step_overhead"]["source"] == "graph"
    for op in ("gemm_graph", "attention_graph", "step_overhead", "step_overhead_graph"):
        assert report["operators"][op]["mape"] <= RECORDED_MAPE_BOUND[op], op
    assert report["operators"]["step_overhead_graph"]["kernel_count_mismatches"] == []
    link = LINK_PRESETS["nvlink4"]
    for graph_ops in (("gemm_graph", "attention_graph"), ("attention_graph",),
                      ("attention_graph", "step_overhead_graph")):
        prof, _ = calibrate(ts, CalibrationOptions(graph_operators=graph_ops))
        ops = Operators(GPU_PRESETS["h200"], link, "oneshot", link, 0.0, 0.0, True, prof, "nvlink4", "nvlink4")
        errors = []
        for s in ts.graph_steps:
            kernels = GraphKernels(GRAPH_ROLES[str(s.extra["kind"])])
            cost = GroupCost(ops, model_preset(str(s.extra["preset"])), 16, 1, kernels=kernels)
            errors.append(abs(sum(cost.breakdown(s.tokens, int(s.extra["kv_len"])).values()) / s.seconds - 1))
        assert float(np.mean(errors)) <= 0.10, (graph_ops, float(np.mean(errors)))


def test_calibrate_runs_fit_the_runtime_block_and_validation_leaves_them_out(synthetic_trace, tmp_path):
    """calibrate.py runs=[...] writes the profile's `runtime` block and lists the runs in the report;
    calibration/validate.py compare then leaves those configurations out of the validation table."""
    import calibrate as entry
    from calibration.validate import main as validate_main
    from simulator.main import run as run_sim

    base = ("model=llama3-8b_llama3.2-1b", "parallel=1x1", "kernels=triton", "sim=analytic", "workload.num_requests=1",
            "workload.prompt_tokens=512", "workload.max_new_tokens=32", "trace.chrome=false")
    runs = tmp_path / "runs"
    for name, mode in (("fit_async", "async_tree"), ("val_serial", "serial_tree"), ("val_ar", "autoregressive")):
        run_sim(cfg(*base, f"spec={mode}"), runs / name, verbose=False)
    config = CalibrateConfig(traces=[str(synthetic_trace)], output=str(tmp_path / "h200.json"),
                             hardware=HardwareConfig(gpu="h200"), runs=[str(runs / "fit_async")])
    summary = entry.run(build_calibrate_config(config))
    prof = load_profile(summary["profile"])
    # a simulator run dir has step spans (single-forward expand spans among them) but no message or re-root
    # spans of its own: only the per-step costs are measurable from it
    assert set(prof.runtime) == {"step_extra_s", "expand_extra_s", "expand_extra_per_row_s"}
    assert json.loads(Path(summary["report"]).read_text())["runtime"]["runs"] == [str(runs / "fit_async")]
    # a runtime run dir records the d its draft used (a simulator's does not): the table shows it beside the
    # simulated one, and a serial run's simulation is pinned to it
    metrics_path = runs / "val_serial" / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    metrics_path.write_text(json.dumps({**metrics, "d_used": 2}))
    out, doc = tmp_path / "validation.json", tmp_path / "VALIDATION.md"
    assert validate_main(["compare", "--runs", str(runs), "--profile", summary["profile"], "--results", str(out),
                          "--exclude", "val_ar", "--sim-out", str(tmp_path / "sim"), "--doc", str(doc)]) == 0
    result = json.loads(out.read_text())
    assert [r["name"] for r in result["rows"]] == ["val_serial"]
    assert result["rows"][0]["d_measured"] == 2 and result["rows"][0]["d_used"] == 2
    assert "| d (cfg/meas/sim) |" in doc.read_text() and "| auto/2/2 |" in doc.read_text()
    # --keep-fitted: another call's runs of the fit configurations are unseen, so they stay in; refused for the fit
    # runs' own folder, and with --doc (whose method describes a held-out table)
    keep = ["compare", "--profile", summary["profile"], "--keep-fitted", "--sim-out", str(tmp_path / "sim2")]
    assert validate_main([*keep, "--runs", str(runs), "--results", str(tmp_path / "k.json")]) == 2
    import shutil

    other = tmp_path / "other_call"
    shutil.copytree(runs, other)
    assert validate_main([*keep, "--runs", str(other), "--results", str(tmp_path / "k.json"), "--doc",
                          str(tmp_path / "k.md")]) == 2
    assert validate_main([*keep, "--runs", str(other), "--results", str(tmp_path / "k.json")]) == 0
    kept = json.loads((tmp_path / "k.json").read_text())
    assert sorted(r["name"] for r in kept["rows"]) == ["fit_async", "val_ar", "val_serial"]
    assert kept["fitted_configs"] == [] and "another call" in kept["held_out"]
    assert result["fitted_configs"] == ["fit_async", "val_ar"] and "left out" in result["held_out"]


def test_the_in_graph_operators_agree_across_config_calibrate_and_cost_model():
    """conf (which imports no simulator code) lists the in-graph operators calibrate may fit; the cost model and the
    calibration's class map list the same ones, and the profile format knows each."""
    from conf.calibrate_schema import GRAPH_OPERATORS as CONF_OPS
    from simulator.calibrate import GRAPH_CLASSES
    from simulator.cost_model import GRAPH_OPERATORS as COST_OPS
    from simulator.profile import OPERATOR_FORMS

    assert set(CONF_OPS) == set(COST_OPS) == set(GRAPH_CLASSES) <= set(OPERATOR_FORMS)
