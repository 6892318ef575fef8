"""bench/bench_step_variants.py on CPU: bad arguments name the option; the run itself needs a CUDA GPU."""

from __future__ import annotations

import pytest

from bench.bench_step_variants import VARIANTS, main


@pytest.mark.parametrize("argv,match", [
    (["--variants", "base,fast"], r"--variants: 'fast' is not one of base, pdl"),
    (["--cases", "llama3-8b:8"], r"--cases: 'llama3-8b:8' is not preset:rows:tree_len"),
    (["--cases", "llama9:8:8"], r"--cases: 'llama9:8:8': preset: unknown model preset 'llama9'"),
    (["--cases", "llama3-8b:9:8"], r"--cases: 'llama3-8b:9:8': needs 1 <= rows <= tree_len"),
    (["--cases", "llama3-8b:65:65"], r"rows <= 64"),
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
