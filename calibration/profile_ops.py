"""Operator profiler for the simulator's calibration: time operator shapes on the GPU, write traces.

    python -m calibration.profile_ops --out runs/bench/profile_traces_<date>.jsonl [--budget-s 170]
    python -m calibration.profile_ops --device cpu --quick --out /tmp/t.jsonl      # smoke test of every code path

A plain argparse script (no Hydra), so it runs on a bare GPU machine. Output: the trace file (JSON Lines of
`conf.trace.TraceRecord`, one record per measured operator shape, `extra` = the features calibrate.py fits
on) and `<out stem>.meta.json` (device, torch / triton / CUDA versions, date, git SHA, section times and
errors). Sections (each in its own try/except: a failure is reported in the meta and the rest continues;
each gets a share of `--budget-s`, unused time rolls over; the trace is rewritten after every section):

| section    | records                                   | what                                                       |
|------------|-------------------------------------------|------------------------------------------------------------|
| launch     | op.step_overhead kind launch|graph_replay | host cost of a tiny eager launch, of a 1-kernel graph replay|
| gemm       | op.gemm                                   | every weight matrix of the presets, by the runtime's kernel|
|            |                                           | (runtime_kernels.py: cuBLAS, skinny, SwiGLU; `impl`)       |
|            |                                           | (qkv, o, gate_up, down, lm_head) at TP shards 1..8, M in   |
|            |                                           | {1, 4, 8, 16, 32, 64} (+ 256, 1024 at TP 1-2 for prefill)  |
| gemm_fp8   | op.gemm with weight_bits 8                | the layer matrices whose `weight_bits=8` copies the runtime|
|            |                                           | streams (`_fp8` impls: skinny, partials, SwiGLU on fp8     |
|            |                                           | codes + row scales, fp16 inputs) at TP 1-2, the same M     |
| attention  | op.attention                              | the runtime's attention backend (triton tree attention if  |
|            |                                           | it matches the reference here, else the reference; the     |
|            |                                           | record says which) over ctx {256, 1K, 4K, 16K} x tree size |
|            |                                           | / queries {1, 8, 16, 32, 64}, head shapes of the presets   |
| compaction | op.compaction                             | KVCache.keep (what the runtime calls) and kernels.kv_compact|
| steps      | op.step_overhead kind verify|expand,      | whole runtime steps on random-weight models: TargetWorker  |
|            | op.tree_op kind select|reroot             | forward + verdict + KV keep; DraftWorker.expand; propose /  |
|            |                                           | advance (tree bookkeeping); as CUDA-graph replays with the |
|            |                                           | fused kernels under graph timing (meta `steps_mode`), else |
|            |                                           | eager                                                      |
| step_graphs| op.step_graph                             | the same steps' CUDA graphs (graph steps only), profiled:  |
|            |                                           | exposed time per kernel class (gemm, attention, other)     |
|            |                                           | inside a replay, PDL overlap included (graph_profile.py)    |
| comm       | op.allreduce (eager, graph), op.message,  | 2 GPUs, NCCL (profile_comm.py, spawned ranks):             |
|            | op.p2p                                    | 16 B..16 MB eager and inside a CUDA graph; the runtime's    |
|            |                                           | LeaderChannel ping-pong (one way = RTT / 2); raw send/recv  |

Timing: device operations (GEMMs, attention) with `--op-timing graph` (default): calls captured back to
back in one CUDA graph (`triton.testing.do_bench_cudagraph`, median), cycling through copies of the operands
that overflow the L2 (`rotating`, 256 MB), i.e. as the runtime's graph steps run them, without host launch
time; `--op-timing eager`: `triton.testing.do_bench` medians of single launches (L2 flushed before every
call; each fit's intercept then carries the host launch time: the first profiles). Host-inclusive
steps with `time.perf_counter` around the call and a device synchronisation, median of repetitions after
warm-up (Triton JIT compiles are in the warm-up);
collectives with CUDA events over back-to-back calls, identical counts on both ranks. Random data
everywhere (bf16 on GPU, fp32 on CPU). On CPU every timing is perf_counter based: the numbers are only for
testing the code paths.

The environment keeps NVLink multicast off (NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
NVSHMEM_DISABLE_NVLS=1), as runtime.launch does.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # runnable as a plain script from anywhere
    sys.path.insert(0, str(REPO))

NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
for _k, _v in NCCL_ENV.items():
    os.environ.setdefault(_k, _v)

import torch  # noqa: E402

from calibration.profiler import (  # noqa: E402
    Profiler,
    choose_attention_backend,
    random_parents,
    rotating,
)
from calibration.runtime_kernels import gemm_call, graphs_kernels, runtime_gemm  # noqa: E402
from conf.presets import MODEL_PRESETS, ModelShape, check_tp  # noqa: E402
from conf.rundir import BENCH_DIR  # noqa: E402
from conf.trace import shapes_str, write_traces  # noqa: E402
from runtime.tree import ancestor_mask  # noqa: E402

GEMM_PRESETS = ("llama3-8b", "llama3.2-1b", "llama3.2-3b", "llama3-70b", "qwen2-72b", "smollm2-135m",
                "smollm2-draft")
TP_ORDER = (1, 2, 4, 8, 3, 5, 6, 7)  # sweep order: the common degrees first, so a cut budget keeps them
GEMM_M = (1, 4, 8, 16, 32, 64)
PREFILL_M = (256, 1024)  # at TP 1-2: enough FLOP-bound rows to fit the FLOP coefficient
ATTN_HEADS = (("llama3-8b", 1), ("llama3.2-1b", 1), ("llama3-8b", 2), ("smollm2-135m", 1), ("llama3-70b", 1),
              ("llama3.2-3b", 1), ("smollm2-draft", 1), ("llama3-70b", 8))
ATTN_CTX = (256, 1024, 4096, 16384)
ATTN_T = (1, 8, 16, 32, 64)  # 32: the 1B draft's w 32 expansion (128 query rows at GQA 4)
COMPACT_PRESETS = ("llama3-8b", "llama3.2-1b")
COMPACT_N = (1, 4, 16, 64)
# The steps section's plan and its worker loops live in calibration/profile_steps.py.
SHARES = {"launch": 2, "gemm": 50, "gemm_fp8": 15, "attention": 35, "compaction": 6, "steps": 75, "step_graphs": 40,
          "comm": 32}
"""Relative share of the time budget per section (unused time rolls over to the later sections); the steps' share
covers the 1B preset's expansions at a 160 s budget (docs/LOG.md)."""
DEFAULT_SECTIONS = tuple(SHARES)


# The comm section's sizes and its rank function live in calibration/profile_comm.py.
def _shard(n: int, tp: int) -> int:
    return -(-n // tp)


def layer_matrices(shape: ModelShape, tp: int) -> list[tuple[str, int, int]]:
    """(name, k, n) of one rank's weight matrices, as the runtime shards them (zero-padded, fused qkv / w13)
    and as simulator/cost_model.py costs them; the LM head is vocabulary-parallel."""
    q, kv = _shard(shape.num_heads, tp) * shape.head_dim, _shard(shape.num_kv_heads, tp) * shape.head_dim
    inter, h = _shard(shape.intermediate_size, tp), shape.hidden_size
    return [("qkv", h, q + 2 * kv), ("o", q, h), ("gate_up", h, 2 * inter), ("down", inter, h),
            ("lm_head", h, _shard(shape.vocab_size, tp))]


def _tp_degrees(shape: ModelShape) -> list[int]:
    out = []
    for tp in TP_ORDER:
        try:
            check_tp(shape, tp, "tp")
            out.append(tp)
        except ValueError:
            pass
    return out


# ---- sections --------------------------------------------------------------------------------------------
def section_launch(p: Profiler) -> None:
    """Host cost of launching one tiny kernel eagerly, and of replaying a one-kernel CUDA graph."""
    x = torch.zeros(1, device=p.device)
    n = 200

    def eager() -> None:
        for _ in range(n):
            x.add_(1.0)

    p.emit("op.step_overhead", p.host_s(eager, warmup=1, reps=5) / n, kind="launch", launches=1)
    p.emit("op.step_overhead", p.host_s(lambda: None, warmup=1, reps=20), kind="sync")
    if p.device.type == "cuda":
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            x.add_(1.0)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            x.add_(1.0)
        p.emit("op.step_overhead", p.host_s(graph.replay, warmup=3, reps=20), kind="graph_replay", launches=1)


FP8_TP = (1, 2)
"""TP degrees of the gemm_fp8 section: drafts run at TP 1 (the runtime's fp8 weights are a draft's option)."""


def gemm_plan(p: Profiler, weight_bits: int = 16) -> list[tuple[str, int, str, int, int, tuple[tuple[int, str], ...]]]:
    """(preset, tp, matrix, k, n, ((M, impl), ...)) in sweep order: degree by degree over all presets; impl is the
    runtime's kernel under graph timing (`runtime_gemm`), else cublas; (k, n, M, impl) deduplicated. `weight_bits` 8
    (the gemm_fp8 section): only the layer matrices whose fp8 copies the runtime streams (`runtime_gemm` with
    weight_bits 8: an `_fp8` impl, whatever the timing), at TP degrees FP8_TP and the decode row counts."""
    fp8 = weight_bits == 8
    skinny = fp8 or (graphs_kernels()["skinny"] if p.graph_timing else False)
    seen: set[tuple[int, int, int, str]] = set()
    plan = []
    presets = [MODEL_PRESETS[n] for n in p.opt("gemm_presets", GEMM_PRESETS)]
    for tp in FP8_TP if fp8 else TP_ORDER:
        for shape in presets:
            if tp not in _tp_degrees(shape):
                continue
            for mat, k, n in layer_matrices(shape, tp):
                prefill = tp <= 2 and not fp8
                ms = tuple(p.opt("gemm_m", GEMM_M)) + (tuple(p.opt("prefill_m", PREFILL_M)) if prefill else ())
                runs = tuple((m, runtime_gemm(mat, tp, m, skinny, shape.qkv_bias, weight_bits)
                              if p.graph_timing or fp8 else "cublas") for m in ms)
                runs = tuple(r for r in runs if (not fp8 or r[1].endswith("_fp8")) and (k, n, *r) not in seen)
                seen.update((k, n, *r) for r in runs)
                if runs:
                    plan.append((shape.name, tp, mat, k, n, runs))
    return plan


def section_gemm(p: Profiler, weight_bits: int = 16) -> None:
    """One rank's weight GEMMs (y = x W^T) per preset, TP shard and M, by the kernel the runtime runs: under graph
    timing (the kernels=graphs runtime) `runtime_gemm`'s choice, else F.linear as nn.Linear runs it. `weight_bits` 8
    (the gemm_fp8 section): the runtime's fp8 kernels on random weights quantized per row
    (`kernels.skinny_linear.quantize_rows_fp8`) and fp16 inputs (what the runtime hands them, runtime/model.py);
    records: op.gemm with weight_bits 8 and the fp8 copy's bytes (`cost_model.fp8_matrix_bytes`); on CPU the kernels
    run in Triton's interpreter (TRITON_INTERPRET=1)."""
    from kernels.skinny_linear import quantize_rows_fp8
    from simulator.cost_model import fp8_matrix_bytes

    fp8 = weight_bits == 8
    section = "gemm_fp8" if fp8 else "gemm"
    gen = torch.Generator(device=p.device).manual_seed(2 if fp8 else 1)
    elt = torch.tensor([], dtype=p.dtype).element_size()
    for preset, tp, mat, k, n, runs in gemm_plan(p, weight_bits):
        if not p.time_left():
            print(f"  {section}: budget reached at {preset} tp{tp} {mat}", flush=True)
            return
        try:
            if fp8:
                wbytes = fp8_matrix_bytes(k, n)
                w = quantize_rows_fp8((torch.randn(n, k, device=p.device, generator=gen) * k**-0.5).to(p.dtype))
                ws = [w] + [tuple(t.clone() for t in w) for _ in range(p.copies(wbytes) - 1)]
                labels = {"weight_bits": 8, "dtype": "float8_e4m3fn", "x_dtype": "float16"}
            else:
                wbytes = float(k * n * elt)
                w = torch.randn(n, k, device=p.device, dtype=p.dtype, generator=gen) * k**-0.5
                ws = [w] + [w.clone() for _ in range(p.copies(wbytes) - 1)]
                labels = {"dtype": str(p.dtype).removeprefix("torch.")}
            for m, impl in runs:
                x = (torch.randn(m, k, device=p.device, generator=gen).to(torch.float16) if fp8 else
                     torch.randn(m, k, device=p.device, dtype=p.dtype, generator=gen))
                s = p.kernel_s(rotating(gemm_call(impl, x), ws))
                p.emit("op.gemm", s, shapes=shapes_str((m, k), (n, k)), tp=tp, tokens=m, preset=preset, matrix=mat,
                       m=m, k=k, n=n, weight_bytes=wbytes, flops=2.0 * m * k * n, **labels, impl=impl)
            del w, ws
        except Exception as exc:  # one shape failing (e.g. memory) must not end the section
            p.error(section, f"{preset} tp{tp} {mat} {k}x{n}", exc)


def section_gemm_fp8(p: Profiler) -> None:
    """The fp8 weight GEMMs (`weight_bits=8`): `section_gemm`'s fp8 sweep."""
    section_gemm(p, weight_bits=8)


def section_attention(p: Profiler) -> None:
    """One layer's attention of T tree queries over a prefix of ctx keys plus the T-node tree (ancestor mask)."""
    from runtime.attention import AttnMeta, make_attention_backend

    backend_name = choose_attention_backend(p)
    p.attention_backend = backend_name
    attn = make_attention_backend(backend_name)
    gen = torch.Generator().manual_seed(2)
    elt = torch.tensor([], dtype=p.dtype).element_size()
    for preset, tp in p.opt("attn_heads", ATTN_HEADS):
        shape = MODEL_PRESETS[preset]
        hq, hkv, d = _shard(shape.num_heads, tp), _shard(shape.num_kv_heads, tp), shape.head_dim
        for ctx in p.opt("attn_ctx", ATTN_CTX):
            if not p.time_left():
                print(f"  attention: budget reached at {preset} tp{tp} ctx {ctx}", flush=True)
                return
            try:
                tmax = max(p.opt("attn_t", ATTN_T))
                k = torch.randn(ctx + tmax, hkv, d, generator=gen).to(p.device, p.dtype)
                v = torch.randn(ctx + tmax, hkv, d, generator=gen).to(p.device, p.dtype)
                kvs = [(k, v)] + [(k.clone(), v.clone()) for _ in range(p.copies(2 * k.numel() * elt) - 1)]
                for t in p.opt("attn_t", ATTN_T):
                    mask = ancestor_mask(random_parents(t, gen), t).to(p.device)
                    q = torch.randn(t, hq, d, generator=gen).to(p.device, p.dtype)
                    slots = torch.arange(ctx, ctx + t, device=p.device)
                    meta = AttnMeta.tree(ctx, t, slots, slots, mask)
                    s = p.kernel_s(rotating(lambda kv, q=q, meta=meta, sc=d**-0.5: attn(q, kv[0], kv[1], meta, sc),
                                            kvs))
                    kv_len = ctx + t
                    p.emit("op.attention", s, shapes=shapes_str((t, hq, d), (kv_len, hkv, d)), tp=tp, ctx=ctx,
                           tokens=t, impl=backend_name, preset=preset, hq=hq, hkv=hkv, head_dim=d, prefix_len=ctx,
                           tree_len=t, kv_len=kv_len, kv_bytes=float(kv_len * 2 * hkv * d * elt),
                           flops=4.0 * t * kv_len * hq * d)
            except Exception as exc:
                p.error("attention", f"{preset} tp{tp} ctx {ctx}", exc)


def section_compaction(p: Profiler) -> None:
    """KV compaction after a re-root: n kept tree slots moved to the prefix end, all layers at once."""
    from runtime.kv_cache import KVCache

    gen = torch.Generator().manual_seed(3)
    elt = torch.tensor([], dtype=p.dtype).element_size()
    impls: dict[str, Callable[..., Any]] = {"keep": lambda cache, src, dst: cache.keep(src, dst)}
    if p.device.type == "cuda":
        try:
            from kernels import kv_compact

            impls["kv_compact"] = lambda cache, src, dst: kv_compact(cache.kv, src, dst)
        except Exception as exc:
            p.error("compaction", "import kernels.kv_compact", exc)
    for preset in p.opt("compact_presets", COMPACT_PRESETS):
        shape = MODEL_PRESETS[preset]
        prefix, tree = 1024, 256
        try:
            cache = KVCache(shape.num_layers, prefix + tree, shape.num_kv_heads, shape.head_dim, p.dtype, p.device)
            cache.kv.normal_()
            for n in p.opt("compact_n", COMPACT_N):
                src = prefix + torch.sort(torch.randperm(tree, generator=gen)[:n]).values
                src = src.to(p.device)
                nbytes = 2.0 * shape.num_layers * 2 * n * shape.num_kv_heads * shape.head_dim * elt
                for impl, fn in impls.items():
                    if not p.time_left():
                        return
                    s = p.kernel_s(lambda fn=fn, src=src, c=cache, dst=prefix: fn(c, src, dst))
                    p.emit("op.compaction", s, tp=1, ctx=prefix, tokens=n, impl=impl, preset=preset, kept=n,
                           bytes=nbytes)
            del cache
        except Exception as exc:
            p.error("compaction", preset, exc)


def section_steps(p: Profiler) -> None:
    """Whole runtime steps on random-weight models (calibration/profile_steps.py)."""
    from calibration.profile_steps import run_steps

    run_steps(p)


def section_step_graphs(p: Profiler) -> None:
    """The steps' CUDA graphs profiled: exposed time per kernel class inside a replay (calibration/profile_steps.py)."""
    from calibration.profile_steps import GRAPH_REPS, run_steps

    run_steps(p, graph_reps=GRAPH_REPS)


def section_comm(p: Profiler) -> None:
    """Collectives and messages between 2 GPUs, in a subprocess bounded by the section's budget."""
    if p.device.type == "cuda" and torch.cuda.device_count() < 2:
        raise RuntimeError(f"comm needs 2 GPUs, found {torch.cuda.device_count()}")
    if p.device.type == "cuda":
        torch.cuda.empty_cache()
    budget = max(5.0, p.deadline - time.perf_counter())
    with tempfile.TemporaryDirectory() as tmp:
        rows_path = os.path.join(tmp, "comm_rows.jsonl")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--comm-worker", rows_path, "--device", p.device.type]
        if p.quick:
            cmd.append("--quick")
        try:
            proc = subprocess.run(cmd, timeout=budget, capture_output=True, text=True, cwd=REPO)
            if proc.returncode != 0:
                raise RuntimeError(f"comm worker exited {proc.returncode}: {proc.stderr[-1500:]}")
        except subprocess.TimeoutExpired as exc:
            p.error("comm", f"worker still running after {budget:.0f} s (killed; rows so far are kept)", exc)
        rows = [json.loads(line) for line in Path(rows_path).read_text().splitlines()] if os.path.exists(
            rows_path) else []
    for row in rows:
        name, seconds = row.pop("name"), row.pop("seconds")
        p.emit(name, seconds, tp=2 if name == "op.allreduce" else 1, **row)


SECTIONS: dict[str, Callable[[Profiler], None]] = {
    "launch": section_launch, "gemm": section_gemm, "gemm_fp8": section_gemm_fp8, "attention": section_attention,
    "compaction": section_compaction, "steps": section_steps, "step_graphs": section_step_graphs,
    "comm": section_comm,
}


# ---- driver ----------------------------------------------------------------------------------------------
def software_meta(device: torch.device) -> dict[str, Any]:
    """Device and software facts for the meta JSON (and, through calibrate, the profile)."""
    from conf.rundir import git_sha

    meta: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "git_sha": git_sha(),
                            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                            "python": sys.version.split()[0], "runtime": "pytorch eager (no CUDA graphs)"}
    try:
        import triton

        meta["triton"] = triton.__version__
    except ImportError:
        meta["triton"] = None
    meta["device"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    meta["device_count"] = torch.cuda.device_count() if device.type == "cuda" else 0
    return meta


def write_outputs(p: Profiler, meta: dict[str, Any]) -> None:
    """(Re)write the trace and its meta JSON atomically."""
    from conf.rundir import atomic_write_json

    write_traces(p.out, p.records)
    counts: dict[str, int] = {}
    for r in p.records:
        counts[r.name] = counts.get(r.name, 0) + 1
    # The steps' mode decides which configs the fitted step overhead serves (simulator/cost_model.py).
    runtime = ("CUDA-graph steps (runtime.graphs), fused Triton kernels" if p.steps_mode == "graphs"
               else meta.get("runtime", "pytorch eager (no CUDA graphs)"))
    atomic_write_json(p.out.with_suffix(".meta.json"), {**meta, "runtime": runtime, "steps_mode": p.steps_mode,
                                                         "steps_kernels": p.steps_kernels,
                                                         "attention_impl": p.attention_backend,
                                                         "record_counts": counts, "errors": p.errors})


def main(argv: list[str] | None = None) -> int:
    """Run the chosen sections within the budget; write traces + meta; 0 if any record was written."""
    today = datetime.date.today().isoformat()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(BENCH_DIR / f"profile_traces_{today}.jsonl"))
    ap.add_argument("--budget-s", type=float, default=170.0, help="wall-clock budget of all sections")
    ap.add_argument("--only", default="", help="comma-separated sections: " + ",".join(SECTIONS))
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--quick", action="store_true", help="tiny shapes (CPU smoke test)")
    ap.add_argument("--op-timing", default="graph", choices=("graph", "eager"),
                    help="device operations timed inside CUDA graphs (as the runtime runs them) or one launch "
                         "at a time (the first profiles)")
    ap.add_argument("--comm-worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.comm_worker:
        from calibration.profile_comm import comm_worker

        return comm_worker(args.comm_worker, args.device, args.quick)

    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    meta = software_meta(device)
    p = Profiler(device=device, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32,
                 out=Path(args.out), quick=args.quick, device_name=meta["device"], run_id=f"profile_{today}",
                 op_timing=args.op_timing)
    meta["op_timing"] = args.op_timing if device.type == "cuda" else "host"
    chosen = [s for s in args.only.split(",") if s] or list(DEFAULT_SECTIONS)
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        ap.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    print(json.dumps(meta), flush=True)
    end = p.t0 + args.budget_s
    seconds: dict[str, float] = {}
    for i, name in enumerate(chosen):
        now = time.perf_counter()
        rest = sum(SHARES[s] for s in chosen[i:])
        p.deadline = now + max(0.0, end - now) * SHARES[name] / rest
        n0 = len(p.records)
        print(f"== {name} (budget {p.deadline - now:.0f} s)", flush=True)
        try:
            SECTIONS[name](p)
        except Exception as exc:  # report and carry on with the next section
            p.error(name, "section", exc)
        seconds[name] = round(time.perf_counter() - now, 1)
        print(f"   {len(p.records) - n0} records in {seconds[name]} s", flush=True)
        meta["section_seconds"] = seconds
        write_outputs(p, meta)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(f"wrote {p.out} ({len(p.records)} records, {len(p.errors)} errors) in "
          f"{time.perf_counter() - p.t0:.0f} s; sections {seconds}")
    print(json.dumps({"traces": str(p.out), "records": len(p.records), "errors": len(p.errors),
                      "section_seconds": seconds}))
    return 0 if p.records else 1


if __name__ == "__main__":
    sys.exit(main())
