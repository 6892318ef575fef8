"""bench/bench_step_variants.py on CPU: bad arguments name the option; the run itself needs a CUDA GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.bench_step_variants import VARIANTS, main


@pytest.mark.parametrize("argv,match", [
    (["--variants", "base,fast"], r"--variants: 'fast' is not one of base, pdl"),
    (["--cases", "llama3-8b:8"], r"--cases: 'llama3-8b:8' is not preset:rows:tree_len"),
    (["--cases", "llama9:8:8"], r"--cases: 'llama9:8:8': preset: unknown model preset 'llama9'"),
    (["--cases", "llama3-8b:9:8"], r"--cases: 'llama3-8b:9:8': needs 1 <= rows <= tree_len"),
    (["--cases", "llama3-8b:65:65"], r"rows <= 64"),
    (["--cases", "llama3.2-1b:16:64", "--ctx", "2000"],
     r"--cases: 'llama3.2-1b:16:64': --ctx 2000 \+ tree_len 64 exceeds --cap 2048 KV slots"),
    (["--cases", "llama3.2-1b:2:256,llama3.2-1b:2:257"],
     r"--cases: 'llama3.2-1b:2:257': llama3.2-1b has another case of 2 rows"),
])
def test_bad_arguments_name_the_option(argv, match):
    with pytest.raises(SystemExit, match=match):
        main(argv)


def test_variants_are_the_runtime_switches_and_cpu_is_refused(monkeypatch):
    """Every variant is a (kernels.skinny, PDL policy) pair the runtime accepts; base is the first (the
    reference every other variant's logits are checked against)."""
    from kernels.pdl import ROLES, TRIGGERS

    assert next(iter(VARIANTS)) == "base" and VARIANTS["base"] == (False, None)
    for skinny, policy in VARIANTS.values():
        assert isinstance(skinny, bool)
        assert policy is None or (set(policy) == set(ROLES) and set(policy.values()) <= set(TRIGGERS))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        main(["--cases", "tiny-llama:4:4"])


def test_table_marks_failed_variants():
    """A variant that did not capture shows as failed; logits compare against the first one that ran."""
    from bench.bench_step_variants import table

    ok = {"replay_s": 4.5e-3, "over_floor": 1.2, "max_abs_diff_vs_base": 0.0, "argmax_agree_vs_base": 1.0}
    results = [{"preset": "llama3-8b", "rows": 8, "floor_s": 3.775e-3, "logits_vs": "base",
                "variants": {"base": ok}, "failed": {"skinny": "CompilationError: x"}},
               {"preset": "llama3-8b", "rows": 1, "variants": {}, "failed": {"base": "e", "skinny": "e"}}]
    out = table(results, ["base", "skinny"])
    assert "| base | 4.500 (1.20) | failed |" in out and "| skinny | failed | failed |" in out
    assert "rows 8: floor 3.775 ms; logits vs base" in out and "rows 1: every variant failed" in out


def test_patches_parse_apply_and_restore():
    """`variant+patch`: each patch sets a module-level tile choice only inside `patched`; unknown parts are named."""
    import importlib

    from bench.bench_step_variants import KNOBS, PATCHES, parse_variant, patched

    skinny = importlib.import_module("kernels.skinny_linear")
    assert parse_variant("runtime+qkv_n32+o_s1") == ("runtime", ["qkv_n32", "o_s1"])
    with pytest.raises(SystemExit, match=r"patch 'qkv_n8' of 'runtime\+qkv_n8' is not one of qkv_n32"):
        parse_variant("runtime+qkv_n8")

    def state():
        return dict(skinny.CONFIGS), {kind: getattr(module, attr) for kind, (module, attr) in KNOBS.items()}

    before = state()
    with patched(["qkv_n32", "o_s1", "swiglu_i32", "swiglu_k64", "attn_k128", "norm_w8", "qkvrope_split2",
                  "attn_wide64", "m32_heuristic",
                  "down_bal33s4", "norm_rows16", "norm_narrow4", "norm_tiny1"]):
        assert skinny.pick_config(1, 6144, 4096)["block_n"] == 32
        assert skinny.pick_config(8, 4096, 4096)["split_k"] == 1
        assert state()[1] == {"swiglu": 32, "swiglu_k": 64, "attention": 128, "norm_warps": 8,
                              "qkv_rope_split": 2, "attention_wide_rows": 64, "norm_early_rows": 16,
                              "norm_early_rows_narrow": 4, "norm_early_rows_tiny": 1}
        assert skinny.pick_config(8, 4096, 14336)["programs"] == 33
        assert (2048, 8192, 32) not in skinny.CONFIGS and skinny.pick_config(32, 2048, 8192)["split_k"] == 2
    assert state() == before
    assert skinny.pick_config(8, 4096, 4096)["split_k"] == 2
    assert skinny.pick_config(32, 2048, 8192)["split_k"] == 4
    assert {kind for kind, _ in PATCHES.values()} <= {"skinny", "weight_bits", "fp8_tables", *KNOBS}
    import importlib

    fused_mlp = importlib.import_module("kernels.fused_mlp")
    tables = (dict(skinny.FP8_CONFIGS), dict(fused_mlp.FP8_TILES))
    sweep = json.loads(Path("bench/results/fp8_tiles_2026-12-02_f2eff415.json").read_text())
    # the kernels' fp8 tables are the sweep's picks, as its results file has them
    assert {(c["n"], c["k"], c["m_bucket"]): c["config"] for c in sweep["fp8_configs"]} == skinny.FP8_CONFIGS
    assert {(c["n"], c["k"], c["m_bucket"]): c["config"] for c in sweep["swiglu_fp8_tiles"]} == fused_mlp.FP8_TILES
    assert skinny.pick_config(1, 2048, 2048, fp8=True)["split_k"] == 8 != skinny.pick_config(1, 2048, 2048)["split_k"]
    with patched(["w8", "w8_bf16tiles"]):  # the fp8 GEMMs on the bf16 tables' tiles
        assert not skinny.FP8_CONFIGS and not fused_mlp.FP8_TILES
        assert skinny.pick_config(1, 2048, 2048, fp8=True) == skinny.pick_config(1, 2048, 2048)
    assert (dict(skinny.FP8_CONFIGS), dict(fused_mlp.FP8_TILES)) == tables
    from bench.bench_step_variants import _variant_config

    assert json.loads(json.dumps(_variant_config("runtime+w8+w8_bf16tiles")))["patches"]["w8_bf16tiles"] == [
        "fp8_tables", None]
    assert set(PATCHES) >= {"qkv_n32", "o_n16", "o_s1", "down_n32", "dqkv_n16", "do_s2"}
    from bench.bench_step_variants import weight_bits_of

    with patched(["w8"]):  # a use_fused_kernels argument, not a module value
        assert state() == before
    assert weight_bits_of(parse_variant("runtime+w8+w8_k512")[1]) == 8 and weight_bits_of(["o_s1"]) == 16


def test_the_fp8_floor_streams_the_projections_at_one_byte():
    """byte_floor_s(weight_bits=8): the layer projections at 1 B per weight + a float32 scale per row, the rest (norms,
    the tied embedding / LM head) and the K/V as at 16 bits."""
    import torch

    from bench.profile_step import HBM_BYTES_PER_S, byte_floor_s
    from conf.presets import model_preset
    from runtime.loader import build_model

    model = build_model(model_preset("tiny-llama"), torch.bfloat16, "cpu", seed=0)
    proj = [lin.weight for layer in model.layers
            for lin in (layer.attn.wqkv, layer.attn.wo, layer.mlp.w13, layer.mlp.w2)]
    saved = sum(w.numel() - 4 * w.shape[0] for w in proj)  # 2 B -> 1 B + 4 B per row
    gap = (byte_floor_s(model, 100, 1) - byte_floor_s(model, 100, 1, weight_bits=8)) * HBM_BYTES_PER_S
    assert gap == pytest.approx(saved, rel=1e-9) and saved > 0


@pytest.mark.parametrize("preset", ["llama3-8b", "llama3.2-1b"])
def test_gemm_patches_name_shapes_the_model_runs(preset):
    """A skinny patch whose (N, K) no projection of either benchmarked model has would change nothing: each one
    must hit the QKV, o or down projection of one of them (m bucket 16: the 1-16-row steps; 32: 17-32 rows)."""
    from bench.bench_step_variants import PATCHES
    from conf.presets import model_preset

    shapes = {}
    for name in ("llama3-8b", "llama3.2-1b"):
        s = model_preset(name)
        qkv = (s.num_heads + 2 * s.num_kv_heads) * s.head_dim
        mats = ((qkv, s.hidden_size), (s.hidden_size, s.num_heads * s.head_dim), (s.hidden_size, s.intermediate_size))
        shapes[name] = {(n, k, bucket) for bucket in (16, 32) for n, k in mats}
    for kind, value in PATCHES.values():
        if kind == "skinny":
            assert set(value) <= shapes["llama3-8b"] | shapes["llama3.2-1b"], value
    assert any(kind == "skinny" and set(value) & shapes[preset] for kind, value in PATCHES.values())
