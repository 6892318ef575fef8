"""Every YAML under conf/ composes and validates; bad values raise errors naming the field."""

from __future__ import annotations

import pytest

from tests.conftest import CONF_DIR, build

GROUPS = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and not p.name.startswith("_"))


def _group_options():
    for g in GROUPS:
        for y in sorted((CONF_DIR / g).glob("*.yaml")):
            yield g, y.stem


# Groups whose options need a companion override to form a valid experiment.
_COMPANIONS = {
    ("parallel", "8x0"): ["spec=autoregressive"], ("parallel", "4x0"): ["spec=autoregressive"],
    ("parallel", "2x0"): ["spec=autoregressive"], ("parallel", "1x0"): ["spec=autoregressive"],
    ("model", "llama3-8b"): ["spec=autoregressive", "parallel=1x0"],
    ("model", "tiny"): ["parallel=1x1"], ("model", "smollm2"): ["parallel=1x1"],
}


@pytest.mark.parametrize("group,option", list(_group_options()), ids=lambda v: str(v))
def test_every_group_option_composes_and_validates(group, option):
    cfg = build("simulate", [f"{group}={option}", *_COMPANIONS.get((group, option), [])])
    assert getattr(cfg, group) is not None


@pytest.mark.parametrize("name", ["simulate", "generate"])
def test_primary_configs_validate(name):
    cfg = build(name)
    assert cfg.spec.mode == "async_tree"
    assert cfg.parallel.world_size >= 2


def test_config_is_immutable_after_validation():
    cfg = build("simulate")
    with pytest.raises(AttributeError, match="immutable"):
        cfg.spec.bs = 4
    with pytest.raises(AttributeError, match="immutable"):
        cfg.model.target.preset = "llama3-8b"


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["model.target.preset=llama9-1t"], r"model\.target\.preset: unknown model preset 'llama9-1t'; allowed: \["),
        (["spec.bs=1"], r"spec\.bs: verify width must be >= 2"),
        (["spec.w=0"], r"spec\.w: draft width must be >= 1"),
        (["spec.d=zero"], r"spec\.d: 'zero' is neither 'auto', 'poll' nor a positive integer"),
        (["spec.mode=beam"], r"spec\.mode: 'beam' is not one of autoregressive, chain, serial_tree, async_tree"),
        (["spec.temperature=-0.5"], r"spec\.temperature: must be >= 0"),
        (["model=smollm2", "parallel.target_gpus=4", "parallel.draft_gpus=4"],
         r"parallel\.draft_gpus: TP degree 4 cannot shard smollm2-draft \(3 query heads\); allowed: 1\.\.3"),
        (["model.draft=null"], r"model\.draft: spec\.mode=async_tree needs a draft model"),
        (["parallel.draft_gpus=0"], r"parallel\.draft_gpus: spec\.mode=async_tree needs a draft group"),
        (["workload.max_new_tokens=5000"], r"workload\.max_new_tokens: .*exceeds the KV cache"),
        (["workload.max_seq_len_tokens=9000"], r"workload\.max_seq_len_tokens: cache of .* exceeds llama3-70b"),
        (["hardware.gpu=tpu9"], r"hardware\.gpu: unknown preset 'tpu9'; allowed: \['a100', 'h100', 'h200', 'h800'\]"),
        (["interconnect.allreduce=butterfly"], r"interconnect\.allreduce: 'butterfly' is not one of"),
        (["acceptance.positional=[[0.7,0.5]]"], r"acceptance\.positional\[0\]: probabilities sum to 1\.2000 > 1"),
        (["acceptance.positional=[[1.5]]"], r"acceptance\.positional\[0\]\[0\]: 1\.5 is outside \[0, 1\]"),
        (["kernels.preset=cuda"], r"kernels\.preset: 'cuda' is not one of reference, triton, graphs"),
        (["kernels=reference", "kernels.ablate=[skinny]"],
         r"kernels\.ablate: 'skinny' is not a feature of kernels=reference; allowed: none"),
        (["kernels=triton", "kernels.ablate=[cuda_graphs]"],
         r"kernels\.ablate: 'cuda_graphs' is not a feature of kernels=triton; allowed: none"),
        (["kernels=graphs", "kernels.ablate=[fused_allreduce]"],
         r"kernels\.ablate: 'fused_allreduce' is not a feature of kernels=graphs; allowed: cuda_graphs, skinny, pdl, "
         r"rope_attention, target_qkv_rope, draft_head, refill_graph, prefill_graph$"),
        (["kernels=graphs", "kernels.ablate=[pdl,pdl]"], r"kernels\.ablate: names 'pdl' twice"),
        (["kernels=graphs", "kernels.ablate=[skinny]"],
         r"kernels\.ablate: target_qkv_rope needs skinny: ablate it too "
         r"\(kernels\.ablate=\[skinny,target_qkv_rope\]\)"),
        (["kernels=graphs", "kernels.ablate=[cuda_graphs,prefill_graph]"],
         r"kernels\.ablate: refill_graph needs cuda_graphs: ablate it too "
         r"\(kernels\.ablate=\[cuda_graphs,prefill_graph,refill_graph\]\)"),
        (["kernels=graphs", "spec.topk=65"], r"spec\.topk: kernels\.draft_head takes at most 64 children per node"),
        (["+sim.whatif.runtime_delta.step_extra_s=nan"],
         r"sim\.whatif\.runtime_delta\.step_extra_s: must be a finite number of seconds, got nan"),
        (["model.draft.preset=qwen2-0.5b"], r"model\.draft\.preset: draft vocabulary \(151646 tokens\) differs"),
    ],
)
def test_bad_values_name_the_field(overrides, match):
    with pytest.raises(ValueError, match=match):
        build("simulate", overrides)


def test_tp_beyond_head_count_is_rejected():
    match = r"parallel\.target_gpus: TP degree 5 cannot shard tiny-llama \(4 query heads\); allowed: 1\.\.4"
    with pytest.raises(ValueError, match=match):
        build("generate", ["model=tiny", "parallel.target_gpus=5", "parallel.draft_gpus=1"])


def test_tp_that_does_not_divide_heads_is_allowed():
    cfg = build("generate", ["model=tiny", "parallel=3x1"])
    assert cfg.parallel.target_gpus == 3


def test_presets_resolve_to_their_documented_features():
    """kernels=reference is plain torch, triton the Triton kernels alone, graphs every feature of the table; the
    config's per-feature names read the resolved features, an ablation switches off exactly what it lists."""
    from dataclasses import fields

    from conf.kernels_config import FEATURES, NEEDS, KernelFeatures

    assert FEATURES == ("cuda_graphs", "skinny", "pdl", "rope_attention", "target_qkv_rope", "draft_head",
                        "refill_graph", "prefill_graph")
    assert set(NEEDS) | set(NEEDS.values()) <= set(FEATURES)
    for preset, backend, on in (("reference", "reference", set()), ("triton", "triton", set()),
                                ("graphs", "triton", set(FEATURES))):
        kcfg = build("generate", [f"kernels={preset}"]).kernels
        assert (kcfg.preset, kcfg.ablate) == (preset, [])
        assert kcfg.features == KernelFeatures(backend, **{name: name in on for name in FEATURES})
        assert kcfg.backend == backend
        assert {f.name for f in fields(KernelFeatures) if getattr(kcfg, f.name) is True} == on
    kcfg = build("generate", ["kernels=graphs", "kernels.ablate=[skinny,pdl,target_qkv_rope]"]).kernels
    assert [name for name in FEATURES if not getattr(kcfg, name)] == ["skinny", "pdl", "target_qkv_rope"]
    assert kcfg.cuda_graphs and kcfg.backend == "triton"
    assert build("simulate").kernels.preset == "graphs"  # the simulator's default prices what the runtime runs


def test_the_runtime_launches_with_the_default_pdl_policy(monkeypatch):
    """kernels=graphs turns PDL on with kernels/pdl.py's DEFAULT_POLICY (no per-role config); an ablation of pdl,
    or kernels=triton, turns it off."""
    from kernels import pdl
    from runtime.engine import set_launch_policy

    monkeypatch.setattr(pdl, "_policy", dict(pdl.pdl_policy()))  # restored after the test
    set_launch_policy(build("generate", ["kernels=graphs"]))
    assert pdl.pdl_policy() == pdl.DEFAULT_POLICY
    for off in (["kernels=graphs", "kernels.ablate=[pdl]"], ["kernels=triton"]):
        set_launch_policy(build("generate", off))
        assert not pdl.pdl_enabled()


def test_draft_head_topk_limit_is_the_kernels():
    from conf.schema import DRAFT_HEAD_MAX_TOPK
    from kernels.topk_logprobs import MAX_K

    assert DRAFT_HEAD_MAX_TOPK == MAX_K


def test_prefill_graphs_serve_one_gpu_groups_only():
    """kernels.prefill_graph_for: what the runtime's workers and the simulator's prefill price both ask."""
    from conf.kernels_config import KernelFeatures, KernelsConfig

    on = KernelsConfig(preset="graphs")
    assert on.prefill_graph_for(1) and not on.prefill_graph_for(2)
    assert not KernelsConfig(preset="graphs", ablate=["prefill_graph"]).prefill_graph_for(1)
    assert not KernelFeatures(backend="triton", cuda_graphs=True).prefill_graph_for(1)
