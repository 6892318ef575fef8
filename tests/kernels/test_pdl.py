"""kernels.pdl: the process-wide switch, and that it never reaches a launch off sm90+ CUDA (the CPU interpreter).

That PDL launches compute what ordinary ones do is a GPU test (tests/gpu/test_graphs.py: graphs captured with
`pdl(True)` against the eager base path, and every colocated mode lossless with kernels.skinny + kernels.pdl;
tests/gpu/test_graph_staging.py: the norms released early replay bitwise like the norms released late).
"""

from __future__ import annotations

import pytest
import torch

from kernels import add_rmsnorm
from kernels.pdl import DEFAULT_POLICY, launch_pdl, pdl, pdl_enabled, pdl_options, pdl_policy, set_pdl
from kernels.reference import add_rmsnorm_ref
from tests.tolerances import assert_close


def test_switch_policy_and_context_restore():
    set_pdl(False)  # the default; tests/conftest.py restores whatever policy the test found
    assert not pdl_enabled() and pdl_policy() == {"gemm": "off", "small": "off", "pre_attention": "off", "norm": "off"}
    with pdl(True):
        assert pdl_enabled() and pdl_policy() == DEFAULT_POLICY
        with pdl(True, gemm="off", small="late"):
            assert pdl_policy() == {**DEFAULT_POLICY, "gemm": "off", "small": "late"}
            with pdl(False):
                assert not pdl_enabled()
            assert pdl_policy() == {**DEFAULT_POLICY, "gemm": "off", "small": "late"}
        assert pdl_policy() == DEFAULT_POLICY
    assert not pdl_enabled()
    set_pdl(True, small="late")
    try:
        assert pdl_policy() == {**DEFAULT_POLICY, "small": "late"}
    finally:
        set_pdl(False)
    with pytest.raises(ValueError, match="kernels.pdl: gemm='sometimes'"):
        set_pdl(True, gemm="sometimes")
    with pytest.raises(ValueError, match="kernels.pdl: attention='early'"):
        set_pdl(True, attention="early")
    assert not pdl_enabled()  # a refused policy changes nothing


def test_cpu_launches_never_use_pdl():
    """On CPU the switch is ignored: USE_PDL=False and no launch_pdl keyword reaches the interpreter."""
    cpu = torch.device("cpu")
    with pdl(True):
        assert not launch_pdl(cpu)
        assert pdl_options(cpu) == {"USE_PDL": 0} and pdl_options(cpu, "gemm") == {"USE_PDL": 0}
        x, r = torch.randn(3, 64), torch.randn(3, 64)
        w = torch.rand(64) + 0.5
        normed, new_res = add_rmsnorm(x, r, w, 1e-5)  # a kernel with USE_PDL runs as before
    want_normed, want_res = add_rmsnorm_ref(x, r, w, 1e-5)
    assert_close(normed, want_normed, torch.float32, reduction=64, what="normed")
    assert_close(new_res, want_res, torch.float32, reduction=2, what="new_residual")


def test_pdl_role_of_a_launch_is_checked():
    """skinny_linear takes the kernels.pdl role of its launch; an unknown one is named."""
    from kernels import skinny_linear

    x, w = torch.randn(2, 32), torch.randn(48, 32)
    assert_close(skinny_linear(x, w, pdl_role="pre_attention"), x @ w.T, torch.float32, reduction=32, what="product")
    with pytest.raises(ValueError, match="skinny_linear: pdl_role must be one of .*got 'qkv'"):
        skinny_linear(x, w, pdl_role="qkv")


def test_norm_launches_take_the_norm_role_up_to_early_max_rows():
    """kernels.norm.EARLY_ROWS (the default `early_rows`): a norm over at most EARLY_MAX_ROWS rows of >= WIDE_ROW
    elements (EARLY_MAX_ROWS_NARROW from TINY_ROW up, EARLY_MAX_ROWS_TINY below) launches as "norm" (early in the
    default policy), a larger one as "small" (late); other limits are passed in; bad values named."""
    import importlib

    norm = importlib.import_module("kernels.norm")
    assert DEFAULT_POLICY["norm"] == "early" and DEFAULT_POLICY["small"] == "late"
    assert [norm.norm_role(r, 4096) for r in (1, 8, 9, 16)] == ["norm", "norm", "small", "small"]
    assert [norm.norm_role(r, 2048) for r in (1, 2, 4, 5, 8)] == ["norm", "norm", "norm", "small", "small"]
    assert [norm.norm_role(r, 1024) for r in (1, 4, 5)] == ["norm", "norm", "small"]  # TINY_ROW itself is narrow
    assert [norm.norm_role(r, 576) for r in (1, 16, 17)] == ["norm", "norm", "small"]  # SmolLM2-135M's rows
    assert [norm.norm_role(r, 576, norm.EARLY_ROWS._replace(tiny=1)) for r in (1, 2)] == ["norm", "small"]
    with pytest.raises(ValueError, match="add_rmsnorm: early_rows.tiny_row: expected an int >= 0, got -1"):
        norm.norm_role(1, 576, norm.EARLY_ROWS._replace(tiny_row=-1))
    assert norm.norm_role(1, 4096, norm.EARLY_ROWS._replace(wide=0)) == "small"
    with pytest.raises(ValueError, match="add_rmsnorm: early_rows.wide: expected an int >= 0, got None"):
        norm.norm_role(1, 4096, norm.EARLY_ROWS._replace(wide=None))
