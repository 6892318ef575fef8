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
        (["kernels.backend=cuda"], r"kernels\.backend: 'cuda' is not one of reference, triton"),
        (["kernels=reference", "kernels.skinny=true"],
         r"kernels\.skinny: needs kernels\.backend=triton, got 'reference'"),
        (["kernels=reference", "kernels.pdl=true"], r"kernels\.pdl: needs kernels\.backend=triton, got 'reference'"),
        (["kernels=reference", "kernels.rope_attention=true"],
         r"kernels\.rope_attention: needs kernels\.backend=triton, got 'reference'"),
        (["kernels=reference", "kernels.draft_head=true"],
         r"kernels\.draft_head: needs kernels\.backend=triton, got 'reference'"),
        (["kernels=graphs", "spec.topk=65"], r"spec\.topk: kernels\.draft_head takes at most 64 children per node"),
        (["kernels=triton", "kernels.refill_graph=true"],
         r"kernels\.refill_graph: a captured one-row draft step: needs kernels\.cuda_graphs=true"),
        (["kernels=triton", "kernels.prefill_graph=true"],
         r"kernels\.prefill_graph: replays captured prefills: needs kernels\.cuda_graphs=true"),
        (["kernels=graphs", "kernels.skinny=false"],
         r"kernels\.target_qkv_rope: replaces the skinny QKV GEMM: needs kernels\.skinny=true \(or set "
         r"kernels\.target_qkv_rope=false\)"),
        (["kernels=graphs", "kernels.pdl_policy.norm=eager"],
         r"kernels\.pdl_policy\.norm: 'eager' is not one of default, off, early, late"),
        (["kernels=triton", "kernels.pdl_policy.gemm=early"],
         r"kernels\.pdl_policy: sets \{'gemm': 'early'\} but kernels\.pdl is false: set kernels\.pdl=true"),
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


def test_pdl_policy_is_the_kernels_roles_and_reaches_set_pdl(monkeypatch):
    """kernels.pdl_policy has one field per kernels.pdl role and its triggers are kernels.pdl's plus "default"; the
    roles set on the command line are what the engine hands to set_pdl."""
    from dataclasses import fields

    from conf.kernels_config import PDL_TRIGGERS, PdlPolicy
    from kernels import pdl

    assert tuple(f.name for f in fields(PdlPolicy)) == pdl.ROLES
    assert ("default", *pdl.TRIGGERS) == PDL_TRIGGERS
    cfg = build("generate", ["kernels=graphs", "kernels.pdl_policy.norm=late", "kernels.pdl_policy.gemm=off"])
    assert cfg.kernels.pdl_policy.overrides() == {"gemm": "off", "norm": "late"}
    assert build("generate", ["kernels=graphs"]).kernels.pdl_policy.overrides() == {}
    monkeypatch.setattr(pdl, "_policy", dict(pdl.pdl_policy()))  # restored after the test
    pdl.set_pdl(cfg.kernels.pdl, **cfg.kernels.pdl_policy.overrides())
    assert pdl.pdl_policy() == {**pdl.DEFAULT_POLICY, "gemm": "off", "norm": "late"}


def test_draft_head_topk_limit_is_the_kernels():
    from conf.schema import DRAFT_HEAD_MAX_TOPK
    from kernels.topk_logprobs import MAX_K

    assert DRAFT_HEAD_MAX_TOPK == MAX_K


def test_prefill_graphs_serve_one_gpu_groups_only():
    """kernels.prefill_graph_for: what the runtime's workers and the simulator's prefill price both ask."""
    from conf.kernels_config import KernelsConfig

    on = KernelsConfig(backend="triton", cuda_graphs=True, prefill_graph=True)
    assert on.prefill_graph_for(1) and not on.prefill_graph_for(2)
    assert not KernelsConfig(backend="triton", cuda_graphs=True).prefill_graph_for(1)
