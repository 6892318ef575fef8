"""Which kernel the `kernels=graphs` runtime runs for each weight matrix, for the operator and step profilers.

bench/profile_ops.py times every GEMM by the kernel the runtime would run for it (`runtime_gemm`, `gemm_call`),
and bench/profile_steps.py builds its graph-mode steps with the config's switches (`graphs_kernels`), so that
the calibrated profile describes the runtime as it runs. The row limits are the model's own
(runtime/model.py `SKINNY_MAX_ROWS`, `MLP.FUSED_MAX_ROWS`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from runtime.model import MLP, SKINNY_MAX_ROWS

REPO = Path(__file__).resolve().parent.parent


STEP_SWITCHES = ("skinny", "pdl", "draft_head", "rope_attention", "target_qkv_rope")
"""The `kernels` switches a graph-mode step is built with (bench/profile_steps.py)."""


def graphs_kernels() -> dict[str, bool]:
    """STEP_SWITCHES of conf/kernels/graphs.yaml: the runtime graph-timed operators and steps stand for."""
    import yaml

    data = yaml.safe_load((REPO / "conf" / "kernels" / "graphs.yaml").read_text()) or {}
    return {key: bool(data.get(key, False)) for key in STEP_SWITCHES}


def runtime_gemm(matrix: str, tp: int, m: int, skinny: bool, qkv_bias: bool = False) -> str:
    """The kernel the fused-path runtime runs for one rank's `matrix` at `m` rows (runtime/model.py): swiglu
    (gate_up, the fused SwiGLU), skinny (qkv without a bias), skinny_fp32 (the LM head at TP 1: float32 logits),
    skinny_partials (o and down at TP 1: split-K partials the next norm sums), or cublas (F.linear: prefill-sized
    m, a biased qkv, and what `kernels.skinny=false` or TP keeps on cuBLAS)."""
    if matrix == "gate_up":
        return "swiglu" if m <= MLP.FUSED_MAX_ROWS else "cublas"
    if not skinny or m > SKINNY_MAX_ROWS:
        return "cublas"
    if matrix == "qkv" and not qkv_bias:
        return "skinny"
    if matrix in ("o", "down") and tp == 1:
        return "skinny_partials"
    if matrix == "lm_head" and tp == 1:
        return "skinny_fp32"
    return "cublas"


def gemm_call(impl: str, x: torch.Tensor) -> Any:
    """w -> the `impl` kernel's product with x (runtime_gemm's names), for timing with `rotating`."""
    if impl == "cublas":
        return lambda w: F.linear(x, w)
    from kernels import skinny_linear, skinny_linear_partials, swiglu

    if impl == "swiglu":
        return lambda w: swiglu(x, *w.chunk(2, dim=0))
    if impl == "skinny":
        return lambda w: skinny_linear(x, w)
    if impl == "skinny_fp32":  # the LM head's float32 logits, one buffer per N
        outs: dict[int, torch.Tensor] = {}

        def lm_head(w: torch.Tensor) -> torch.Tensor:
            out = outs.get(w.shape[0])
            if out is None:
                out = outs[w.shape[0]] = torch.empty(x.shape[0], w.shape[0], dtype=torch.float32, device=x.device)
            return skinny_linear(x, w, out=out)
        return lm_head
    if impl == "skinny_partials":
        return lambda w: skinny_linear_partials(x, w)
    raise ValueError(f"gemm_call: unknown impl {impl!r}")
