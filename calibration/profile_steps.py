"""The steps section of calibration/profile_ops.py: whole runtime steps on random-weight models.

Per preset of STEP_PLAN and prefix length of STEP_CTX: `TargetWorker` verify steps (forward + verdict + KV
keep) at each verify width, and `DraftWorker` expansions at each draft width with the async loop's
bookkeeping between rounds (select the top-bs subtree, re-root on a hit). Host-inclusive timing (median of
STEP_REPS after STEP_WARMUP, device synchronised around each call). With graph timing on CUDA and the Triton
backend, the models take the fused path and the workers replay CUDA-graph steps, as the `kernels=graphs`
runtime does (`Profiler.steps_mode` = graphs), with that config's skinny GEMMs and PDL launches
(conf/kernels/graphs.yaml; `Profiler.steps_kernels`); otherwise the steps run eagerly.

The step_graphs section (`run_steps(p, graph_reps=GRAPH_REPS)`) builds the same steps and profiles their CUDA graphs'
replays instead: per kernel class (GEMM, attention, other) the exposed time inside the replay, PDL overlap included
(`op.step_graph`; simulator/calibrate.py fits the `gemm_graph` / `attention_graph` operators on them). It runs in its
own section, after the host-timed steps, so that no step is host-timed after the profiler has run in the process.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from typing import Any

import torch

from calibration.profiler import STEP_REPS, STEP_WARMUP, Profiler, choose_attention_backend, random_parents
from calibration.runtime_kernels import STEP_SWITCHES, graphs_kernels
from conf.kernels_config import KernelFeatures
from conf.presets import MODEL_PRESETS
from runtime.worker_spec import WorkerSpec

# (preset, verify rows, expand widths): the validation pair's shapes plus other presets for the step fit. The 1B
# draft's widths span what the runtime replays: 1 (a lone root's refill graph) to 16 (the autoconfig pick's w), and
# 32 (`autoconfig --w 24,32`); the 36f9b02 refit, which saw only 4 and 8, priced a 16-row expansion 0.04 ms above a
# one-row one, the runs 0.16 ms; the c52c1c3 profile, which stopped at 16, simulates workload a's bs 8 w 32 d 3
# at 419.2 tok/s where the runtime measured 395.7 (+5.9%; w 16 and 24 within 1.3%).
STEP_PLAN = (("llama3-8b", (1, 4, 5, 8, 16), ()), ("llama3.2-1b", (1, 8), (1, 4, 8, 16, 32)),
             ("smollm2-draft", (1, 8), (4, 8)), ("smollm2-135m", (1, 8), (8,)), ("llama3.2-3b", (1, 8), (4, 8)))
# Prefix lengths of step measurements. Each verify keeps the root, so the prefix grows by one token per step;
# eagerly, these starts stay inside one 64-key block count of the tree-attention kernel for the whole
# measurement (200..~215 -> 4 blocks, 970..~985 -> 16), so no Triton re-compile lands in the timed steps.
STEP_CTX = (200, 970)
MAX_TREE_NODES = 256  # draft tree region in the step measurements: the runtime's (spec.max_tree_nodes), whose
# graphs attend over all of it
TOPK = 8
ROUND_EXPANSIONS, ROUND_BS = 2, 8  # expand steps per round (d) and verify width of the timed bookkeeping


def _step_prompt(vocab: int, ctx: int, gen: torch.Generator) -> list[int]:
    return torch.randint(0, vocab, (ctx + 1,), generator=gen).tolist()


def _verify_steps(p: Profiler, model: Any, attn: Any, backend: str, preset: str, rows: int, ctx: int,
                  gen: torch.Generator, graph_reps: int = 0) -> None:
    from conf.messages import DraftProposal
    from runtime.target_worker import TargetWorker

    vocab = model.shape.token_count
    # each verify keeps the root and any accepted nodes: room for all rows of every step
    tw = TargetWorker(model, attn, WorkerSpec(rows, ctx + (STEP_WARMUP + STEP_REPS) * rows + 8),
                      KernelFeatures(backend=backend, cuda_graphs=p.graph_steps(backend)))
    tw.start(_step_prompt(vocab, ctx, gen))
    times, prefixes = [], []
    for i in range(STEP_WARMUP + STEP_REPS):
        parents = random_parents(rows, gen)
        tokens = torch.randint(0, vocab, (rows,), generator=gen).tolist()
        prop = DraftProposal(0, i, tuple(tokens), tuple(parents))
        prefix = tw.prefix_len
        p.sync()
        t = time.perf_counter()
        tw.forward(prop)
        verdict = tw.decide(None, None)
        tw.keep(verdict.path)
        p.sync()
        if i >= STEP_WARMUP:
            times.append(time.perf_counter() - t)
            prefixes.append(prefix)
    if graph_reps:
        _emit_graph_profile(p, tw.graph, graph_reps, rows=rows, ctx=ctx, kind="verify", preset=preset,
                            kv_len=tw.prefix_len + rows, backend=backend)
        return
    ctx_mid = int(statistics.median(prefixes))
    p.emit("op.step_overhead", statistics.median(times), tp=1, ctx=ctx_mid, tokens=rows, kind="verify", preset=preset,
           kv_len=ctx_mid + rows, backend=backend, reps=len(times), min_s=min(times), max_s=max(times),
           graphs=tw.graph is not None)


def _expand_steps(p: Profiler, model: Any, attn: Any, backend: str, preset: str, w: int, ctx: int,
                  gen: torch.Generator, fused_head: bool = False, graph_reps: int = 0) -> None:
    from runtime.draft_worker import DraftWorker

    vocab = model.shape.token_count
    prompt = _step_prompt(vocab, ctx, gen)
    dw = DraftWorker(model, attn, WorkerSpec(w, ctx + 64, topk=TOPK, max_tree_nodes=MAX_TREE_NODES),
                     KernelFeatures(backend=backend, cuda_graphs=p.graph_steps(backend), draft_head=fused_head))
    dw.start(prompt)
    expand, kv_lens, select, reroot = [], [], [], []
    it, since_round = 0, 0
    while len(expand) < STEP_WARMUP + STEP_REPS:
        if since_round < ROUND_EXPANSIONS and dw.tree.can_expand(w, MAX_TREE_NODES):
            p.sync()
            t = time.perf_counter()
            dw.expand()  # ends with a host copy of the log-probs: synchronised
            expand.append(time.perf_counter() - t)
            kv_lens.append(dw.prefix_len + dw.tree.num_slots)
            since_round += 1
            continue
        # end of a round, as in the async loop: select the top-bs subtree, re-root on a hit (the top child)
        p.sync()
        t = time.perf_counter()
        dw.propose(0, it, ROUND_BS)
        t_sel = time.perf_counter() - t
        children = dw.children_tokens(0)
        p.sync()
        t = time.perf_counter()
        dw.advance((0,), children[0] if children else 0)
        p.sync()
        select.append(t_sel)
        reroot.append(time.perf_counter() - t)
        it, since_round = it + 1, 0
        # restart before the promoted root tokens fill the prefix capacity (max_seq_len = ctx + 64)
        if not dw.tree.can_expand(w, MAX_TREE_NODES) or dw.prefix_len > ctx + 48:
            dw.start(prompt)
    if graph_reps:  # the w-row graph, on the inputs of its last expansion (over the whole tree region)
        _emit_graph_profile(p, dw.graph, graph_reps, rows=w, ctx=ctx, kind="expand", preset=preset,
                            kv_len=dw.prefix_len + MAX_TREE_NODES, backend=backend)
        return
    times, lens = expand[STEP_WARMUP:], kv_lens[STEP_WARMUP:]
    kv_len = int(statistics.median(lens))
    p.emit("op.step_overhead", statistics.median(times), tp=1, ctx=ctx, tokens=w, kind="expand", preset=preset,
           kv_len=kv_len, backend=backend, topk=TOPK, reps=len(times), min_s=min(times), max_s=max(times),
           graphs=dw.graph is not None)
    if select:
        p.emit("op.tree_op", statistics.median(select), tp=1, ctx=ctx, tokens=ROUND_BS, kind="select", preset=preset,
               bs=ROUND_BS, w=w, reps=len(select))
        p.emit("op.tree_op", statistics.median(reroot), tp=1, ctx=ctx, tokens=ROUND_BS, kind="reroot", preset=preset,
               bs=ROUND_BS, w=w, reps=len(reroot))


def run_steps(p: Profiler, graph_reps: int = 0) -> None:
    """Whole runtime steps (the simulator's forward steps plus their host work) on random-weight models.

    `graph_reps` > 0 (the step_graphs section): instead of host-timing the steps, profile that many replays of each
    step's CUDA graph after the warm-up steps and emit `op.step_graph` records (`_emit_graph_profile`)."""
    from runtime.attention import make_attention_backend
    from runtime.loader import build_model

    if p.attention_backend is None:
        p.attention_backend = choose_attention_backend(p)
    backend = p.attention_backend
    if graph_reps and not p.graph_steps(backend):
        print(f"  step_graphs: skipped: needs CUDA-graph steps (CUDA, graph timing, the Triton backend); here "
              f"device {p.device.type}, op timing {p.op_timing}, backend {backend}", flush=True)
        return
    attn = make_attention_backend(backend)
    gen = torch.Generator().manual_seed(4)
    for preset, rows_list, w_list in p.opt("step_plan", STEP_PLAN):
        if not p.time_left():
            print(f"  steps: budget reached before {preset}", flush=True)
            return
        try:
            # as the runtime's Engine builds it: the fused Triton path with the Triton backend, and in graph mode
            # the kernels=graphs config's skinny GEMMs and PDL launches
            kernels = (graphs_kernels() if p.graph_steps(backend) else dict.fromkeys(STEP_SWITCHES, False))
            model = build_model(MODEL_PRESETS[preset], p.dtype, p.device, seed=0)
            if p.graph_steps(backend):
                p.steps_mode, p.steps_kernels = "graphs", kernels
        except Exception as exc:
            p.error("steps", f"build {preset}", exc)
            continue
        with _pdl_launches(kernels["pdl"]):
            _preset_steps(p, model, attn, backend, preset, rows_list, w_list, gen, kernels, graph_reps)
        del model
        if p.device.type == "cuda":
            torch.cuda.empty_cache()


GRAPH_REPS = 5
"""Profiled replays per step graph in the step_graphs section (the median per kernel)."""


def _emit_graph_profile(p: Profiler, graph: Any, reps: int, *, rows: int, ctx: int, **labels: Any) -> None:
    """Profile `reps` replays of a worker's StepGraph (graph_profile.py: each kernel's exposed time) and emit an
    `op.step_graph` record: seconds = the replay's span, extra = the exposed and own time and calls per operator class
    (gemm, attention, other; `graph_profile.kernel_class`) and `labels` (kind, preset, kv_len, backend)."""
    from calibration.graph_profile import class_totals, profile_graph

    if graph is None:
        raise RuntimeError("step_graphs: the worker has no CUDA graph to profile")
    prof = profile_graph(graph.graph.replay, reps=reps)
    classes = class_totals(prof)
    p.emit("op.step_graph", prof["span_us"] * 1e-6, tp=1, ctx=ctx, tokens=rows, **labels,
           **{f"{cls}_s": v["exposed_us"] * 1e-6 for cls, v in classes.items()},
           **{f"{cls}_own_s": v["duration_us"] * 1e-6 for cls, v in classes.items()},
           **{f"{cls}_calls": v["calls"] for cls, v in classes.items()},
           kernels=prof["kernels_per_replay"], replays=prof["replays"], replays_dropped=prof["replays_dropped"])


def _pdl_launches(enabled: bool) -> contextlib.AbstractContextManager:
    """PDL launches inside the block (kernels/pdl.py) when `enabled`; nothing (no Triton import) otherwise."""
    if not enabled:
        return contextlib.nullcontext()
    from kernels.pdl import pdl

    return pdl(True)


def _preset_steps(p: Profiler, model: Any, attn: Any, backend: str, preset: str, rows_list: tuple[int, ...],
                  w_list: tuple[int, ...], gen: torch.Generator, kernels: dict[str, bool], graph_reps: int = 0) -> None:
    """One model's verify and expand steps at every STEP_CTX prefix length, each kind with the kernels the Engine
    gives its role (`kernels`: STEP_SWITCHES; runtime/engine.py `_model`): a verify step is the target's
    (kernels.target_qkv_rope), an expansion the draft's (kernels.draft_head). `graph_reps`: see `run_steps`."""
    from runtime.fused_decode import FusedDecoder, KernelPlan

    expand = functools.partial(_expand_steps, fused_head=kernels["draft_head"])
    triton = backend == "triton"
    for ctx in p.opt("step_ctx", STEP_CTX):
        for what, fn, widths in (("verify rows", _verify_steps, rows_list), ("expand w", expand, w_list)):
            decoder = FusedDecoder(model, KernelPlan.for_role(
                model.shape, skinny=kernels["skinny"], rope_attention=kernels["rope_attention"] and triton,
                target_qkv_rope=kernels["target_qkv_rope"], target=fn is _verify_steps)) if triton else model
            for width in widths:
                if p.time_left():
                    try:
                        fn(p, decoder, attn, backend, preset, width, ctx, gen, graph_reps=graph_reps)
                    except Exception as exc:  # one shape failing must not end the section
                        p.error("steps", f"{preset} {what} {width} ctx {ctx}", exc)
