"""Programmatic dependent launch (PDL) for the decode path's Triton kernels (Hopper and later).

A decode step is ~10 short kernels per layer; each one waits for the previous one to finish completely
before its own thread blocks are launched, so every boundary pays the launch and the ramp of the next
kernel on top of the tail of the previous one. With PDL (``cudaLaunchAttributeProgrammaticStreamSerialization``,
Triton's ``launch_pdl``) the next kernel may be launched while the previous one still runs; it then blocks in
``griddepcontrol.wait`` until the previous grid has completed and its memory is visible. So a kernel
launched this way must not touch global memory before that wait.

Every kernel here that takes ``USE_PDL`` does, when it is true, at its very start::

    gdc_wait()               # the previous kernel has completed; its writes are visible
    gdc_launch_dependents()  # the next kernel may launch now (its blocks then wait in gdc_wait)

Waiting first, then releasing, keeps the overlap one kernel deep: a kernel's blocks are never resident behind
more than one unfinished kernel. A kernel without the attribute (cuBLAS, torch ops) keeps full stream order,
before and after, so mixing is safe. CUDA graphs capture the programmatic edges (CUDA >= 12.3).

The switch is process-wide (``set_pdl``; the runtime sets it from ``kernels.pdl``), off by default, and only
takes effect on CUDA devices of compute capability >= 9.0; the CPU interpreter never sees it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

_enabled = False
_capable: dict[int, bool] = {}


def set_pdl(enabled: bool) -> None:
    """Turn programmatic dependent launch on or off for every later launch in this process."""
    global _enabled
    _enabled = bool(enabled)


def pdl_enabled() -> bool:
    """Whether the process-wide switch is on (the device may still not support it: see ``launch_pdl``)."""
    return _enabled


@contextlib.contextmanager
def pdl(enabled: bool) -> Iterator[None]:
    """Set the switch inside a block (benchmarks, tests), restoring the previous value after it."""
    before = _enabled
    set_pdl(enabled)
    try:
        yield
    finally:
        set_pdl(before)


def launch_pdl(device: torch.device) -> bool:
    """True when kernels launched on `device` now should use PDL: the switch is on and the GPU is sm90+."""
    if not _enabled or device.type != "cuda":
        return False
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _capable:
        _capable[idx] = torch.cuda.get_device_capability(idx)[0] >= 9
    return _capable[idx]


def pdl_options(device: torch.device) -> dict:
    """Launch keywords for a kernel with a ``USE_PDL`` constexpr: both set, or USE_PDL=False alone."""
    if launch_pdl(device):
        return {"USE_PDL": True, "launch_pdl": True}
    return {"USE_PDL": False}


@triton.jit
def pdl_start(USE_PDL: tl.constexpr):
    """A kernel's first statement: with USE_PDL, wait for the previous grid, then release the next one."""
    if USE_PDL:
        gdc_wait()
        gdc_launch_dependents()
