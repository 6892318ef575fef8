"""Where a prompt prefill's time goes: host launch time against device time, per model and prompt length.

    python bench/prefill_probe.py [--presets smollm2-135m,smollm2-draft] [--lengths 37,128,512] [--out bench/results]

Why: on the real pair (SmolLM2-135M + its draft, 4 requests of ~38 prompt tokens, 128 new tokens) every mode's
wall time holds ~16-18 ms per request besides its decode iterations (runtime_real_pair_2026-12-01_954a1bf*.json:
wall minus tokens / accepted x iteration), while the simulator prices the two prefills at ~1 ms: it prices a
prefill from the device-time operator fits, but the runtime's prefill is an eager forward (no CUDA graph), a
launch per kernel from Python. This probe times `runtime.tree_cache.prefill` as the engine runs it, on random
bf16 weights and random prompts (the first preset is built as a target, the others as drafts):

    kernels    graph: kernels.prefill_graph (a replay of the prompt's length bucket; the first prompt of a bucket
               captures it, in the warm-up); triton: the fused kernels, eager; reference: torch's
    host_s     perf_counter from the call to its return, the device idle and synchronised before (the launches)
    wall_s     perf_counter from the call to a device synchronisation after it (what a request waits)
    device_s   CUDA events around the call (the stream's time, launch gaps included)

Medians over `--reps` after `--warmup` calls (the first compiles the Triton kernels at that length). Writes
`<out>/prefill_probe_<date>_<sha>.json` (git SHA, device, date, config, rows) and prints a table. CPU runs only
check the code path (no events; device_s = wall_s).
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from conf.rundir import atomic_write_json, git_sha  # noqa: E402


def engine_model(preset: str, kernels: str, device: torch.device, dtype: torch.dtype, target: bool):
    """The model of `preset` as the engine builds it under kernels=graphs for its role (`kernels` reference: torch's
    path), its attention backend, and the kernels config used."""
    from conf import compose_config
    from conf.presets import model_preset
    from runtime.attention import make_attention_backend
    from runtime.loader import build_model
    from runtime.model import role_kernels

    shape = model_preset(preset)
    backend = "reference" if kernels == "reference" else "triton"
    kcfg = compose_config("generate", ["kernels=graphs"]).kernels  # the engine's switches under kernels=graphs
    model = build_model(shape, dtype, device, seed=0)
    if backend == "triton":
        from kernels.pdl import set_pdl

        set_pdl(kcfg.pdl, **kcfg.pdl_policy.overrides())
        model = model.use_fused_kernels(True, **role_kernels(
            shape, skinny=kcfg.skinny, rope_attention=kcfg.rope_attention, target_qkv_rope=kcfg.target_qkv_rope,
            target=target))
    return model, make_attention_backend(backend), kcfg


def build(preset: str, kernels: str, device: torch.device, dtype: torch.dtype, target: bool):
    """`engine_model`'s model and attention backend, a KV cache, and (`kernels` graph) its prefill graphs."""
    from runtime.kv_cache import KVCache

    model, attn, _ = engine_model(preset, kernels, device, dtype, target)
    layers, heads, head_dim = model.cache_spec()
    cache = KVCache(layers, 2048, heads, head_dim, model.dtype, device)
    graphs = None
    if kernels == "graph":  # kernels.prefill_graph: a replay per length bucket
        from runtime.graphs import PrefillGraphs

        graphs = PrefillGraphs(model, cache, attn)
    return model, attn, cache, graphs


def time_prefill(model, attn, cache, graphs, prompt: list[int], device: torch.device, warmup: int, reps: int
                 ) -> dict[str, float]:
    """Medians (seconds) of host, wall and device time of one prefill of `prompt`."""
    from runtime.tree_cache import prefill

    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    host, wall, dev = [], [], []
    for i in range(warmup + reps):
        sync()
        if cuda:
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ev0.record()
        t0 = time.perf_counter()
        prefill(model, cache, attn, prompt, device, graphs)
        t1 = time.perf_counter()
        if cuda:
            ev1.record()
        sync()
        t2 = time.perf_counter()
        if i >= warmup:
            host.append(t1 - t0)
            wall.append(t2 - t0)
            dev.append(ev0.elapsed_time(ev1) * 1e-3 if cuda else t2 - t0)
    return {"host_s": statistics.median(host), "wall_s": statistics.median(wall),
            "device_s": statistics.median(dev)}


def host_profile(model, attn, cache, graphs, prompt: list[int], device: torch.device, reps: int, top: int) -> str:
    """cProfile of `reps` prefills (after the timed ones: compiled, warm): the `top` functions by own time."""
    import cProfile
    import io
    import pstats

    from runtime.tree_cache import prefill

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(reps):
        prefill(model, cache, attn, prompt, device, graphs)
    if device.type == "cuda":
        torch.cuda.synchronize()
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def profile_states(tw, graphs, prompt: list[int], reps: int = 8) -> dict:
    """The chained AR step's kernels (`bench.graph_profile`) after an eager and after a replayed prefill, and the kernel
    keys whose own or exposed time differs most between the two (us per step)."""
    from bench.graph_profile import profile_graph

    out = {}
    for name, g in (("eager", None), ("replayed", graphs)):
        tw.prefill_graphs = g
        tw.start(prompt)
        tw.chain_step(prompt[-1])
        for _ in range(16):
            tw.chain_step(None)
        out[name] = profile_graph(lambda: tw.chain_step(None), reps=reps)
    for name, g in (("eager", None), ("replayed", graphs)):
        out[name]["chained"] = profile_chained(tw, g, prompt, out[name]["kernels_per_replay"])
    tw.prefill_graphs = graphs
    by = {k: {r["kernel"]: r for r in out[k]["kernels"]} for k in out}
    diffs = []
    for key in set(by["eager"]) | set(by["replayed"]):
        a, b = by["eager"].get(key), by["replayed"].get(key)
        diffs.append({"kernel": key, "calls": (a or b)["calls"],
                      "own_us": [a and a["duration_us"], b and b["duration_us"]],
                      "exposed_us": [a and a["exposed_us"], b and b["exposed_us"]],
                      "exposed_diff_us": (b["exposed_us"] if b else 0.0) - (a["exposed_us"] if a else 0.0)})
    diffs.sort(key=lambda d: abs(d["exposed_diff_us"]), reverse=True)
    print(f"profiled step span: eager {out['eager']['span_us']:.1f} us, replayed {out['replayed']['span_us']:.1f} us")
    for name in out:
        c = out[name]["chained"]
        print(f"chained, after the {name} prefill: period {c['period_us']:.1f} us, span {c['span_us']:.1f}, gap to the "
              f"next step {c['gap_us']:.2f}, first kernel's start after the last one's end {c['lead_us']:.2f}")
        for row in c["kernels"][:8]:
            print(f"    {row['kernel'][:90]:90s} x{row['calls']:3d} own {row['own_us']:.1f} us", flush=True)
    for d in diffs[:12]:
        print(f"  {d['kernel'][:90]:90s} x{d['calls']:3d} own {d['own_us']} exposed {d['exposed_us']} "
              f"diff {d['exposed_diff_us']:+.1f}", flush=True)
    return {"case": "profile: eager vs replayed prefill", "span_us": [out["eager"]["span_us"],
                                                                        out["replayed"]["span_us"]],
            "kernels": diffs[:20], "chained": {k: out[k]["chained"] for k in out}}


def profile_chained(tw, graphs, prompt: list[int], per_step: int, steps: int = 48) -> dict:
    """`steps` chained AR steps profiled back to back (no pause) after the prefill: the step period (start to start),
    span (first kernel's start to last kernel's end), the gap before the next step's first kernel, and each kernel
    key's own time per step (medians over steps), cutting the kernel sequence every `per_step` kernels."""
    import json
    import tempfile

    from bench.graph_profile import kernel_spans

    tw.prefill_graphs = graphs
    tw.start(prompt)
    tw.chain_step(prompt[-1])
    for _ in range(16):
        tw.chain_step(None)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            tw.chain_step(None)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        spans = kernel_spans(json.loads(path.read_text()))
    cut = [spans[i: i + per_step] for i in range(0, len(spans) - per_step + 1, per_step)][1:-1]  # whole inner steps
    if len(cut) < 3:
        return {"error": f"{len(spans)} kernels recorded, expected {steps} x {per_step}", "period_us": 0.0,
                "span_us": 0.0, "gap_us": 0.0, "lead_us": 0.0, "kernels": []}
    period = [b[0][1] - a[0][1] for a, b in zip(cut, cut[1:])]
    span = [max(s + d for _, s, d in c) - c[0][1] for c in cut]
    gap = [b[0][1] - max(s + d for _, s, d in a) for a, b in zip(cut, cut[1:])]
    own: dict[str, list[float]] = {}
    for c in cut:
        acc: dict[str, float] = {}
        for key, _, dur in c:
            acc[key] = acc.get(key, 0.0) + dur
        for key, v in acc.items():
            own.setdefault(key, []).append(v)
    calls = {key: sum(1 for k, _, _ in cut[0] if k == key) for key in own}
    kernels = sorted(({"kernel": k, "calls": calls[k], "own_us": statistics.median(v)} for k, v in own.items()),
                     key=lambda r: r["own_us"], reverse=True)
    # within a step: how long after its predecessor's end each kernel starts (negative: PDL overlap), summed
    lead = [sum(c[i][1] - (c[i - 1][1] + c[i - 1][2]) for i in range(1, len(c))) for c in cut]
    return {"steps": len(cut), "period_us": statistics.median(period), "span_us": statistics.median(span),
            "gap_us": statistics.median(gap), "lead_us": statistics.median(lead), "kernels": kernels}


def decode_check(preset: str, device: torch.device, dtype: torch.dtype, steps: int = 256,
                 profile: bool = False, replay_first: bool = False) -> list[dict]:
    """Chained autoregressive steps (the target's captured one-row graph, as kernels=graphs runs them) timed with CUDA
    events over `steps` replays after a prompt prefilled: (A) eagerly, no prefill graph in the process; (B) by a
    prefill graph captured just before; (E) the same with the padding rows' slots zeroed after it; (F) by the graph of
    a whole bucket (no padding row) and (G) eagerly for that prompt; (C) eagerly again, the prefill graph still alive;
    (D) a new worker without one; (H) replayed, then the prompt's K/V overwritten by an eager prefill's, and (I) the
    converse; (K, L, M, N) replayed, then a 50 ms pause, a synchronize, 2 and 10 ms pauses; (O) eager, then the
    bucket's graph replayed with no input copy; (P) eager, then a pinned host-to-device copy; (Q) replayed as the
    runtime does (`PrefillGraphs.drain`); (S0-S3) the engine's loop (a read-back per step) after an eager, a replayed, a
    drained, a drained and paused prefill; `replay_first` (R1, R2): first, drained replays in a worker
    that has not prefilled eagerly yet. A last row compares the two prefills' K/V and the greedy tokens decoded
    after each; `profile` adds the step's kernels in both states (`profile_states`). Why: with kernels.prefill_graph
    the real-pair runs' autoregressive steps took 0.865 against 0.819 ms, and B-G showed the slowdown follows the
    replay, not its padding rows (2026-12-01). Cases A-P and S1 ran with `drain` off."""
    from runtime.graphs import PrefillGraphs, prefill_bucket
    from runtime.target_worker import TargetWorker

    model, attn, kcfg = engine_model(preset, "triton", device, dtype, target=True)
    prompt = torch.randint(0, model.shape.token_count, (38,), generator=torch.Generator().manual_seed(1)).tolist()

    def worker() -> TargetWorker:
        return TargetWorker(model, attn, rows=1, max_seq_len=1024, temperature=0.0, backend="triton", cuda_graphs=True)

    windows: list[tuple[float, float]] = []  # host wall clock (time.time) around each timed region: for clock logs

    host: list[tuple[float, float]] = []  # per timed region: host seconds per step launched, then the wait after

    def timed(tw: TargetWorker, prompt: list[int] = prompt, after: Callable[[int], None] | None = None) -> float:
        out = []
        for _ in range(3):
            tw.start(prompt)
            if after is not None:
                after(len(prompt) - 1)
            tw.chain_step(prompt[-1])
            for _ in range(16):
                tw.chain_step(None)
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0, p0 = time.time(), time.perf_counter()
            ev0.record()
            for _ in range(steps):
                tw.chain_step(None)
            ev1.record()
            p1 = time.perf_counter()
            torch.cuda.synchronize()
            host.append(((p1 - p0) / steps, time.perf_counter() - p1))
            windows.append((t0, time.time()))
            out.append(ev0.elapsed_time(ev1) * 1e-3 / steps)
        return statistics.median(out)

    token_host = [torch.empty(1, dtype=torch.long, pin_memory=True) for _ in range(2)]
    token_ready = [torch.cuda.Event() for _ in range(2)]

    def engine_loop(tw: TargetWorker, after: Callable[[int], None] | None = None) -> float:
        """As `timed`, but the steps run as `Engine._autoregressive_chained` runs them: step k + 1 queued, then token
        k copied to pinned host memory and waited for (one step ahead, a read-back per step)."""
        out = []
        for _ in range(3):
            tw.start(prompt)
            if after is not None:
                after(len(prompt) - 1)
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

            def queue(k: int, token: int | None, ev0=ev0, ev1=ev1) -> None:
                ids = tw.chain_step(token)
                token_host[k % 2].copy_(ids, non_blocking=True)
                token_ready[k % 2].record()
                if k == 17:
                    ev0.record()
                elif k == 17 + steps:
                    ev1.record()

            queue(0, prompt[-1])
            t0, p0 = time.time(), time.perf_counter()
            for k in range(17 + steps):
                queue(k + 1, None)
                token_ready[k % 2].synchronize()
                int(token_host[k % 2])
            p1 = time.perf_counter()
            torch.cuda.synchronize()
            host.append(((p1 - p0) / (17 + steps), time.perf_counter() - p1))
            windows.append((t0, time.time()))
            out.append(ev0.elapsed_time(ev1) * 1e-3 / steps)
        return statistics.median(out)

    def tokens(tw: TargetWorker, prompt: list[int] = prompt, n: int = 64) -> tuple[list[int], torch.Tensor]:
        """The first `n` chained greedy tokens after the prefill, and a copy of the prompt's K/V it wrote."""
        tw.start(prompt)
        kv = tw.cache.kv[:, :, : len(prompt) - 1].clone()
        out = [int(tw.chain_step(prompt[-1]).item())]
        out += [int(tw.chain_step(None).item()) for _ in range(n - 1)]
        return out, kv

    def zero_pad(n: int) -> None:  # the padding rows' K/V past the prompt (an eager prefill leaves those slots alone)
        tw.cache.kv[:, :, n:64].zero_()

    def sync(n: int) -> None:
        torch.cuda.synchronize()

    def pause_ms(ms: float) -> Callable[[int], None]:
        def wait(n: int) -> None:
            torch.cuda.synchronize()
            time.sleep(ms * 1e-3)
        return wait

    def raw_replay(n: int) -> None:  # the same prompt's bucket: its ids still hold it, so the K/V are the same
        captured[0]._entry(prefill_bucket(n, tw.cache.capacity))[0]()

    captured: list[PrefillGraphs] = []  # the prefill graphs, once made
    pinned = torch.arange(64, dtype=torch.long).pin_memory()
    scratch = torch.empty(64, dtype=torch.long, device=device)

    def pinned_copy(n: int) -> None:
        scratch.copy_(pinned, non_blocking=True)

    def put(kv: torch.Tensor) -> Callable[[int], None]:  # overwrite the prompt's K/V with another prefill's
        return lambda n: tw.cache.kv[:, :, :n].copy_(kv)

    rows = []
    tw = worker()
    if replay_first:  # as a kernels.prefill_graph engine: no eager prefill has run in this worker before
        first = PrefillGraphs(model, tw.cache, attn)
        first.warm_up = False  # R1, R2 reproduce what `PrefillGraphs.eager_warmup` avoids
        first.prepare([len(prompt) - 1])
        tw.prefill_graphs = first
        rows.append({"case": "R1 first: replayed prefill, drained", "step_s": timed(tw)})
        rows.append({"case": "R2 first: the engine's loop, replayed prefill, drained", "step_s": engine_loop(tw)})
        first.eager_warmup()
        rows.append({"case": "R3 then one eager warm-up prefill of 16 tokens (PrefillGraphs.eager_warmup): the "
                              "engine's loop, replayed prefill, drained", "step_s": engine_loop(tw)})
        tw.prefill_graphs = None
        del first
    eager_tokens, eager_kv = tokens(tw)
    rows.append({"case": "A eager prefill, no prefill graph", "step_s": timed(tw)})
    tw.prefill_graphs = PrefillGraphs(model, tw.cache, attn)
    tw.prefill_graphs.drain = False  # the cases below reproduce what `PrefillGraphs.drain` avoids
    captured.append(tw.prefill_graphs)
    tw.prefill_graphs.prepare([len(prompt) - 1])
    replay_tokens, replay_kv = tokens(tw)
    rows.append({"case": "B replayed prefill", "step_s": timed(tw)})
    rows.append({"case": "E replayed prefill, its padding slots zeroed", "step_s": timed(tw, after=zero_pad)})
    rows.append({"case": "H replayed prefill, the prompt's K/V then overwritten by the eager prefill's",
                 "step_s": timed(tw, after=put(eager_kv))})
    exact = prompt[:33]  # 32 prefilled tokens: a whole bucket, no padding row
    tw.prefill_graphs.prepare([len(exact) - 1])
    rows.append({"case": "F replayed prefill of a whole bucket (32 tokens)", "step_s": timed(tw, exact)})
    graphs, tw.prefill_graphs = tw.prefill_graphs, None
    rows.append({"case": "G eager prefill of the same 32 tokens", "step_s": timed(tw, exact)})
    rows.append({"case": "C eager prefill, the prefill graph alive", "step_s": timed(tw)})
    rows.append({"case": "I eager prefill, the prompt's K/V then overwritten by the replayed prefill's",
                 "step_s": timed(tw, after=put(replay_kv))})
    rows.append({"case": "D new worker, eager prefill", "step_s": timed(worker())})
    tw.prefill_graphs = graphs
    graphs.drain = True
    rows.append({"case": "Q replayed prefill, drained (PrefillGraphs.drain, the runtime's default)",
                 "step_s": timed(tw)})
    graphs.drain = False
    rows.append({"case": "K replayed prefill, then a 50 ms pause", "step_s": timed(tw, after=pause_ms(50))})
    rows.append({"case": "L replayed prefill, then a synchronize", "step_s": timed(tw, after=sync)})
    rows.append({"case": "M replayed prefill, then a 2 ms pause", "step_s": timed(tw, after=pause_ms(2))})
    rows.append({"case": "N replayed prefill, then a 10 ms pause", "step_s": timed(tw, after=pause_ms(10))})
    rows.append({"case": "S1 the engine's loop, replayed prefill", "step_s": engine_loop(tw)})
    graphs.drain = True
    rows.append({"case": "S2 the engine's loop, replayed prefill, drained", "step_s": engine_loop(tw)})
    rows.append({"case": "S3 the engine's loop, replayed prefill, drained, then a 50 ms pause",
                 "step_s": engine_loop(tw, after=pause_ms(50))})
    graphs.drain = False
    tw.prefill_graphs = None
    rows.append({"case": "S0 the engine's loop, eager prefill", "step_s": engine_loop(tw)})
    rows.append({"case": "O eager prefill, then the bucket's graph replayed again (no input copy)",
                 "step_s": timed(tw, after=raw_replay)})
    rows.append({"case": "P eager prefill, then a pinned non-blocking copy to the device",
                 "step_s": timed(tw, after=pinned_copy)})
    tw.prefill_graphs = graphs
    for i, r in enumerate(rows):  # three timed regions per case, in order
        r["host_windows"] = windows[3 * i: 3 * i + 3]
        r["host_per_step_s"] = [h for h, _ in host[3 * i: 3 * i + 3]]
        r["wait_after_s"] = [w for _, w in host[3 * i: 3 * i + 3]]
    if profile:
        rows.append(profile_states(tw, graphs, prompt))
    same = next((i for i, (a, b) in enumerate(zip(eager_tokens, replay_tokens)) if a != b), len(eager_tokens))
    diff = (eager_kv.float() - replay_kv.float()).abs()
    rows.append({"case": "tokens and K/V: eager vs replayed prefill", "first_different_token": same,
                 "kv_max_abs_diff": float(diff.max()), "kv_mean_abs_diff": float(diff.mean()),
                 "kv_finite": bool(torch.isfinite(replay_kv).all() and torch.isfinite(eager_kv).all()),
                 "eager_tokens": eager_tokens[:16], "replay_tokens": replay_tokens[:16],
                 "eager_distinct": len(set(eager_tokens)), "replay_distinct": len(set(replay_tokens))})
    del graphs
    for r in rows:
        if r["case"].startswith("profile"):
            continue
        if "step_s" in r:
            print(f"{preset} chained AR step, {r['case']}: {r['step_s'] * 1e3:.4f} ms (host "
                  f"{statistics.median(r['host_per_step_s']) * 1e3:.4f} ms per step, then waited "
                  f"{statistics.median(r['wait_after_s']) * 1e3:.2f} ms)", flush=True)
        else:
            print(f"{preset} {r['case']}: " + ", ".join(f"{k} {v}" for k, v in r.items() if k != "case"), flush=True)
    return rows


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", default="smollm2-135m,smollm2-draft",
                    help="model presets, comma-separated (the first is built as a target: its role's kernels)")
    ap.add_argument("--lengths", default="37,128,512", help="prompt lengths, comma-separated")
    ap.add_argument("--kernels", default="graph,triton,reference",
                    help="graph (kernels.prefill_graph: replays per length bucket), triton (the fused kernels, eager) "
                         "and / or reference (torch)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--device", default="auto", help="auto | cuda | cpu")
    ap.add_argument("--out", default="bench/results", help="folder of the results JSON ('' = none)")
    ap.add_argument("--decode-check", action="store_true",
                    help="also time chained autoregressive steps of the first preset with and without a prefill graph "
                         "(CUDA only; `decode_check`)")
    ap.add_argument("--decode-profile", action="store_true",
                    help="with --decode-check: also profile the AR step's kernels after an eager and a replayed "
                         "prefill")
    ap.add_argument("--replay-first", action="store_true",
                    help="with --decode-check: first time the steps after drained replays in a worker that has not "
                         "prefilled eagerly yet (cases R1, R2: as a kernels.prefill_graph engine runs)")
    ap.add_argument("--cprofile", type=int, default=0,
                    help="also print the N functions with the most own host time over `reps` prefills (cProfile), "
                         "per preset and kernels, at the first length")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    presets = [p for p in args.presets.split(",") if p]
    try:
        lengths = [int(n) for n in args.lengths.split(",") if n]
    except ValueError as e:
        raise SystemExit(f"--lengths: expected comma-separated integers, got {args.lengths!r}") from e
    if any(n < 2 for n in lengths):
        raise SystemExit(f"--lengths: a prefill needs >= 2 prompt tokens, got {lengths}")
    kernels = [k for k in args.kernels.split(",") if k]
    for k in kernels:
        if k not in ("graph", "triton", "reference"):
            raise SystemExit(f"--kernels: {k!r} is not one of graph, triton, reference")
    if "graph" in kernels and device.type != "cuda":
        raise SystemExit("--kernels graph: CUDA graphs need a CUDA device")
    gen = torch.Generator().manual_seed(0)
    rows = []
    for i, preset in enumerate(presets):
        for kern in kernels:
            model, attn, cache, graphs = build(preset, kern, device, dtype, target=i == 0)
            vocab = model.shape.token_count
            for n in lengths:
                prompt = torch.randint(0, vocab, (n,), generator=gen).tolist()
                t = time_prefill(model, attn, cache, graphs, prompt, device, args.warmup, args.reps)
                rows.append({"preset": preset, "kernels": kern, "prompt_tokens": n, **t})
                if args.cprofile and n == lengths[0]:
                    print(host_profile(model, attn, cache, graphs, prompt, device, args.reps, args.cprofile),
                          flush=True)
                print(f"{preset:14s} {kern:9s} {n:5d} tokens: host {t['host_s'] * 1e3:7.3f} ms  wall "
                      f"{t['wall_s'] * 1e3:7.3f} ms  device {t['device_s'] * 1e3:7.3f} ms", flush=True)
            del model, attn, cache, graphs
    decode = (decode_check(presets[0], device, dtype, profile=args.decode_profile, replay_first=args.replay_first)
              if args.decode_check and device.type == "cuda" else [])
    sha = git_sha(REPO_ROOT)
    date = datetime.datetime.now(datetime.timezone.utc)
    result = {"benchmark": "prefill_probe", "git_sha": sha, "date": date.isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "config": {**vars(args), "dtype": str(dtype)}, "rows": rows,
              "decode_check": decode}
    if args.out:
        path = Path(args.out) / f"prefill_probe_{date:%Y-%m-%d}_{sha[:7]}.json"
        atomic_write_json(path, result)
        print(f"results: {path}")
    return result


if __name__ == "__main__":
    main()
