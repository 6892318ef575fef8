"""calibration/graph_profile.py on CPU: synthetic Chrome traces of overlapping (PDL) kernels, split and attributed."""

from __future__ import annotations

import pytest

from calibration.graph_profile import (
    attribute,
    class_totals,
    exposed_times,
    kernel_class,
    kernel_spans,
    split_replays,
    table,
)


def _kernel(name, ts, dur, grid=(1, 1, 1)):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"grid": list(grid)}}


def _replay(t0):
    """gemm (10 us), attention starting under it (PDL) and ending 4 us after, gemm on another grid, a norm."""
    return [_kernel("gemm", t0, 10.0, (48, 1, 1)), _kernel("attn", t0 + 8.0, 6.0),
            _kernel("gemm", t0 + 14.0, 5.0, (32, 1, 4)), _kernel("norm", t0 + 19.5, 1.5)]


def test_exposed_times_partition_the_span_under_overlap():
    spans = kernel_spans({"traceEvents": _replay(100.0)})
    ex = exposed_times(spans)
    assert ex == [10.0, 4.0, 5.0, 2.0]  # the norm also pays the 0.5 us idle gap before it
    assert sum(ex) == pytest.approx(spans[-1][1] + spans[-1][2] - spans[0][1])


def test_a_kernel_hidden_under_a_longer_one_is_charged_nothing():
    spans = [("long", 0.0, 10.0), ("hidden", 2.0, 3.0), ("next", 10.0, 1.0)]
    assert exposed_times(spans) == [10.0, 0.0, 1.0]


def test_replays_are_split_at_idle_gaps_and_grouped_by_name_and_grid():
    events = _replay(0.0) + _replay(5000.0) + _replay(10000.0)
    events += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "dur": 3.0},  # not a kernel
               {"ph": "i", "cat": "kernel", "name": "marker", "ts": 2.0}]
    replays = split_replays(kernel_spans({"traceEvents": events}))
    assert [len(r) for r in replays] == [4, 4, 4]
    prof = attribute(replays)
    assert prof["replays"] == 3 and prof["kernels_per_replay"] == 4 and prof["span_us"] == pytest.approx(21.0)
    by_key = {row["kernel"]: row for row in prof["kernels"]}
    assert set(by_key) == {"gemm [48, 1, 1]", "attn [1, 1, 1]", "gemm [32, 1, 4]", "norm [1, 1, 1]"}
    assert by_key["attn [1, 1, 1]"]["exposed_us"] == pytest.approx(4.0)
    assert by_key["attn [1, 1, 1]"]["duration_us"] == pytest.approx(6.0)
    assert prof["kernels"][0]["kernel"] == "gemm [48, 1, 1]"  # sorted by exposed time
    out = table(prof, top=2, floors_us=[("byte floor", 15.0)])
    assert "| gemm [48, 1, 1] | 1 | 10.0 | 10.0 |" in out and "| (2 other keys) | 2 | 6.0 | 7.5 |" in out
    assert "| span (first start to last end) | 4 | 21.0 | |" in out and "| byte floor | | 15.0 | |" in out


def test_a_replay_with_a_stray_kernel_is_dropped():
    events = _replay(0.0) + _replay(5000.0) + _replay(10000.0) + [_kernel("fill", 10030.0, 1.0)]
    prof = attribute(split_replays(kernel_spans({"traceEvents": events})))
    assert prof["replays"] == 2 and prof["replays_dropped"] == 1


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="trace: expected a Chrome trace"):
        kernel_spans({"events": []})
    with pytest.raises(ValueError, match=r"trace: kernel event 1 \('gemm'\) needs numeric 'ts'"):
        kernel_spans({"traceEvents": [{"ph": "i"}, {"ph": "X", "cat": "kernel", "name": "gemm", "dur": 1.0}]})
    with pytest.raises(ValueError, match="replays: no kernels were recorded"):
        attribute([])


@pytest.mark.parametrize("key, cls", [
    ("_skinny_kernel [36, 2, 1]", "gemm"), ("_swiglu_kernel [224, 1, 1]", "gemm"),
    ("_qkv_rope_kv_write_kernel [15, 2, 1]", "gemm"), ("_reduce_partials_kernel [8, 1, 1]", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32 [132, 1, 1]", "gemm"), ("nvjet_tst_128x64_64x4 [66, 1, 1]", "gemm"),
    ("_tree_attention_kernel [1, 8, 8]", "attention"), ("flash_fwd_splitkv_kernel [4, 8, 1]", "attention"),
    ("_add_rmsnorm_partials_kernel [1, 1, 1]", "other"), ("_rope_kv_write_kernel [4, 1, 1]", "other"),
    ("_kv_compact_kernel [16, 1, 1]", "other"), ("_segment_topk_kernel [8, 1, 1]", "other"),
    ("void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, lon [5, 1, 1]", "other"),
])
def test_kernel_class_names_the_simulators_operator(key, cls):
    assert kernel_class(key) == cls


def test_class_totals_partition_the_replay_span():
    events = _replay(0.0) + _replay(5000.0)
    events = [dict(e, name={"gemm": "_skinny_kernel", "attn": "_tree_attention_kernel",
                            "norm": "_add_rmsnorm_kernel"}[e["name"]]) for e in events]
    prof = attribute(split_replays(kernel_spans({"traceEvents": events})))
    totals = class_totals(prof)
    assert totals["gemm"] == {"exposed_us": 15.0, "duration_us": 15.0, "calls": 2}
    assert totals["attention"] == {"exposed_us": 4.0, "duration_us": 6.0, "calls": 1}
    assert totals["other"] == {"exposed_us": 2.0, "duration_us": 1.5, "calls": 1}
    assert sum(t["exposed_us"] for t in totals.values()) == pytest.approx(prof["span_us"])
