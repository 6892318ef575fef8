"""Profile file: validation errors name the file and field; fits take precedence over the prior."""

from __future__ import annotations

import copy
import json

import pytest

from conf.frozen import ConfigError
from conf.presets import model_preset
from simulator.cost_model import StepDesc, forward_breakdown
from simulator.profile import (
    FEATURES,
    OPERATOR_FORMS,
    ProfileError,
    load_profile,
    parse_profile,
    write_profile,
)
from simulator.simulation import build_costs
from tests.simulator.conftest import cfg

VALID = {
    "version": 1,
    "hardware": {"gpu": "h200", "intra_group": "nvlink4", "allreduce": "oneshot", "cross_group": "nvlink4"},
    "software": {"kernels": "triton", "cuda_graphs": True},
    "operators": {
        "gemm": {"coefficients": {"a": 1e-6, "b": 0.0, "c": 0.0}, "fit_error": {"mape": 0.05}},
        "attention": {"coefficients": {"a": 2e-6, "b": 0.0, "c": 0.0}, "fit_error": {"mape": 0.05}},
        "allreduce": {"coefficients": {"a": 3e-6, "b": 0.0}, "fit_error": {"mape": 0.1},
                      "by_tp": {"4": {"coefficients": {"a": 5e-6, "b": 0.0}}}},
        "message": {"coefficients": {"a": 7e-6, "b": 0.0}, "fit_error": {"mape": 0.1}},
        "step_overhead": {"coefficients": {"a": 1e-5, "b": 0.0}, "fit_error": {"mape": 0.1}},
    },
}


def _write(tmp_path, data, name: str = "profile.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return str(p)


def test_valid_profile_loads_and_round_trips(tmp_path):
    prof = load_profile(_write(tmp_path, VALID))
    assert prof.gpu == "h200"
    assert prof.operators["allreduce"].coefficients_for(4) == (5e-6, 0.0)
    assert prof.operators["allreduce"].coefficients_for(2) == (3e-6, 0.0)
    out = tmp_path / "again.json"
    write_profile(out, prof)
    assert load_profile(out).operators == prof.operators


def test_predict_is_the_dot_product_of_coefficients_and_features():
    data = copy.deepcopy(VALID)
    data["operators"]["gemm"]["coefficients"] = {"a": 1e-6, "b": 2e-13, "c": 3e-16}
    fit = parse_profile(data).operators["gemm"]
    assert fit.predict(FEATURES["gemm"](1e8, 1e9)) == pytest.approx(1e-6 + 2e-13 * 1e8 + 3e-16 * 1e9)
    assert set(FEATURES) == set(OPERATOR_FORMS)


def test_measured_shapes_round_trip_and_interpolate_in_m(tmp_path):
    """A gemm operator's `measured` shapes: linear in M between the measured row counts, the first time below them,
    the last plus the fit's FLOP growth above; other shapes have none."""
    data = copy.deepcopy(VALID)
    data["operators"]["gemm"]["coefficients"]["c"] = 1e-15
    data["operators"]["gemm"]["measured"] = {"qkv:2048x3072": [[1, 6e-6], [8, 7e-6], [16, 9e-6]]}
    prof = load_profile(_write(tmp_path, data))
    fit = prof.operators["gemm"]
    assert fit.measured == {("qkv", 2048, 3072): ((1, 6e-6), (8, 7e-6), (16, 9e-6))}
    assert fit.at_shape("qkv", 2048, 3072, 1) == fit.at_shape("qkv", 2048, 3072, 0) == 6e-6
    assert fit.at_shape("qkv", 2048, 3072, 4) == pytest.approx(6e-6 + 1e-6 * 3 / 7)
    assert fit.at_shape("qkv", 2048, 3072, 12) == pytest.approx(8e-6)
    assert fit.at_shape("qkv", 2048, 3072, 32) == pytest.approx(9e-6 + 1e-15 * 2 * 16 * 2048 * 3072)
    assert fit.at_shape("qkv", 3072, 2048, 1) is None
    assert fit.at_shape("o", 2048, 3072, 1) is None  # another matrix of that shape: another kernel
    out = tmp_path / "again.json"
    write_profile(out, prof)
    assert load_profile(out).operators == prof.operators


def _mutate(path: list, value):
    data = copy.deepcopy(VALID)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


@pytest.mark.parametrize("path,value,match", [
    (["version"], 2, r"version: must be 1"),
    (["hardware", "gpu"], "tpu9", r"hardware\.gpu: unknown GPU 'tpu9'"),
    (["hardware", "intra_group"], "carrier-pigeon", r"hardware\.intra_group: unknown link"),
    (["operators", "conv"], {}, r"operators\.conv: unknown operator"),
    (["operators", "gemm", "coefficients", "b"], -1.0, r"operators\.gemm\.coefficients\.b: must be >= 0"),
    (["operators", "gemm", "coefficients", "c"], KeyError, r"operators\.gemm\.coefficients: needs exactly"),
    (["operators", "attention", "coefficients", "a"], "fast", r"operators\.attention\.coefficients\.a: must be"),
    (["operators", "message", "fit_error"], KeyError, r"operators\.message\.fit_error: is missing"),
    (["operators", "message", "fit_error"], {"rmse": 1.0}, r"operators\.message\.fit_error: .*'mape'"),
    (["operators", "allreduce", "by_tp", "x"], {"coefficients": {"a": 1, "b": 1}}, r"by_tp\.x: keys must be"),
    (["operators"], {}, r"operators: must be a non-empty object"),
    (["operators", "gemm", "measured"], {"qkv:2048": [[1, 1e-6]]}, r"gemm\.measured\.qkv:2048: keys must be"),
    (["operators", "gemm", "measured"], {"8x16": [[1, 1e-6]]}, r"measured\.8x16: keys must be \"<matrix>:<k>x<n>\""),
    (["operators", "gemm", "measured"], {"o:8x16": [[4, 1e-6], [1, 2e-6]]}, r"measured\.o:8x16: must be a non-empty"),
    (["operators", "gemm", "measured"], {"o:8x16": [[1, 0.0]]}, r"measured\.o:8x16: must be a non-empty list"),
    (["operators", "message", "measured"], {"o:8x16": [[1, 1e-6]]}, r"message\.measured: only \['gemm', 'gemm_fp8'\]"),
], ids=lambda v: str(v)[:40])
def test_bad_profiles_name_the_file_and_field(tmp_path, path, value, match):
    f = _write(tmp_path, _mutate(path, value))
    with pytest.raises(ProfileError, match=match) as err:
        load_profile(f)
    assert str(f) in str(err.value)


def test_missing_and_non_json_profiles_are_clear(tmp_path):
    with pytest.raises(ProfileError, match=r"sim\.profile: profile file .*nope\.json does not exist"):
        load_profile(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ProfileError, match=r"bad\.json: not valid JSON"):
        load_profile(bad)


def test_profile_takes_precedence_over_the_prior(tmp_path):
    f = _write(tmp_path, VALID)
    config = cfg("workload.num_requests=1", f"sim.profile={f}", "parallel.leader_channel=dist")
    costs = build_costs(config)
    assert costs.source == f"profile:{f}"
    shape = model_preset("llama3-70b")
    b = forward_breakdown(costs.target.ops, shape, 16, StepDesc(8, 1000, 6))  # type: ignore[attr-defined]
    assert b["gemm"] == pytest.approx(shape.num_layers * 4 * 1e-6 + 1e-6)  # 4 matrices per layer + LM head
    assert b["attention"] == pytest.approx(shape.num_layers * 2e-6)
    assert b["allreduce"] == pytest.approx((2 * shape.num_layers + 1) * 3e-6)
    assert b["overhead"] == pytest.approx(1e-5)
    assert costs.proposal_s == pytest.approx(7e-6)


def test_leader_messages_follow_the_leader_channel(tmp_path):
    """parallel.leader_channel: dist uses the profile's `message`; unix its `message_unix`, else the measured
    unix-socket link; auto is unix when both leaders sit on one node (as the runtime's make_channel)."""
    from conf.presets import LINK_PRESETS
    from simulator.interconnect import message_bytes, transfer_time_s
    from simulator.simulation import leader_transport, proposal_nodes

    f = _write(tmp_path, VALID)
    base = ("workload.num_requests=1", f"sim.profile={f}")
    assert leader_transport(cfg(*base)) == "unix"  # 6 + 2 GPUs of one 8-GPU node
    assert leader_transport(cfg(*base, "parallel.target_gpus=8", "parallel.draft_gpus=8",
                                 "interconnect=cross_node_ib")) == "dist"  # draft on node 1
    assert leader_transport(cfg(*base, "parallel.leader_channel=dist")) == "dist"
    unix = build_costs(cfg(*base, "parallel.leader_channel=unix"))
    config = cfg(*base, "parallel.leader_channel=unix")
    nbytes = message_bytes(proposal_nodes(config))
    link = transfer_time_s(LINK_PRESETS["unix-socket"], nbytes)
    assert unix.verified_s == pytest.approx(link + transfer_time_s(LINK_PRESETS["nvlink4"], nbytes))  # + broadcast
    assert "analytic: message_unix" in unix.source  # VALID has no unix fit; the TP-6 verdict uses `message`
    fitted = json.loads(json.dumps(VALID))
    fitted["operators"]["message_unix"] = {"coefficients": {"a": 3e-6, "b": 0.0}, "fit_error": {"mape": 0.02}}
    g = _write(tmp_path, fitted, "unix.json")
    costs = build_costs(cfg("workload.num_requests=1", f"sim.profile={g}", "parallel.leader_channel=unix"))
    assert costs.proposal_s == pytest.approx(3e-6) and costs.source == f"profile:{g}"


def test_profile_link_fits_fall_back_when_the_interconnect_differs(tmp_path):
    f = _write(tmp_path, VALID)
    costs = build_costs(cfg("workload.num_requests=1", f"sim.profile={f}", "interconnect=pcie5",
                            "parallel.leader_channel=dist"))
    assert "analytic: allreduce, message" in costs.source
    assert costs.proposal_s > 7e-6


def test_profile_from_another_gpu_is_rejected(tmp_path):
    f = _write(tmp_path, VALID)
    with pytest.raises(ProfileError, match=r"hardware\.gpu: profile measured on 'h200' but hardware\.gpu='h100'"):
        build_costs(cfg("workload.num_requests=1", f"sim.profile={f}", "hardware=h100"))


def test_draft_host_scale_scales_only_the_drafts_fitted_host_costs(tmp_path):
    """sim.whatif.draft_host_scale: the runtime block's draft costs (per expansion, per row, per round) times the scale;
    the target's step correction and the messages untouched; a negative scale is refused, naming the field."""
    runtime = {"step_extra_s": 2e-4, "expand_extra_s": 1e-4, "expand_extra_per_row_s": 3e-5,
               "verify_message_s": 5e-5, "draft_round_s": 4e-4}
    f = _write(tmp_path, {**VALID, "runtime": runtime})
    costs = {s: build_costs(cfg("workload.num_requests=1", "parallel=7x1", f"sim.profile={f}",
                                f"sim.whatif.draft_host_scale={s}")) for s in (1.0, 0.5, 0.0)}
    for s, c in costs.items():
        assert c.draft.extra_s == pytest.approx(1e-4 * s) and c.draft.extra_per_token_s == pytest.approx(3e-5 * s)
        assert c.tree_op_s == pytest.approx(4e-4 * s)
        assert c.target.extra_s == pytest.approx(2e-4) and c.verify_host_s == pytest.approx(5e-5)
    assert costs[0.0].draft.forward_s(8, 1000) < costs[1.0].draft.forward_s(8, 1000)
    with pytest.raises(ValueError, match="sim.whatif.draft_host_scale: must be a finite number >= 0, got -1.0"):
        cfg("sim.whatif.draft_host_scale=-1")


def test_draft_device_scale_scales_only_the_drafts_kernel_time(tmp_path):
    """sim.whatif.draft_device_scale: the draft's decode steps, prefills and KV compactions cost their kernels times the
    scale plus the unscaled fitted host costs; the target and the messages are untouched; a scale <= 0 or not finite is
    refused, naming the field."""
    runtime = {"step_extra_s": 2e-4, "expand_extra_s": 1e-4, "expand_extra_per_row_s": 3e-5,
               "verify_message_s": 5e-5, "draft_round_s": 4e-4}
    f = _write(tmp_path, {**VALID, "runtime": runtime})
    base = ("workload.num_requests=1", "parallel=7x1", f"sim.profile={f}")
    host = build_costs(cfg(*base, "sim.whatif.draft_host_scale=0"))  # the draft's kernels alone
    one, half = (build_costs(cfg(*base, "sim.whatif.draft_host_scale=0", f"sim.whatif.draft_device_scale={s}"))
                 for s in (1, 0.5))
    full = build_costs(cfg(*base))
    scaled = build_costs(cfg(*base, "sim.whatif.draft_device_scale=0.5"))
    for rows, kv in ((1, 300), (8, 1000), (16, 2000)):
        kernels = host.draft.forward_s(rows, kv)
        assert one.draft.forward_s(rows, kv) == pytest.approx(kernels)
        assert half.draft.forward_s(rows, kv) == pytest.approx(0.5 * kernels)
        assert scaled.draft.forward_s(rows, kv) == pytest.approx(0.5 * kernels + 1e-4 + 3e-5 * rows)
        assert full.draft.forward_s(rows, kv) == pytest.approx(kernels + 1e-4 + 3e-5 * rows)
        assert scaled.target.forward_s(rows, kv) == pytest.approx(full.target.forward_s(rows, kv))
    assert half.draft.compaction_s(500) == pytest.approx(0.5 * one.draft.compaction_s(500))
    assert half.draft.prefill_s(1024) < one.draft.prefill_s(1024)
    assert (scaled.proposal_s, scaled.verified_s, scaled.tree_op_s) == (full.proposal_s, full.verified_s,
                                                                          full.tree_op_s)
    assert scaled.draft.breakdown(8, 1000) == pytest.approx({k: 0.5 * v for k, v in
                                                             full.draft.breakdown(8, 1000).items()})
    for bad in ("0", "-1", "inf"):
        with pytest.raises(ValueError, match="sim.whatif.draft_device_scale: must be a finite number > 0"):
            cfg(f"sim.whatif.draft_device_scale={bad}")


def test_runtime_delta_adds_seconds_to_the_fitted_host_costs(tmp_path):
    """sim.whatif.runtime_delta: seconds added to the profile's runtime entries (after the draft host scale); a key
    the profile lacks, a sum below the entry's bound and a non-finite value are refused, naming the key."""
    runtime = {"step_extra_s": 2e-4, "expand_extra_s": 1e-4, "verify_message_s": 5e-5, "draft_round_s": 4e-4}
    f = _write(tmp_path, {**VALID, "runtime": runtime})
    base = ("workload.num_requests=1", "parallel=7x1", f"sim.profile={f}")
    fitted = build_costs(cfg(*base))
    costs = build_costs(cfg(*base, "+sim.whatif.runtime_delta.step_extra_s=-5e-5",
                            "+sim.whatif.runtime_delta.draft_round_s=1e-4",
                            "sim.whatif.draft_host_scale=0.5"))
    assert costs.target.extra_s == pytest.approx(1.5e-4) and fitted.target.extra_s == pytest.approx(2e-4)
    assert costs.tree_op_s == pytest.approx(4e-4 * 0.5 + 1e-4)
    assert costs.draft.extra_s == pytest.approx(0.5e-4) and costs.verify_host_s == pytest.approx(5e-5)
    with pytest.raises(ValueError, match=r"sim.whatif.runtime_delta.keep_s: .*has no runtime entry 'keep_s'"):
        build_costs(cfg(*base, "+sim.whatif.runtime_delta.keep_s=1e-5"))
    with pytest.raises(ValueError, match=r"sim.whatif.runtime_delta.verify_message_s: .* below the entry's bound 0 s"):
        build_costs(cfg(*base, "+sim.whatif.runtime_delta.verify_message_s=-1e-4"))
    one_gpu = build_costs(cfg("workload.num_requests=1", "parallel=1x1", f"sim.profile={f}",
                              "+sim.whatif.runtime_delta.step_extra_s=-9e-4"))  # a signed entry: down to -1 ms
    assert one_gpu.target.extra_s == pytest.approx(-7e-4)
    with pytest.raises(ValueError, match="sim.whatif.runtime_delta.step_extra_s: must be a finite number of seconds"):
        cfg("+sim.whatif.runtime_delta.step_extra_s=nan")


def test_runtime_delta_keys_are_runtime_costs(tmp_path):
    """sim.whatif.runtime_delta is one mapping keyed by simulator/profile.py RUNTIME_COSTS: any of them composes; an
    unknown key is one line naming it and the allowed ones, before anything is simulated."""
    from simulator.main import run as run_sim
    from simulator.profile import RUNTIME_COSTS

    for key in RUNTIME_COSTS:
        assert cfg(f"+sim.whatif.runtime_delta.{key}=0").sim.whatif.runtime_delta == {key: 0.0}
    config = cfg("workload.num_requests=1", "+sim.whatif.runtime_delta.step_extra=1e-5")
    with pytest.raises(ConfigError, match=r"^sim\.whatif\.runtime_delta\.step_extra: not a runtime cost; allowed: "
                       + ", ".join(RUNTIME_COSTS) + "$"):
        run_sim(config, tmp_path / "r", verbose=False)
    assert not (tmp_path / "r").exists()
