"""The profilers' timing harness (calibration/profile_ops.py's sections and calibration/profile_steps.py's worker
steps share it): one run's state (`Profiler`: device, records, errors, budget), device-operation timing inside CUDA
graphs or eagerly, host-inclusive medians, the --quick sweep table, and the attention backend check."""

from __future__ import annotations

import itertools
import json
import math
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from conf.trace import TraceRecord
from runtime.tree import ancestor_mask

STEP_WARMUP, STEP_REPS = 3, 10  # host-timed calls: warm-up, then the median of these repetitions
ATTN_CHECK_TOL = 5e-2  # bf16 (eps 7.8e-3) over softmax-weighted sums of unit-variance values, plus margin
QUICK = {  # --quick (CPU smoke test): tiny shapes, few repetitions
    "gemm_presets": ("tiny-llama", "tiny-llama-draft"), "gemm_m": (1, 8), "prefill_m": (64,),
    "attn_heads": (("tiny-llama", 1), ("tiny-llama", 2)), "attn_ctx": (64, 256), "attn_t": (1, 8),
    "compact_presets": ("tiny-llama",), "compact_n": (1, 8),
    "step_plan": (("tiny-llama", (1, 4), (2,)), ("tiny-llama-draft", (1,), (2,))), "step_ctx": (40,),
}
ROTATE_BYTES, MAX_COPIES = 256 << 20, 64  # graph timing: operand copies cycled per measurement (> 4 x L2)


def rotating(fn: Callable[[Any], Any], operands: list[Any]) -> Callable[[], Any]:
    """A no-argument call of `fn` on the next of `operands`, cycling: captured back to back in a CUDA graph,
    successive calls read different memory, as successive layers of a forward do."""
    cycle = itertools.cycle(operands)
    return lambda: fn(next(cycle))




# ---- records ---------------------------------------------------------------------------------------------
@dataclass
class Profiler:
    """Shared state of one profiling run: device, timing, records, errors, budget."""

    device: torch.device
    dtype: torch.dtype
    out: Path
    quick: bool
    device_name: str
    run_id: str
    t0: float = field(default_factory=time.perf_counter)
    records: list[TraceRecord] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    deadline: float = math.inf
    attention_backend: str | None = None
    """Backend the attention section chose (triton | reference); None until checked."""
    op_timing: str = "graph"
    """How kernel_s times device operations: graph (back-to-back calls replayed as one CUDA graph, no host
    launch time, as the runtime's graph steps run them) | eager (one launch at a time, L2 flushed)."""

    @property
    def graph_timing(self) -> bool:
        """Whether device operations are timed inside CUDA graphs (CUDA only)."""
        return self.op_timing == "graph" and self.device.type == "cuda"

    steps_mode: str = "eager"
    """How the steps section ran the workers: graphs (runtime/graphs.py, when graph timing and the Triton
    backend apply) | eager."""
    steps_kernels: dict | None = None
    """The graph-mode steps' `kernels.skinny` / `kernels.pdl` (conf/kernels/graphs.yaml), None for eager steps."""

    def graph_steps(self, backend: str) -> bool:
        """Whether whole runtime steps are measured as the `kernels=graphs` runtime runs them (CUDA graphs)."""
        return self.graph_timing and backend == "triton"

    def copies(self, nbytes: float) -> int:
        """How many copies of an operand a graph-timed measurement cycles through so that they overflow the L2
        (ROTATE_BYTES in all, at most MAX_COPIES): consecutive layers never find their weights or KV in L2."""
        if not self.graph_timing:
            return 1
        return max(1, min(MAX_COPIES, math.ceil(ROTATE_BYTES / max(nbytes, 1.0))))

    def opt(self, quick_key: str, full: Any) -> Any:
        """The full sweep value, or the --quick one."""
        return QUICK[quick_key] if self.quick else full

    def emit(self, name: str, seconds: float, *, shapes: str = "", tp: int = 1, ctx: int = 0, tokens: int = 0,
             **extra: Any) -> None:
        """Append one trace record (extra = the operator's features and labels)."""
        self.records.append(TraceRecord(name=name, shapes=shapes, tp=tp, ctx=ctx, device=self.device_name,
                                        start_s=time.perf_counter() - self.t0, duration_s=float(seconds),
                                        run_id=self.run_id, tokens=tokens, extra=json.dumps(extra)))

    def error(self, section: str, what: str, exc: BaseException) -> None:
        """Record a failure (the run continues)."""
        self.errors.append({"section": section, "what": what, "error": repr(exc)[:500],
                            "traceback": traceback.format_exc()[-2000:]})
        print(f"  {section} {what} FAILED: {exc!r}", flush=True)

    def time_left(self) -> bool:
        """True while the current section's deadline has not passed."""
        return time.perf_counter() < self.deadline

    # ---- timing ----
    def sync(self) -> None:
        """Wait for the device."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def kernel_s(self, fn: Callable[[], Any]) -> float:
        """Median seconds of one call of a device operation: graph timing (`do_bench_cudagraph`: calls captured
        back to back, no launch gaps; pass a `rotating` fn) or eager (`do_bench`, L2 flushed before each)."""
        if self.device.type != "cuda":
            return self.host_s(fn, warmup=1, reps=3 if self.quick else 10)
        import triton.testing

        if self.graph_timing:
            return float(triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median")) * 1e-3
        try:
            ms = triton.testing.do_bench(fn, warmup=3, rep=15, return_mode="median")
        except TypeError:  # older Triton: no return_mode
            ms = triton.testing.do_bench(fn, warmup=3, rep=15, quantiles=[0.5])
        return float(ms) * 1e-3

    def host_s(self, fn: Callable[[], Any], warmup: int = STEP_WARMUP, reps: int = STEP_REPS) -> float:
        """Median wall seconds of one call including its device work (synchronised before and after)."""
        times = []
        for i in range(warmup + reps):
            self.sync()
            t = time.perf_counter()
            fn()
            self.sync()
            if i >= warmup:
                times.append(time.perf_counter() - t)
        return statistics.median(times)


def random_parents(t: int, gen: torch.Generator) -> list[int]:
    return [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, t)]




def choose_attention_backend(p: Profiler) -> str:
    """'triton' if kernels.tree_attention runs here and matches the reference on a small tree, else 'reference'."""
    from runtime.attention import AttnMeta, make_attention_backend

    if p.device.type != "cuda":
        return "reference"  # the interpreter is far too slow for timing
    try:
        gen = torch.Generator().manual_seed(5)
        t, prefix, hq, hkv, d = 8, 100, 32, 8, 128
        parents = random_parents(t, gen)
        mask = ancestor_mask(parents, len(parents)).to(p.device)
        q = torch.randn(t, hq, d, generator=gen).to(p.device, p.dtype)
        k = torch.randn(prefix + t, hkv, d, generator=gen).to(p.device, p.dtype)
        v = torch.randn(prefix + t, hkv, d, generator=gen).to(p.device, p.dtype)
        meta = AttnMeta.tree(prefix, t, torch.arange(prefix, prefix + t, device=p.device),
                             torch.arange(prefix, prefix + t, device=p.device), mask)
        got = make_attention_backend("triton")(q, k, v, meta, d**-0.5).float()
        want = make_attention_backend("reference")(q, k, v, meta, d**-0.5).float()
        err = (got - want).abs().max().item()
        if not err <= ATTN_CHECK_TOL:
            raise ValueError(f"triton tree attention differs from the reference by {err:.3g} > {ATTN_CHECK_TOL}")
        return "triton"
    except Exception as exc:
        p.error("attention", "triton check (falling back to the reference backend)", exc)
        return "reference"


