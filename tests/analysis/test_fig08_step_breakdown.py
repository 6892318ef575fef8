"""analysis/fig08_step_breakdown.py: a bench_step_variants results file (with kernel profiles) drawn as stacked
exposed-time bars per variant; its data, its case selection and its errors."""

from __future__ import annotations

import json

import pytest

from analysis import fig08_step_breakdown as fig08


def _results(tmp_path, name="sv.json", profiled=True):
    def variant(replay_ms, kernels):
        v = {"replay_s": replay_ms * 1e-3}
        if profiled:
            v["kernel_profile"] = {"replays": 5, "span_us": sum(kernels.values()),
                                   "kernels": [{"kernel": k, "calls": 32, "exposed_us": us, "duration_us": us}
                                               for k, us in kernels.items()]}
        return v

    doc = {"benchmark": "step_variants", "git_sha": "abc1234def", "results": [
        {"preset": "llama3-8b", "rows": 1, "floor_s": 3.775e-3, "variants": {
            "base": variant(4.4, {"_swiglu_kernel [224, 1, 1]": 1870.0, "_skinny_kernel [96, 1, 1]": 495.0,
                                  "_tree_attention_kernel [1, 8, 8]": 376.0, "_add_rmsnorm_partials_kernel [1, 1, 1]":
                                  175.0,
                                  "void at::native::elementwise_kernel<128, 2, f>(int, f) [1, 1, 1]": 1.2}),
            "fast": variant(4.3, {"_swiglu_kernel [224, 1, 1]": 1868.0, "_skinny_kernel [96, 1, 1]": 520.0,
                                  "_tree_attention_kernel [1, 8, 8]": 304.0,
                                  "_add_rmsnorm_partials_kernel [1, 1, 1]": 176.0})}},
        {"preset": "llama3.2-1b", "rows": 16, "floor_s": 0.584e-3, "variants": {
            "base": variant(1.13, {"_swiglu_kernel [128, 1, 1]": 303.0, "_tree_attention_kernel [1, 8, 8]": 189.0})}},
    ]}
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_kernel_labels_keep_the_grid_and_shorten_torch_names():
    assert fig08.kernel_label("_skinny_kernel [96, 1, 1]") == "skinny [96, 1, 1]"
    assert fig08.kernel_label("void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, lon "
                              "[32, 1, 1]") == "indexSelectSmallIndex [32, 1, 1]"
    assert fig08.kernel_label("_tree_attention_kernel [1, 8, 8]") == "tree_attention [1, 8, 8]"
    assert fig08.kernel_label("void at::native::elementwise_kernel<128, 2, f>(int, f) [1, 1, 1]") == \
        "elementwise_kernel [1, 1, 1]"


def test_stacked_segments_sum_to_each_variants_profile_and_other_takes_the_rest(tmp_path):
    cases = fig08.load_cases([_results(tmp_path)])
    assert [(c["preset"], c["rows"]) for c in cases] == [("llama3-8b", 1), ("llama3.2-1b", 16)]
    _, data = fig08.make_figure(cases, top=2)
    panel = data.panels["llama3-8b, 1 row (git abc1234)"]
    assert set(panel.series) == {"swiglu [224, 1, 1]", "skinny [96, 1, 1]", "other", "replay_us"}
    other = panel.series["other"]
    assert other.x == ["base", "fast"] and other.y == pytest.approx([376.0 + 175.0 + 1.2, 304.0 + 176.0])
    assert panel.series["skinny [96, 1, 1]"].y == [495.0, 520.0]
    assert panel.series["replay_us"].y == pytest.approx([4400.0, 4300.0])
    assert panel.notes == ["byte floor 3.775 ms"]
    one = data.panels["llama3.2-1b, 16 rows (git abc1234)"]
    assert "other" not in one.series  # two kernels, both named


def test_case_selection_and_errors_name_the_file_or_option(tmp_path, capsys):
    path = _results(tmp_path)
    assert [c["rows"] for c in fig08.select(fig08.load_cases([path]), ["llama3.2-1b:16"])] == [16]
    with pytest.raises(fig08.StepResultsError, match=r"--case llama3-8b:8: not among the profiled cases"):
        fig08.select(fig08.load_cases([path]), ["llama3-8b:8"])
    with pytest.raises(fig08.StepResultsError, match="no case with a kernel profile"):
        fig08.load_cases([_results(tmp_path, "bare.json", profiled=False)])
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"benchmark": "host_path", "rows": []}))
    with pytest.raises(fig08.StepResultsError, match=r"other.json: expected a bench/bench_step_variants.py results"):
        fig08.load_cases([other])
    with pytest.raises(fig08.StepResultsError, match="--top: expected >= 1"):
        fig08.make_figure(fig08.load_cases([path]), top=0)
    assert fig08.main([str(tmp_path / "missing.json"), "--out", str(tmp_path / "f")]) == 2
    assert "missing.json: no such file" in capsys.readouterr().err


def test_cli_writes_png_pdf_and_data(tmp_path, capsys):
    out = tmp_path / "figs" / "fig08"
    assert fig08.main([str(_results(tmp_path)), "--case", "llama3-8b:1", "--out", str(out)]) == 0
    for ext in ("png", "pdf", "json"):
        assert (tmp_path / "figs" / f"fig08.{ext}").stat().st_size > 0
    saved = json.loads((tmp_path / "figs" / "fig08.json").read_text())
    assert list(saved["panels"]) == ["llama3-8b, 1 row (git abc1234)"]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["cases"] == 1


def test_a_kernel_one_variant_launches_gets_its_segment_and_colours_hold_across_panels(tmp_path):
    """Panels name the kernels largest in any one variant (a fused kernel only its variant launches is not lost
    in `other`), and a kernel has one colour in every panel."""
    cases = fig08.load_cases([_results(tmp_path)])
    fused = {"_qkv_rope_kv_write_kernel [48, 2, 1]": 600.0, "_swiglu_kernel [224, 1, 1]": 1869.0}
    labelled = {fig08.kernel_label(k): v for k, v in fused.items()}
    cases[0]["variants"]["fused"] = {"replay_s": 4.2e-3, "kernels": labelled}
    fig, data = fig08.make_figure(cases, top=2)
    first, second = data.panels.values()
    assert set(first.series) == {"swiglu [224, 1, 1]", "qkv_rope_kv_write [48, 2, 1]", "other", "replay_us"}
    colour = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label != "byte floor":
                assert colour.setdefault(label, handle.patches[0].get_facecolor()) == handle.patches[0].get_facecolor()
    assert len({colour[k] for k in colour if k != "other"}) == len([k for k in colour if k != "other"])
    assert set(second.series) >= {"swiglu [128, 1, 1]", "tree_attention [1, 8, 8]"}
