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
