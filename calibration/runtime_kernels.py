"""Which kernel the `kernels=graphs` runtime runs for each weight matrix, for the operator and step profilers.

calibration/profile_ops.py times every GEMM by the kernel the runtime would run for it (`runtime_gemm`, `gemm_call`),
and calibration/profile_steps.py builds its graph-mode steps with the config's switches (`graphs_kernels`), so that
the calibrated profile describes the runtime as it runs. The row limits are the fused decode path's own
(runtime/fused_decode.py `SKINNY_MAX_ROWS`, `SWIGLU_MAX_ROWS`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from runtime.fused_decode import SKINNY_MAX_ROWS, SWIGLU_MAX_ROWS

STEP_SWITCHES = ("skinny", "pdl", "draft_head", "rope_attention", "target_qkv_rope")
"""The kernels features (conf/kernels_config.py KernelFeatures) a graph-mode step is built with
(calibration/profile_steps.py)."""


def graphs_kernels() -> dict[str, bool]:
    """STEP_SWITCHES of the kernels=graphs preset (conf/kernels_config.py PRESETS): the runtime graph-timed operators
    and steps stand for."""
    from conf.kernels_config import PRESETS

    return {key: getattr(PRESETS["graphs"], key) for key in STEP_SWITCHES}


FP8_IMPLS = ("swiglu", "skinny", "skinny_partials")
"""The kernels that stream a layer matrix's fp8 copy at weight_bits 8 (the LM head and cuBLAS calls stay 16-bit)."""


def runtime_gemm(matrix: str, tp: int, m: int, skinny: bool, qkv_bias: bool = False, weight_bits: int = 16) -> str:
    """The kernel the fused-path runtime runs for one rank's `matrix` at `m` rows (runtime/fused_decode.py): swiglu
    (gate_up, the fused SwiGLU), skinny (qkv without a bias), skinny_fp32 (the LM head at TP 1: float32 logits),
    skinny_partials (o and down at TP 1: split-K partials the next norm sums), or cublas (F.linear: prefill-sized
    m, a biased qkv, and what `kernels.ablate=[skinny,target_qkv_rope]` or TP keeps on cuBLAS). `weight_bits=8`: the
    skinny kernels that stream the fp8 copies (`cost_model.streams_fp8`: swiglu, skinny, skinny_partials) take an
    `_fp8` suffix."""
    if matrix == "gate_up":
        impl = "swiglu" if m <= SWIGLU_MAX_ROWS else "cublas"
    elif not skinny or m > SKINNY_MAX_ROWS:
        impl = "cublas"
    elif matrix == "qkv" and not qkv_bias:
        impl = "skinny"
    elif matrix in ("o", "down") and tp == 1:
        impl = "skinny_partials"
    elif matrix == "lm_head" and tp == 1:
        impl = "skinny_fp32"
    else:
        impl = "cublas"
    if weight_bits == 8 and skinny and impl in FP8_IMPLS:
        return impl + "_fp8"
    return impl


def gemm_call(impl: str, x: torch.Tensor) -> Any:
    """w -> the `impl` kernel's product with x (runtime_gemm's names), for timing with `rotating`. An `_fp8` impl
    takes w as the (fp8 codes, float32 row scales) pair of `kernels.skinny_linear.quantize_rows_fp8`."""
    if impl.endswith("_fp8"):
        return _fp8_call(impl.removesuffix("_fp8"), x)
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


def _fp8_call(impl: str, x: torch.Tensor) -> Any:
    """(q, scale) -> the fp8 `impl` kernel's product with x, as runtime/fused_decode.py calls it."""
    from kernels import skinny_linear, skinny_linear_partials, swiglu

    if impl == "swiglu":
        def fused(w: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            (gate, up), (s_gate, s_up) = w[0].chunk(2, dim=0), w[1].chunk(2)
            return swiglu(x, gate, up, scale_gate=s_gate, scale_up=s_up)
        return fused
    if impl == "skinny":
        return lambda w: skinny_linear(x, w[0], w_scale=w[1])
    if impl == "skinny_partials":
        return lambda w: skinny_linear_partials(x, w[0], w_scale=w[1])
    raise ValueError(f"gemm_call: unknown impl {impl + '_fp8'!r}")
