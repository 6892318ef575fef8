"""Programmatic dependent launch (PDL) for the decode path's Triton kernels (Hopper and later).

A decode step is ~10 short kernels per layer; each one waits for the previous one to finish completely
before its own thread blocks are launched, so every boundary pays the launch and the ramp of the next
kernel on top of the tail of the previous one. With PDL (``cudaLaunchAttributeProgrammaticStreamSerialization``,
Triton's ``launch_pdl``) the next kernel may be launched while the previous one still runs; it then blocks in
``griddepcontrol.wait`` until the previous grid has completed and its memory is visible. So a kernel
launched this way must not touch global memory the previous kernel writes before that wait (the norms load their
weights before it: no kernel writes weights). Data written two or more launches back is safe to read before the
wait, because of the rule below: a kernel can only launch once every block of the previous one has passed its own
wait, i.e. once the kernel before that has completed. The tree attention relies on it with ``prefix_ready`` (its
first prefix K/V block, prefix_len and the positions, which the QKV GEMM right before it does not write).

The rule: every kernel here that takes ``USE_PDL`` does, when it is > 0, before it reads anything the previous
kernel wrote (at its start, after index math at most, except the norms' weight load and the attention's prefix_ready
loads), and never
releases before it waits::

    gdc_wait()               # the previous kernel has completed; its writes are visible
    gdc_launch_dependents()  # (USE_PDL == 1, "early") the next kernel may launch now

Waiting first, then releasing, keeps the overlap one kernel deep: a kernel's blocks are never resident behind
more than one unfinished kernel. Without the release ("late") the next kernel launches as this one's blocks
exit: it still skips the launch gap, and its blocks find the SMs nearly free. The trigger is chosen per kernel
role (DEFAULT_POLICY; measured). A kernel without the attribute (cuBLAS, torch ops) keeps full stream order,
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

TRIGGERS = {"off": 0, "early": 1, "late": 2}
"""How a kernel of one role is launched: off = ordinary launch; early = PDL, releasing the next kernel right after
its own wait; late = PDL without an explicit release (the next kernel launches as this one's blocks exit)."""
ROLES = ("gemm", "small", "pre_attention", "norm")
"""gemm: the weight-streaming kernels (skinny GEMM, SwiGLU), whose bandwidth needs their blocks spread over every
SM; small: the rest (RoPE + KV write, tree attention, the split-K reduce); norm: the (add +) RMSNorm kernels, one
program per row, each followed by a weight-streaming GEMM (QKV, SwiGLU, LM head); pre_attention: the QKV GEMM right
before the fused RoPE attention of a single-token step, whose dependent loads its first prefix K/V block and q's
RoPE angles before its wait (`kernels.tree_attention`, `prefix_ready`): an early release lets the attention's
blocks take the SMs the GEMM leaves idle (96 programs on 132 SMs at 8B) and run that load beside it."""
DEFAULT_POLICY = {"gemm": "late", "small": "late", "pre_attention": "early", "norm": "early"}
"""What `set_pdl(True)` (the `pdl` feature of kernels=graphs) uses: the best of the per-role A/Bs on the H200 (skinny
path, CUDA-graph replays; docs/LOG.md). GEMMs and small kernels late: an early release lets a GEMM's blocks take the
SMs while the previous kernel still holds some of them, so its blocks pile up two per SM and its weight stream slows
(early/early ~5% slower per Llama-3-8B step). pre_attention early: the attention's prefetch runs beside the QKV GEMM
(~0.05 ms per 8B single-token step). norm early: the next GEMM's blocks are resident while a short norm runs
(0.04-0.07 ms per 8B step; larger norms stay "small", kernels.norm.norm_role). With cuBLAS projections (no skinny
path) early/early is the better one. Numbers: docs/LOG.md."""

_policy = {role: "off" for role in ROLES}
_capable: dict[int, bool] = {}


def set_pdl(enabled: bool, **policy: str) -> None:
    """Turn programmatic dependent launch on (DEFAULT_POLICY, or per-role triggers: `gemm=`, `small=`,
    `pre_attention=`, `norm=`: a benchmark trying another policy; the runtime passes none) or off, process-wide."""
    global _policy
    for role, trigger in policy.items():
        if role not in ROLES or trigger not in TRIGGERS:
            raise ValueError(f"kernels.pdl: {role}={trigger!r}; roles {ROLES}, triggers {tuple(TRIGGERS)}")
    _policy = {**DEFAULT_POLICY, **policy} if enabled else {role: "off" for role in ROLES}


def pdl_enabled() -> bool:
    """Whether any role launches with PDL (the device may still not support it: see ``launch_pdl``)."""
    return any(t != "off" for t in _policy.values())


def pdl_policy() -> dict[str, str]:
    """The trigger per role now in force."""
    return dict(_policy)


@contextlib.contextmanager
def pdl(enabled: bool, **policy: str) -> Iterator[None]:
    """Set the switch inside a block (benchmarks, tests), restoring the previous policy after it."""
    global _policy
    before = dict(_policy)
    set_pdl(enabled, **policy)
    try:
        yield
    finally:
        _policy = before


def launch_pdl(device: torch.device, role: str = "small") -> bool:
    """True when a `role` kernel launched on `device` now uses PDL: its trigger is on and the GPU is sm90+."""
    if _policy[role] == "off" or device.type != "cuda":
        return False
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _capable:
        _capable[idx] = torch.cuda.get_device_capability(idx)[0] >= 9
    return _capable[idx]


def check_role(fn: str, role: str) -> None:
    """A kernel entry point's `pdl_role` argument: one of ROLES, else a ValueError naming `fn`."""
    if role not in ROLES:
        raise ValueError(f"{fn}: pdl_role must be one of {ROLES}, got {role!r}")


def pdl_options(device: torch.device, role: str = "small") -> dict:
    """Launch keywords for a kernel with a ``USE_PDL`` constexpr (0 ordinary, 1 early release, 2 late)."""
    if launch_pdl(device, role):
        return {"USE_PDL": TRIGGERS[_policy[role]], "launch_pdl": True}
    return {"USE_PDL": 0}


@triton.jit
def pdl_start(USE_PDL: tl.constexpr):
    """Before a kernel's first load: with USE_PDL, wait for the previous grid; with USE_PDL == 1, then release the
    next."""
    if USE_PDL > 0:
        gdc_wait()
        if USE_PDL == 1:
            gdc_launch_dependents()
