"""kernels.pdl: the process-wide switch, and that it never reaches a launch off sm90+ CUDA (the CPU interpreter).

That PDL launches compute what ordinary ones do is a GPU test (tests/gpu/test_graphs.py: graphs captured with
`pdl(True)` against the eager base path, and every colocated mode lossless with kernels.skinny + kernels.pdl).
"""

from __future__ import annotations

import torch

from kernels import add_rmsnorm
from kernels.pdl import launch_pdl, pdl, pdl_enabled, pdl_options, set_pdl
from kernels.reference import add_rmsnorm_ref


def test_switch_and_context_restore():
    assert not pdl_enabled()  # off by default
    with pdl(True):
        assert pdl_enabled()
        with pdl(False):
            assert not pdl_enabled()
        assert pdl_enabled()
    assert not pdl_enabled()
    set_pdl(True)
    try:
        assert pdl_enabled()
    finally:
        set_pdl(False)


def test_cpu_launches_never_use_pdl():
    """On CPU the switch is ignored: USE_PDL=False and no launch_pdl keyword reaches the interpreter."""
    cpu = torch.device("cpu")
    with pdl(True):
        assert not launch_pdl(cpu)
        assert pdl_options(cpu) == {"USE_PDL": False}
        x, r = torch.randn(3, 64), torch.randn(3, 64)
        w = torch.rand(64) + 0.5
        normed, new_res = add_rmsnorm(x, r, w, 1e-5)  # a kernel with USE_PDL runs as before
    want_normed, want_res = add_rmsnorm_ref(x, r, w, 1e-5)
    torch.testing.assert_close(normed, want_normed, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(new_res, want_res)
