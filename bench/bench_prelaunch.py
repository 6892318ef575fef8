"""What launching the next verify graph before its inputs exist would save (one GPU, a target alone on its stream).

    python bench/bench_prelaunch.py [--preset llama3-8b] [--rows 8] [--steps 100] [--blocks 5] [--host-us 30]
                                    [--out bench/results]

The runtime's verify loop (CUDA graphs: in-graph input copies, spin read-back) does, per step: spin until the last
replay's verdict reached pinned memory, the host's own work (`--host-us` of busy time standing in for the verdict,
the messages and the next proposal's receipt), build and stage the next inputs, `graph.replay()`. The GPU idles from
the end of a replay until that launch reaches it. A pre-launched loop queues, while the previous replay still runs,
a stream wait on a pinned 32-bit word (`cuStreamWaitValue32`, CUDA driver API through ctypes: no kernel spins) and
the next replay behind it; once the host has staged the inputs it writes the word, and the queued replay starts
(its first node copies the staged inputs, as ever). `graph.replay()` and the launch latency leave the critical path.

Both loops run the same captured graph (greedy rows' argmax in the graph, spin read-back) on the same inputs, in
interleaved blocks of `--steps` steps; per block the host-clock time per step; medians over blocks. Each step's
read-back argmax of the two loops must agree bitwise (the run fails otherwise). Writes
`<out>/prelaunch_<date>.json` (git SHA, device, date, config, per-block times) and prints a table.

A measurement, not a runtime mode: wiring it into the engine needs a target alone on its GPU (async_tree, TP 1):
anything else queued on the stream behind the waiting replay, or a device-wide sync, would wait for a word the host
writes only later.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from conf.rundir import atomic_write_json, git_sha  # noqa: E402

CU_STREAM_WAIT_VALUE_GEQ = 0x0
"""cuStreamWaitValue32's flag: wait until (int32)(*addr - value) >= 0."""


class StreamWord:
    """A pinned host int32 the device can wait on: `wait(value)` queues on the current stream a wait until the word
    is >= value (cuStreamWaitValue32_v2, no kernel), `set(value)` writes it from the host."""

    def __init__(self) -> None:
        self.host = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        self._np = self.host.numpy()
        self._cuda = ctypes.CDLL("libcuda.so.1")
        dptr = ctypes.c_uint64()
        self._check(self._cuda.cuMemHostGetDevicePointer_v2(ctypes.byref(dptr), ctypes.c_void_p(self.host.data_ptr()),
                                                            0), "cuMemHostGetDevicePointer_v2")
        self.dptr = dptr.value
        self._wait = self._cuda.cuStreamWaitValue32_v2
        self._wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        self._wait.restype = ctypes.c_int

    @staticmethod
    def _check(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"bench_prelaunch: {what} returned CUresult {rc}")

    def wait(self, value: int) -> None:
        stream = torch.cuda.current_stream().cuda_stream
        self._check(self._wait(ctypes.c_void_p(stream), self.dptr, value, CU_STREAM_WAIT_VALUE_GEQ),
                    "cuStreamWaitValue32_v2")

    def set(self, value: int) -> None:
        self._np[0] = value


def busy(us: float) -> None:
    """Spin the host for `us` microseconds (the verdict, messages and receipt a real step does here)."""
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def build(preset: str, rows: int, ctx: int, cap: int):
    """The target as kernels=graphs runs it (fused path, PDL default policy), a cache of `cap` slots with `ctx`
    random tokens, and its verify graph with the rows' argmax read back through pinned memory."""
    from bench.bench_step_variants import prefill_random
    from conf.presets import model_preset
    from kernels.pdl import set_pdl
    from runtime.attention import make_attention_backend
    from runtime.graphs import StepGraph
    from runtime.kv_cache import KVCache
    from runtime.loader import build_model
    from runtime.model import role_kernels

    device = torch.device("cuda")
    set_pdl(True)
    model = build_model(model_preset(preset), "bfloat16", device, seed=0)
    model.use_fused_kernels(True, **role_kernels(model.shape, skinny=True, rope_attention=True, target_qkv_rope=True,
                                                 target=True))
    layers, heads, head_dim = model.cache_spec()
    cache = KVCache(layers, cap + rows, heads, head_dim, model.dtype, device)
    attn = make_attention_backend("triton")
    with torch.no_grad():
        graph = StepGraph(model, cache, attn, rows, rows, keep_rows=rows, verdict="argmax")
        prefill_random(model, cache, attn, ctx, torch.Generator().manual_seed(0))
    torch.cuda.synchronize()
    return model, graph


def step_inputs(rows: int, ctx: int, vocab: int, steps: int, seed: int) -> list:
    """`steps` proposals of a binary tree of `rows` nodes after `ctx` tokens, random ids (never zeros)."""
    from runtime.tree import proposal_inputs

    gen = torch.Generator().manual_seed(seed)
    parents = [-1] + [(i - 1) // 2 for i in range(1, rows)]
    return [proposal_inputs(torch.randint(1, vocab, (rows,), generator=gen).tolist(), parents, ctx, rows)
            for _ in range(steps)]


def run_plain(graph, inputs: list, ctx: int, host_us: float) -> tuple[float, list]:
    """The runtime's loop: read back, host work, stage, launch. Seconds per step and each step's argmax."""
    outs = []
    graph.load_inputs(inputs[0], ctx)
    graph.launch()
    start = time.perf_counter()
    for inp in inputs[1:]:
        outs.append(graph.host_outputs()[0].copy())
        busy(host_us)
        graph.load_inputs(inp, ctx)
        graph.launch()
    outs.append(graph.host_outputs()[0].copy())
    return (time.perf_counter() - start) / (len(inputs) - 1), outs


def run_prelaunched(graph, word: StreamWord, inputs: list, ctx: int, host_us: float) -> tuple[float, list]:
    """The same steps with the next replay queued behind a wait on `word` before its inputs are staged."""
    outs, buf = [], graph.inputs
    base = int(word.host[0])
    graph.load_inputs(inputs[0], ctx)
    graph.launch()
    word.wait(base + 1)
    graph.graph.replay()  # step 1, queued behind the wait while step 0 runs
    start = time.perf_counter()
    for k, inp in enumerate(inputs[1:], start=1):
        outs.append(graph.host_outputs()[0].copy())  # step k - 1's read-back (its ticket is buf.loads)
        busy(host_us)
        buf.load_inputs(inp, ctx)  # staging only: the queued replay copies the buffer once released
        word.set(base + k)  # release step k
        if k + 1 < len(inputs):
            word.wait(base + k + 1)
            graph.graph.replay()  # step k + 1, queued while step k runs
    outs.append(graph.host_outputs()[0].copy())
    return (time.perf_counter() - start) / (len(inputs) - 1), outs


def main(argv: list[str] | None = None) -> dict:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="llama3-8b")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--ctx", type=int, default=1024)
    p.add_argument("--cap", type=int, default=2048)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--host-us", type=float, default=30.0)
    p.add_argument("--out", default="bench/results")
    a = p.parse_args(argv)
    if a.steps < 2 or a.blocks < 1 or a.rows < 1 or a.host_us < 0:
        raise SystemExit("bench_prelaunch: needs --steps >= 2, --blocks >= 1, --rows >= 1, --host-us >= 0")
    if not torch.cuda.is_available():
        raise SystemExit("bench_prelaunch: needs a CUDA device (CUDA graphs and a driver stream wait)")
    model, graph = build(a.preset, a.rows, a.ctx, a.cap)
    word = StreamWord()
    inputs = step_inputs(a.rows, a.ctx, model.shape.vocab_size, a.steps, seed=1)
    run_plain(graph, inputs[:10], a.ctx, a.host_us)  # warm-up of both paths
    run_prelaunched(graph, word, inputs[:10], a.ctx, a.host_us)
    times: dict[str, list[float]] = {"plain": [], "prelaunched": []}
    for _ in range(a.blocks):
        t_plain, out_plain = run_plain(graph, inputs, a.ctx, a.host_us)
        t_pre, out_pre = run_prelaunched(graph, word, inputs, a.ctx, a.host_us)
        times["plain"].append(t_plain)
        times["prelaunched"].append(t_pre)
        bad = [k for k, (x, y) in enumerate(zip(out_plain, out_pre)) if not (x == y).all()]
        if bad:
            raise SystemExit(f"bench_prelaunch: the pre-launched loop's argmax differs at steps {bad[:10]}")
    torch.cuda.synchronize()
    med = {k: statistics.median(v) for k, v in times.items()}
    record = {"benchmark": "prelaunch", "git_sha": git_sha(), "device": torch.cuda.get_device_name(),
              "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "config": {"preset": a.preset, "rows": a.rows, "ctx": a.ctx, "cap": a.cap, "steps": a.steps,
                         "blocks": a.blocks, "host_us": a.host_us,
                         "graph": "kernels=graphs target path, staging graph, verdict argmax, spin read-back"},
              "seconds_per_step": times, "median_s": med, "saved_s": med["plain"] - med["prelaunched"],
              "argmax_equal": True}
    out = Path(a.out) / f"prelaunch_{record['date']}.json"
    atomic_write_json(out, record)
    print("| loop | ms per step (median) | blocks |\n|---|---|---|")
    for k, v in times.items():
        print(f"| {k} | {med[k] * 1e3:.4f} | {', '.join(f'{x * 1e3:.4f}' for x in v)} |")
    print(f"saved per step: {(med['plain'] - med['prelaunched']) * 1e6:.1f} us; argmax equal in every step; -> {out}")
    return record


if __name__ == "__main__":
    main()
