"""Where one decoding step's time goes: torch.profiler over verify and expand forwards of one model.

Where a step's time goes when it runs far above its byte floor: this script answers "host or device, which ops,
how many launches" in one call.

    python -m calibration.profile_step --preset llama3-8b --dtype bfloat16 --backend triton --rows 8 --ctx 512
    python -m calibration.profile_step --preset tiny-llama --device cpu --backend reference     # CPU smoke run

Prints: wall time per step (median of --reps, synchronised), device time per step (sum of kernel times),
kernel launches per step, and the top ops by host (self CPU) time; writes the table + a Chrome trace
under --out. Plain argparse: it runs on the GPU machine without Hydra.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from conf.presets import model_preset  # noqa: E402
from conf.rundir import atomic_write_json, git_sha  # noqa: E402
from runtime.attention import AttnMeta, make_attention_backend  # noqa: E402
from runtime.fused_decode import FusedDecoder  # noqa: E402
from runtime.kv_cache import KVCache  # noqa: E402
from runtime.loader import build_model  # noqa: E402
from simulator.cost_model import matrix_bytes  # noqa: E402


def chain_step_meta(prefix_len: int, rows: int, device: torch.device) -> AttnMeta:
    """A verify step over a chain of `rows` tree nodes after `prefix_len` cached tokens."""
    mask = torch.tril(torch.ones(rows, rows, dtype=torch.bool, device=device))
    pos = torch.arange(prefix_len, prefix_len + rows, device=device)
    return AttnMeta.tree(prefix_len, rows, pos, pos, mask)


def sync(device: torch.device) -> None:
    """Wait for queued device work (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


HBM_BYTES_PER_S = 4.29e12
"""H200 HBM3e bandwidth, the byte floor's denominator (docs/BENCHMARKS.md)."""


def byte_floor_s(model: torch.nn.Module, ctx: int, rows: int, hbm: float = HBM_BYTES_PER_S,
                 weight_bits: int = 16) -> float:
    """(every weight byte once + the K/V bytes of ctx + rows tokens) / HBM bandwidth: one forward's floor.
    `weight_bits=8`: the layers' projections as the runtime's fp8 copies stream them (1 B per weight + a float32 scale
    per output row; a biased QKV stays at its dtype), the rest at its dtype."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    if weight_bits == 8:  # the fp8 layout the simulator prices too (one rank of TP 1)
        for layer in model.layers:
            for name, lin in (("qkv", layer.attn.wqkv), ("o", layer.attn.wo), ("gate_up", layer.mlp.w13),
                              ("down", layer.mlp.w2)):
                if lin.bias is None:
                    n, k = lin.weight.shape
                    weights += matrix_bytes(name, k, n, 8, 1) - lin.weight.numel() * lin.weight.element_size()
    layers, heads, head_dim = model.cache_spec()
    kv = 2 * layers * heads * head_dim * model.norm.weight.element_size() * (ctx + rows)
    return (weights + kv) / hbm


def time_graph(model: torch.nn.Module, cache: KVCache, attn: object, rows: int, ctx: int, reps: int,
               gen: torch.Generator) -> dict:
    """The step as a CUDA graph (runtime/graphs.py): median replay time alone and with input staging."""
    from runtime.graphs import StepGraph, StepSpec
    from runtime.tree import ancestor_mask

    graph = StepGraph(model, cache, attn, StepSpec(rows, rows))
    parents = [-1] + [max(0, (i - 1) // 2) for i in range(1, rows)]  # a binary tree of `rows` nodes
    depth = [0] * rows
    for i in range(1, rows):
        depth[i] = depth[parents[i]] + 1
    ids = torch.randint(0, model.shape.vocab_size, (rows,), generator=gen)
    pos, slots, mask = torch.tensor([ctx + d for d in depth]), torch.arange(rows), ancestor_mask(parents, rows)
    alone, staged = [], []
    for _ in range(3):
        graph.replay(ids, pos, slots, ctx, mask)
    for _ in range(reps):
        a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        a.record()
        graph.graph.replay()
        b.record()
        graph.replay(ids, pos, slots, ctx, mask)
        c.record()
        c.synchronize()
        alone.append(a.elapsed_time(b) * 1e-3)
        staged.append(b.elapsed_time(c) * 1e-3)
    return {"graph_replay_s": statistics.median(alone), "graph_step_s": statistics.median(staged)}


def profile_step(preset: str, dtype: str, device: torch.device, backend: str, rows: int, ctx: int,
                 reps: int, out: Path | None, fused: bool = False, graph: bool = False) -> dict:
    """Build the model, run `reps` timed steps, then one profiled step; returns the summary dict.

    `fused`: the model's fused Triton path (`runtime.fused_decode.FusedDecoder`); `graph`: also time the step
    captured as a CUDA graph (needs `backend=triton` on CUDA).
    """
    shape = model_preset(preset)
    plain = build_model(shape, dtype, device, seed=0)
    model = FusedDecoder(plain) if fused else plain
    layers, heads, head_dim = model.cache_spec()
    cache = KVCache(layers, ctx + rows, heads, head_dim, model.dtype, device)
    attn = make_attention_backend(backend)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, shape.vocab_size, (rows,), generator=gen).to(device)
    meta = chain_step_meta(ctx, rows, device)
    with torch.no_grad():
        for _ in range(3):  # warm-up: Triton compilation, allocator, cuBLAS handles
            model(ids, meta, cache, attn)
        sync(device)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            model(ids, meta, cache, attn)
            sync(device)
            times.append(time.perf_counter() - t0)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            model(ids, meta, cache, attn)
            sync(device)
    events = prof.key_averages()
    device_s = sum(getattr(e, "self_device_time_total", 0.0) for e in events) * 1e-6
    launches = sum(e.count for e in events if e.key.startswith(("cudaLaunchKernel", "cuLaunchKernel")))
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:15]
    kernels = sorted((e for e in events if getattr(e, "self_device_time_total", 0.0) > 0
                      and not e.key.startswith(("cudaLaunch", "cuLaunch"))),
                     key=lambda e: e.self_device_time_total, reverse=True)[:15]
    graph_times = time_graph(model, cache, attn, rows, ctx, max(reps, 20), gen) if graph else {}
    floor = byte_floor_s(plain, ctx, rows)
    summary = {
        "preset": preset, "dtype": dtype, "device": str(device), "backend": backend, "rows": rows, "ctx": ctx,
        "fused": fused, **graph_times, "byte_floor_s": floor,
        "graph_over_floor": graph_times["graph_replay_s"] / floor if graph else None,
        "wall_step_s": statistics.median(times), "device_step_s": device_s, "kernel_launches": launches,
        "top_host_ops": [{"op": e.key, "calls": e.count, "self_cpu_s": e.self_cpu_time_total * 1e-6}
                         for e in top],
        "top_device_kernels": [{"kernel": e.key[:120], "calls": e.count,
                                "device_s": e.self_device_time_total * 1e-6} for e in kernels],
        "git_sha": git_sha(), "torch": torch.__version__,
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        tag = f"{preset}_{backend}{'_fused' if fused else ''}_r{rows}"
        atomic_write_json(out / f"profile_step_{tag}.json", summary)
        prof.export_chrome_trace(str(out / f"profile_step_{tag}.trace.json"))
    return summary


def main(argv: list[str] | None = None) -> dict:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="llama3-8b")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--backend", default="triton", choices=["reference", "triton"])
    p.add_argument("--rows", type=int, default=8, help="tokens in the step (verify width)")
    p.add_argument("--ctx", type=int, default=512, help="cached tokens before the step")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--fused", action="store_true", help="the fused Triton path of the model")
    p.add_argument("--graph", action="store_true", help="also time the step as a CUDA graph")
    a = p.parse_args(argv)
    s = profile_step(a.preset, a.dtype, torch.device(a.device), a.backend, a.rows, a.ctx, a.reps, a.out,
                     fused=a.fused, graph=a.graph)
    print(f"{a.preset} {a.backend}{' fused' if a.fused else ''} rows={a.rows} ctx={a.ctx}: wall "
          f"{s['wall_step_s'] * 1e3:.2f} ms/step, device {s['device_step_s'] * 1e3:.2f} ms/step, "
          f"{s['kernel_launches']} kernel launches; byte floor {s['byte_floor_s'] * 1e3:.2f} ms")
    if a.graph:
        print(f"  CUDA graph: replay {s['graph_replay_s'] * 1e3:.3f} ms ({s['graph_over_floor']:.2f}x floor), "
              f"with input staging {s['graph_step_s'] * 1e3:.3f} ms")
    for row in s["top_host_ops"]:
        print(f"  {row['self_cpu_s'] * 1e6:9.1f} us  {row['calls']:5d}x  {row['op']}")
    print("  device time per kernel (one profiled eager step):")
    for row in s["top_device_kernels"]:
        print(f"  {row['device_s'] * 1e6:9.1f} us  {row['calls']:5d}x  {row['kernel'][:90]}")
    print(json.dumps({k: v for k, v in s.items() if k not in ("top_host_ops", "top_device_kernels")}))
    return s


if __name__ == "__main__":
    main()
