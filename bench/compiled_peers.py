"""The compiled single-GPU peers of the runtime benchmark (bench/bench_runtime.py phase 4): what a user picks for
one request at a time on one GPU without a serving engine.

- `gptfast_compiled`: the project's plain model (`runtime.loader.build_model`, decoded through the forward
  `model(ids, AttnMeta, cache, backend)` as runtime/reference.py calls it) decoded the way gpt-fast decodes: a static
  KV cache addressed by position, held as one K and one V tensor per layer at fixed addresses (`LayerCaches`),
  attention over every slot of it under a mask (`StaticCacheAttention`), an eager prefill that yields the first
  token, and one `torch.compile(fullgraph=True, mode="reduce-overhead")`d greedy step per row count
  (`StaticDecoder`) whose position is a device tensor, so each step is one CUDA-graph replay whatever the position.
  `autoregressive`: the one-token step. `chain`: an iteration is gamma calls of the draft's compiled one-token step
  (a Python loop: one small graph replayed gamma times, not gamma steps unrolled into one large graph that compiles
  for long), one call of the target's compiled gamma + 1 row verify of [last token, drafts], greedy acceptance on the
  host (one read per iteration: the longest prefix of drafts equal to the target's argmax, then the target's token
  after it), and, when every draft was accepted, one more draft step that writes the last draft's K/V (the draft
  never saw it).
- `transformers_compiled` (`greedy`) and `transformers_compiled_assisted` (`assisted`): transformers' documented fast
  path: `generation_config.cache_implementation = "static"` and `generate` compiling the decode forward itself
  (`generation_config.compile_config = CompileConfig(fullgraph, mode)`; the prefill stays eager). Assisted
  generation keeps that static, compiled target and takes `assistant_model=` the draft with `num_assistant_tokens`
  = gamma on a constant schedule; the assistant decodes eagerly on a dynamic cache (transformers hands the assistant
  its own cache object, which a static `cache_implementation` on it refuses). A transformers version that cannot run
  assisted generation on a static cache reports the error as the row's reason.

Weights: the same as our runtime's. The runtime model is built once per role and shared: gptfast decodes it, and
transformers decodes views of it (bench.peers.hf_from_runtime), except for a Hugging Face folder checkpoint, which
transformers reads itself (`from_pretrained`).

Compile settings (`peer_compile`, conf/bench_schema.py PeerCompileConfig, and gpt-fast's fixed inductor settings
`INDUCTOR_SETTINGS`) apply to both peers and are recorded in their rows with the torch and transformers versions.
Warm-up runs (compiles and CUDA-graph recording included) are timed apart: `compile_s` is their wall time. Each row's
`compile` also holds what the compiles did (`CompileWatch`): graphs compiled, recompiles beyond one graph per step
function, graph breaks, CUDA-graph skips and inductor's reasons for them: a peer that silently runs without CUDA
graphs, or recompiles per position, is visible in its row. `profile_steps` adds per-kernel profiles of one decode
step of gptfast and of ours (`kernel_profile`: the top kernels by device time, and the launches per step: one
CUDA-graph launch, or one launch per kernel when graphs are not used).

Timing. Every system's decode time per output token is `decode_tpot_s` = (time the last token was known - time the
first was) / (n - 1), over all requests: sum of decode times / sum of (n - 1). gptfast: a CUDA event after each
token's (or iteration's) copy to the host, in stream order; transformers: a CUDA event recorded by a logits processor,
which `generate` calls after each target forward, outside the compiled forward. A chain iteration's time is the gap
between consecutive iteration events (host work and idle gaps included). CPU: `perf_counter` stamps instead.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from runtime.attention import AttentionBackend, AttnMeta

GPTFAST = "gptfast_compiled"
TRANSFORMERS = "transformers_compiled"
COMPILED_PEERS = (GPTFAST, TRANSFORMERS, "transformers_compiled_assisted")
"""`peers` names of this module, in the order they run (conf/bench_schema.py PEERS)."""


# ---- time stamps ------------------------------------------------------------------------------------------------
class Clock:
    """Stamps on the device's timeline: CUDA events on GPU (recorded in stream order, read once synchronised),
    `perf_counter` on CPU (where every op is synchronous)."""

    def __init__(self, device: torch.device | str) -> None:
        """A clock for `device`."""
        self.cuda = torch.device(device).type == "cuda"

    def stamp(self) -> Any:
        """Now, in stream order."""
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def wait(self, stamp: Any) -> None:
        """Block the host until the device has passed `stamp`."""
        if self.cuda:
            stamp.synchronize()

    def seconds(self, a: Any, b: Any) -> float:
        """Seconds from stamp `a` to stamp `b` (both passed)."""
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def sync(self) -> None:
        """Wait for the whole device."""
        if self.cuda:
            torch.cuda.synchronize()


# ---- gpt-fast-style decoding of our model ------------------------------------------------------------------------
def visible_slots(meta: AttnMeta, slots: int, device: torch.device) -> torch.Tensor:
    """[T, slots] bool: slot s is visible to query i iff s < prefix_len, or s = prefix_len + j is in the tree block
    with tree_mask[i, j] (runtime/attention.py). Static shape: `prefix_len` may be a one-element tensor."""
    rel = torch.arange(slots, device=device) - meta.prefix_len  # [slots]: the slot's place in the tree block
    cols = meta.tree_mask[:, rel.clamp(0, meta.tree_len - 1)]  # [T, slots]
    return (rel < 0) | ((rel < meta.tree_len) & cols)


class StaticCacheAttention(AttentionBackend):
    """Attention of T queries over every slot of the cache under the visibility mask (gpt-fast's static-cache
    attention): static shapes whatever the context length, so one compiled step serves every position.

    Grouped-query heads are folded into the query rows (query head h = kv head h // group), so K and V are read once
    per kv head and never repeated: scores = q_g @ K^T in the model's dtype, softmax in float32, then @ V (the
    numerics of transformers' eager attention)."""

    name = "static_mask"

    def __call__(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttnMeta, scale: float,
        prefix_ready: bool = False, out_dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """q [T, Hq, D], k_cache / v_cache [slots, Hkv, D] -> [T, Hq, D] in q's dtype or `out_dtype`."""
        t, hq, d = q.shape
        slots, hkv = k_cache.shape[0], k_cache.shape[1]
        g = hq // hkv
        qg = q.view(t, hkv, g, d).permute(1, 2, 0, 3).reshape(hkv, g * t, d)  # rows (group, query) per kv head
        scores = torch.matmul(qg, k_cache.permute(1, 2, 0)).float() * scale  # [Hkv, G*T, slots]
        mask = visible_slots(meta, slots, q.device).repeat(g, 1)  # [G*T, slots]
        probs = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1).to(v_cache.dtype)
        out = torch.matmul(probs, v_cache.transpose(0, 1))  # [Hkv, G*T, D]
        return out.view(hkv, g, t, d).permute(2, 0, 1, 3).reshape(t, hq, d).to(out_dtype or q.dtype)


class LayerCaches:
    """The peer's KV cache: one K and one V tensor per layer, each [slots, Hkv, D] (gpt-fast's per-layer cache
    buffers), duck-typed as runtime.kv_cache.KVCache where the model reads it (`layer(i)`).

    Why not our KVCache: its one monolithic tensor [layers, 2, slots, Hkv, D] hands each layer a *view*, and an
    in-place write into a view of a compiled graph's input is functionalised into a scatter of the updated view back
    into the whole base tensor, which inductor does not write in place: every layer's K/V write then copies the whole
    cache (all layers) once more per step. Separate per-layer tensors are graph inputs written directly, which
    inductor turns into an in-place scatter of the new rows. Their addresses are static (`mark_static_address`), so a
    CUDA graph may mutate them (cudagraph trees skip graphs that mutate inputs of changing address)."""

    def __init__(self, layers: int, slots: int, heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device, static: bool) -> None:
        """Zeroed caches of `slots` positions; `static`: mark their addresses static for torch.compile."""
        self.k = [torch.zeros(slots, heads, head_dim, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros_like(k) for k in self.k]
        if static:
            for t in (*self.k, *self.v):
                torch._dynamo.mark_static_address(t)

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(K, V) of layer `i`, each [slots, Hkv, D]; writes go to the cache."""
        return self.k[i], self.v[i]


class StaticDecoder:
    """One model with its static KV cache (slot = position) and a greedy step per row count, compiled or eager.

    `prefill(prompt)` fills slots [0, len) and returns the greedy next token; `self(tokens, start)` runs rows
    `tokens` [T] at positions start .. start + T - 1 and returns the argmax after each row [T] (a copy: safe past
    the next CUDA-graph replay). Slots past the current position may hold K/V of rejected tokens; the causal mask by
    position hides them until they are overwritten.

    Compiled (gpt-fast's design): one `torch.compile(fullgraph=True, dynamic=False, mode=...)` function per row count
    (the one-token step; a chain's gamma + 1 row verify), traced once and, under reduce-overhead, replayed as one CUDA
    graph per call. Everything a step reads is either a static-address tensor or a small per-call input: the weights
    and the per-layer caches (`LayerCaches`), the step's first position `start` (a one-element device tensor filled
    in place before each call, so the position is data, never a guard: no recompile per position), the row offsets and
    causal mask of the row count (constants of the step). The only per-call host work is that fill, the call and a
    copy of the argmax out of the graph's output pool.
    """

    def __init__(self, model: torch.nn.Module, slots: int, compile_cfg: Any | None) -> None:
        """Allocate the cache of `slots` positions; `compile_cfg` (PeerCompileConfig) None or disabled: eager."""
        self.model = model
        self.device = model.norm.weight.device
        self.compiled = compile_cfg is not None and compile_cfg.enabled
        self.compile_cfg = compile_cfg
        layers, heads, head_dim = model.cache_spec()
        self.cache = LayerCaches(layers, slots, heads, head_dim, model.dtype, self.device, static=self.compiled)
        self.attn = StaticCacheAttention()
        self.start = torch.zeros(1, dtype=torch.long, device=self.device)  # the step's first position (filled)
        if self.compiled:
            torch._dynamo.mark_static_address(self.start)  # filled in place: no copy into the graph's input
        self._steps: dict[int, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {}

    @property
    def steps_made(self) -> int:
        """Step functions made so far (one per row count): the graphs a compiled decoder should have compiled."""
        return len(self._steps)

    @torch.no_grad()
    def prefill(self, prompt: list[int]) -> torch.Tensor:
        """Eager forward of the prompt into slots [0, len(prompt)); the greedy next token [1] on the device."""
        ids = torch.tensor(prompt, device=self.device)
        logits = self.model(ids, AttnMeta.causal(0, len(prompt), self.device), self.cache, self.attn)
        return logits[-1:].argmax(dim=-1)

    def _make_step(self, rows: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        model, cache, attn = self.model, self.cache, self.attn
        offsets = torch.arange(rows, device=self.device)
        causal = torch.ones(rows, rows, dtype=torch.bool, device=self.device).tril()

        def step(tokens: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
            positions = start + offsets
            meta = AttnMeta(positions=positions, write_slots=positions, prefix_len=start, tree_len=rows,
                            tree_mask=causal)
            return model(tokens, meta, cache, attn).argmax(dim=-1)

        if not self.compiled:
            return step
        for t in (offsets, causal):
            torch._dynamo.mark_static_address(t)
        c = self.compile_cfg
        return torch.compile(step, mode=c.mode, fullgraph=c.fullgraph, dynamic=False)

    @torch.no_grad()
    def __call__(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        """Greedy tokens after each of `tokens` [T] at positions start .. start + T - 1 (a fresh tensor [T])."""
        fn = self._steps.get(tokens.shape[0])
        if fn is None:
            fn = self._steps[tokens.shape[0]] = self._make_step(tokens.shape[0])
        self.start.fill_(start)
        if self.compiled and self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # outputs of earlier replays are dead (copied below)
        return fn(tokens, self.start).clone()


def max_new(prompt: list[int], max_new_tokens: int, capacity: int) -> int:
    """Tokens a request may generate under the runtime's stop rule (runtime/reference.py): at most
    `max_new_tokens`, and prompt + output stays within `capacity`."""
    return max(0, min(max_new_tokens, capacity - len(prompt)))


def decode_autoregressive(dec: StaticDecoder, prompt: list[int], max_new_tokens: int, capacity: int,
                          eos: int | None, clock: Clock) -> dict[str, Any]:
    """Greedy decoding, one compiled step per token, one step queued ahead of the host's read of the last token
    (as our engine's chained autoregressive loop): the host's stop check overlaps the next step.

    Returns {"tokens", "start", "end", "token_stamps" (one per token, when it reached the host buffer),
    "iter_stamps" (the same: an iteration is a token)}."""
    n_max = max_new(prompt, max_new_tokens, capacity)
    host = torch.empty(n_max, dtype=torch.long, pin_memory=clock.cuda)
    stamps: list[Any] = []

    def land(k: int, tok: torch.Tensor) -> None:
        host[k : k + 1].copy_(tok, non_blocking=True)
        stamps.append(clock.stamp())

    start = clock.stamp()
    cur = dec.prefill(prompt)
    land(0, cur)
    out: list[int] = []
    for k in range(n_max):
        if k + 1 < n_max:  # token k + 1 from token k, queued before the host reads token k
            cur = dec(cur, len(prompt) + k)
            land(k + 1, cur)
        clock.wait(stamps[k])
        out.append(int(host[k]))
        if out[-1] == eos:
            break
    end = clock.stamp()
    return {"tokens": out, "start": start, "end": end, "token_stamps": stamps[: len(out)],
            "iter_stamps": stamps[: len(out)], "verify": [], "expand": []}


def decode_chain(target: StaticDecoder, draft: StaticDecoder, prompt: list[int], max_new_tokens: int, capacity: int,
                 eos: int | None, gamma: int, clock: Clock) -> dict[str, Any]:
    """Greedy chain speculation: per iteration gamma draft steps, one verify of gamma + 1 rows, greedy acceptance
    (accept drafts while each equals the target's argmax before it, then emit the target's next token).

    Returns the stamps of `decode_autoregressive` with one `iter_stamps` entry per iteration (the first: the prefill's
    token), and per iteration (start, end) stamp pairs of the verify and of the gamma draft steps."""
    n_max = max_new(prompt, max_new_tokens, capacity)
    host = torch.empty(2 * gamma + 1, dtype=torch.long, pin_memory=clock.cuda)
    start = clock.stamp()
    cur = target.prefill(prompt)
    draft.prefill(prompt)
    host[:1].copy_(cur, non_blocking=True)
    stamps = [clock.stamp()]
    clock.wait(stamps[0])
    out = [int(host[0])]
    token_stamps = [stamps[0]]
    verify, expand = [], []
    pos = len(prompt)  # position of `cur`, the last emitted token
    while out[-1] != eos and len(out) < n_max:
        e0 = clock.stamp()
        drafts, d_in = [], cur
        for i in range(gamma):
            d_in = draft(d_in, pos + i)
            drafts.append(d_in)
        e1 = clock.stamp()
        rows = torch.cat([cur, *drafts])  # [gamma + 1]
        verdict = target(rows, pos)  # [gamma + 1]: the target's argmax after each row
        e2 = clock.stamp()
        host.copy_(torch.cat([rows[1:], verdict]), non_blocking=True)
        stamps.append(clock.stamp())
        clock.wait(stamps[-1])
        d, v = host[:gamma].tolist(), host[gamma:].tolist()
        k = 0
        while k < gamma and d[k] == v[k]:
            k += 1
        if k == gamma:  # the last draft was accepted: write its K/V into the draft's cache
            draft(drafts[-1], pos + gamma)
        verify.append((e1, e2))
        expand.append((e0, e1))
        for tok in [*d[:k], v[k]]:
            out.append(tok)
            token_stamps.append(stamps[-1])
            if tok == eos or len(out) >= n_max:
                break
        cur = verdict[k : k + 1].clone()
        pos += k + 1
    end = clock.stamp()
    return {"tokens": out, "start": start, "end": end, "token_stamps": token_stamps, "iter_stamps": stamps,
            "verify": verify, "expand": expand}


def request_times(req: dict[str, Any], clock: Clock, gamma: int = 0) -> dict[str, Any]:
    """Seconds of one decoded request: decode (first -> last token), its iterations, verifies and draft steps."""
    ts, its = req["token_stamps"], req["iter_stamps"]
    return {"n": len(req["tokens"]), "decode_s": clock.seconds(ts[0], ts[-1]) if len(ts) > 1 else 0.0,
            "prefill_s": clock.seconds(req["start"], its[0]),
            "iterations": [clock.seconds(a, b) for a, b in zip(its, its[1:])],
            "verify": [clock.seconds(a, b) for a, b in req["verify"]],
            "expand": [clock.seconds(a, b) / gamma for a, b in req["expand"]] if gamma else []}


def repeat_metrics(outputs: list[list[int]], wall_s: float, times: list[dict[str, Any]]) -> dict[str, Any]:
    """One repeat's row metrics (bench/bench_runtime.py ROW_METRICS) from per-request `request_times`-like dicts
    (keys n, decode_s; optional iterations, verify, expand, prefill_s)."""
    generated = sum(len(o) for o in outputs)
    after_first = sum(max(0, t["n"] - 1) for t in times)
    iterations = [x for t in times for x in t.get("iterations", [])]
    verify = [x for t in times for x in t.get("verify", [])]
    expand = [x for t in times for x in t.get("expand", [])]
    emitted_by_iterations = sum(max(0, t["n"] - 1) for t in times)  # the first token comes from the prefill
    return {
        "outputs": outputs, "wall_s": wall_s, "generated_tokens": generated,
        "tokens_per_s": generated / wall_s if wall_s > 0 else None,
        "time_per_output_token_s": wall_s / generated if generated else None,
        "decode_tpot_s": sum(t["decode_s"] for t in times) / after_first if after_first else None,
        "iteration_time_s": statistics.fmean(iterations) if iterations else None,
        "verify_time_s": statistics.fmean(verify) if verify else (statistics.fmean(iterations) if iterations
                                                                   else None),
        "expand_time_s": statistics.fmean(expand) if expand else None,
        "mean_accept_len": emitted_by_iterations / len(iterations) if iterations else None,
        "target_forwards": len(iterations) + len(times) if iterations else None,
        "prefill_s": statistics.fmean(t["prefill_s"] for t in times) if all("prefill_s" in t for t in times)
        else None,
    }


def measure_gptfast(decode: Callable[..., dict[str, Any]], prompts: list[list[int]],
                    max_new_tokens: int, clock: Clock, *, repeats: int, warmup_runs: int, warmup_new_tokens: int,
                    gamma: int = 0) -> dict[str, Any]:
    """Warm-up runs (timed apart: `compile_s`), then `repeats` timed decodes of every prompt."""
    compile_s, timed = warm_then_time(lambda p: decode(p, max_new_tokens=min(warmup_new_tokens, max_new_tokens)),
                                      lambda p: decode(p, max_new_tokens=max_new_tokens), prompts, clock,
                                      repeats=repeats, warmup_runs=warmup_runs)
    reps = [repeat_metrics([r["tokens"] for r in reqs], wall, [request_times(r, clock, gamma) for r in reqs])
            for wall, reqs in timed]
    return {"repeats": reps, "compile_s": compile_s}


def warm_then_time(warm: Callable[[list[int]], Any], timed: Callable[[list[int]], Any], prompts: list[list[int]],
                   clock: Clock, *, repeats: int, warmup_runs: int) -> tuple[float, list[tuple[float, list[Any]]]]:
    """`warmup_runs` passes of `warm` over the prompts (their wall time: the compile time, reported apart), then
    `repeats` passes of `timed`, each timed with the device synchronised at both ends: (compile_s, [(wall_s, the
    pass's results)])."""
    t0 = time.perf_counter()
    for _ in range(warmup_runs):
        for p in prompts:
            warm(p)
    clock.sync()
    compile_s = time.perf_counter() - t0
    passes = []
    for _ in range(repeats):
        clock.sync()
        start = time.perf_counter()
        results = [timed(p) for p in prompts]
        clock.sync()
        passes.append((time.perf_counter() - start, results))
    return compile_s, passes


# ---- transformers: static cache + compiled forward ---------------------------------------------------------------
def step_stamps_processor(clock: Clock) -> Any:
    """A transformers LogitsProcessor that stamps every call (after each target forward) into its `stamps` list."""
    from transformers import LogitsProcessor

    class StepStamps(LogitsProcessor):
        def __init__(self) -> None:
            self.stamps: list[Any] = []

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            self.stamps.append(clock.stamp())
            return scores

    return StepStamps()


def static_cache_generation(model: Any, eos_token_id: int | None, compile_cfg: Any, slots: int) -> dict[str, Any]:
    """In place: greedy decoding with our stop rule (bench.peers.set_greedy) on a static cache of `slots` positions
    where transformers lets one size serve every call (`max_cache_len`; else each call sizes it to its prompt + new
    tokens), `generate` compiling the decode forward with `compile_cfg` (disabled: eager). Returns what was set
    (recorded in the row)."""
    from transformers import CompileConfig

    from bench.peers import set_greedy

    set_greedy(model, eos_token_id)
    gc = model.generation_config
    gc.cache_implementation = "static"
    done: dict[str, Any] = {"cache_implementation": "static"}
    if hasattr(gc, "max_cache_len"):  # one cache size (and graph) for every prompt; newer transformers only
        gc.max_cache_len = slots
        done["max_cache_len"] = slots
    if compile_cfg.enabled:
        cc = CompileConfig(fullgraph=compile_cfg.fullgraph, mode=compile_cfg.mode)
        if model.device.type != "cuda":
            cc._compile_all_devices = True  # generate compiles on CUDA-like devices only unless told
        gc.compile_config = cc
        done["compile_config"] = {"fullgraph": cc.fullgraph, "mode": cc.mode}
    else:
        gc.disable_compile = True
        done["disable_compile"] = True
    return done


def measure_transformers(model: Any, prompts: list[list[int]], max_new_tokens: int, capacity: int, clock: Clock, *,
                         repeats: int, warmup_runs: int, assistant: Any = None) -> dict[str, Any]:
    """Warm-up runs at full length (a static cache is sized per call where transformers has no `max_cache_len`: a
    shorter warm-up would compile another shape), then `repeats` timed `generate` calls per prompt."""
    from transformers import LogitsProcessorList

    def run(prompt: list[int]) -> tuple[list[int], dict[str, Any]]:
        stamps = step_stamps_processor(clock)
        ids = torch.tensor([prompt], device=model.device)
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), assistant_model=assistant,
                                 max_new_tokens=max_new(prompt, max_new_tokens, capacity),
                                 logits_processor=LogitsProcessorList([stamps]))
        tokens = out[0, len(prompt):].tolist()
        s = stamps.stamps
        return tokens, {"n": len(tokens), "decode_s": clock.seconds(s[0], s[-1]) if len(s) > 1 else 0.0}

    compile_s, timed = warm_then_time(run, run, prompts, clock, repeats=repeats, warmup_runs=warmup_runs)
    reps = [repeat_metrics([o for o, _ in done], wall, [t for _, t in done]) for wall, done in timed]
    return {"repeats": reps, "compile_s": compile_s}


# ---- compile diagnostics and per-kernel profiles -----------------------------------------------------------------
INDUCTOR_SETTINGS = {"triton.unique_kernel_names": True, "fx_graph_cache": True}
"""gpt-fast's fixed inductor settings beside `coordinate_descent_tuning` (a PeerCompileConfig knob): kernel names that
say which ops they fuse (the per-kernel profile reads them) and the on-disk FX graph cache (a warm machine skips the
recompile)."""
CUDAGRAPH_SKIP_LOGGERS = tuple(f"torch._inductor.cudagraph_utils.__{a}" for a in ("cudagraphs", "perf_hints"))
"""The loggers inductor reports a CUDA-graph skip on (`log_cudagraph_skip_and_bump_counter`, a warning: the
`cudagraphs` artifact in newer torch, `perf_hints` in older), listened to whatever TORCH_LOGS enables."""
KERNEL_LAUNCHES = (("cudaGraphLaunch", "graph_launches"), ("cudaLaunchKernel", "kernel_launches"),
                   ("cuLaunchKernel", "kernel_launches"))
"""Host-side launch calls a profile counts, by name prefix (cudaLaunchKernelExC, cuLaunchKernelEx and versioned
names too): CUDA-graph replays, and kernels launched one by one (outside a graph)."""
PROFILE_TOP = 15
PROFILE_NEEDS_S = 40.0
"""Time the per-kernel profiles after one gptfast job need (builds of our steps included); skipped with less left."""


def compile_record(compile_cfg: Any) -> dict[str, Any]:
    """The compile settings (inductor's too) and library versions a row records."""
    import dataclasses

    rec: dict[str, Any] = {**dataclasses.asdict(compile_cfg), "dynamic": False, "torch": torch.__version__,
                           "inductor": {"coordinate_descent_tuning": compile_cfg.coordinate_descent_tuning,
                                        **INDUCTOR_SETTINGS} if compile_cfg.enabled else {}}
    try:
        import transformers

        rec["transformers"] = transformers.__version__
    except Exception:  # transformers is only needed by its own peers
        rec["transformers"] = None
    return rec


def apply_inductor_settings(compile_cfg: Any) -> None:
    """Process-wide inductor settings of the compiled peers, gpt-fast's (set before their first compile)."""
    if compile_cfg.enabled:
        import torch._inductor.config as inductor_config

        inductor_config.coordinate_descent_tuning = compile_cfg.coordinate_descent_tuning
        inductor_config.triton.unique_kernel_names = INDUCTOR_SETTINGS["triton.unique_kernel_names"]
        inductor_config.fx_graph_cache = INDUCTOR_SETTINGS["fx_graph_cache"]


class CompileWatch:
    """Dynamo / inductor diagnostics of one compiled job, as deltas of the process-wide counters over a `with` block:
    graphs compiled (`unique_graphs`), graph breaks (`graph_breaks`: fullgraph=True makes any an error instead),
    compiled graphs that run without CUDA graphs (`cudagraph_skips`) and the reasons inductor gave
    (`cudagraph_skip_reasons`, e.g. a mutated input without a static address). `recompiles` = graphs compiled beyond
    `expected` (the step functions made: one graph each), when the caller knows it."""

    def __enter__(self) -> CompileWatch:
        """Snapshot the counters, listen for skip reasons."""
        import logging

        watch = self

        class Reasons(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                watch.reasons.append(record.getMessage()[:500])

        self.reasons: list[str] = []
        self._handler = Reasons(level=logging.WARNING)
        for name in CUDAGRAPH_SKIP_LOGGERS:
            logging.getLogger(name).addHandler(self._handler)
        self._before = self.counters()
        return self

    def __exit__(self, *exc: Any) -> None:
        """Stop listening."""
        import logging

        for name in CUDAGRAPH_SKIP_LOGGERS:
            logging.getLogger(name).removeHandler(self._handler)
        self._after = self.counters()

    @staticmethod
    def counters() -> dict[str, int]:
        """The process-wide counters now."""
        from torch._dynamo.utils import counters

        return {"unique_graphs": int(counters["stats"]["unique_graphs"]),
                "graph_breaks": int(sum(counters["graph_break"].values())),
                "cudagraph_skips": int(counters["inductor"]["cudagraph_skips"])}

    def delta(self, expected: int | None = None) -> dict[str, Any]:
        """The counters' deltas over the block, the skip reasons, and `recompiles` (None without `expected`)."""
        out: dict[str, Any] = {k: self._after[k] - self._before[k] for k in self._after}
        out["recompiles"] = None if expected is None else max(0, out["unique_graphs"] - expected)
        out["cudagraph_skip_reasons"] = self.reasons
        return out


def kernel_profile(step: Callable[[], Any], device: torch.device | str, *, warmup: int = 3, steps: int = 5,
                   top: int = PROFILE_TOP) -> dict[str, Any]:
    """torch.profiler over `steps` calls of `step` (after `warmup` unprofiled ones): per step, the device time of
    every kernel (CUDA: kernels, memcpys and memsets, inside CUDA graphs too; CPU: aten ops' self time) and the
    host's launch calls (`graph_launches`: CUDA-graph replays, `kernel_launches`: kernels launched one by one).
    Returns {"device", "device_time_per_step_s", "graph_launches_per_step", "kernel_launches_per_step",
    "distinct_kernels", "kernels": the `top` by time [{"name", "time_per_step_s", "calls_per_step", "share"}]}."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.device(device).type == "cuda"
    clock = Clock(device)
    for _ in range(warmup):
        step()
    clock.sync()
    with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]) as prof:
        for _ in range(steps):
            step()
        clock.sync()
    time_us: dict[str, float] = {}
    calls: dict[str, int] = {}
    launches = {"graph_launches": 0, "kernel_launches": 0}
    for e in prof.events():
        if e.device_type == DeviceType.CPU:
            kind = next((k for prefix, k in KERNEL_LAUNCHES if e.name.startswith(prefix)), None)
            if kind is not None:
                launches[kind] += 1
        if cuda and e.device_type == DeviceType.CUDA:
            us = e.time_range.elapsed_us()
        elif not cuda and e.name.startswith("aten::"):
            us = e.self_cpu_time_total
        else:
            continue
        time_us[e.name] = time_us.get(e.name, 0.0) + us
        calls[e.name] = calls.get(e.name, 0) + 1
    total = sum(time_us.values())
    ranked = sorted(time_us, key=time_us.__getitem__, reverse=True)[:top]
    return {"device": "cuda" if cuda else "cpu", "device_time_per_step_s": total / steps / 1e6,
            **{f"{k}_per_step": v / steps for k, v in launches.items()},
            "distinct_kernels": len(time_us), "steps_profiled": steps,
            "kernels": [{"name": n, "time_per_step_s": time_us[n] / steps / 1e6, "calls_per_step": calls[n] / steps,
                         "share": time_us[n] / total if total else None} for n in ranked]}


def profile_steps(decoders: dict[str, StaticDecoder], prompt: list[int], cfg: Any, gamma: int, device: torch.device,
                  into: dict[str, Any]) -> None:
    """Per-kernel profiles (`kernel_profile`) of one decode step of gptfast and of ours, side by side, after a
    `prompt`-long context: the target's one-token step, its gamma + 1 row verify and the draft's one-token step, each
    once the gptfast jobs have compiled it and not yet in `into`. Ours: the runtime's captured step graph as
    bench/step_replay.py builds it (kernels=graphs; GPU only).

    Fills `into` in place: {"ctx", "steps": {"<role> rows <T>": {"gptfast_compiled": profile, "swiftspec": profile |
    {"skipped"} | {"error"}}}}."""
    ctx = len(prompt)
    into["ctx"] = ctx
    steps = into.setdefault("steps", {})
    for role, rows in [("target", 1), ("target", gamma + 1), ("draft", 1)]:
        dec, name = decoders.get(role), f"{role} rows {rows}"
        if dec is None or rows not in dec._steps or name in steps:
            continue
        dec.prefill(prompt)
        tokens = torch.zeros(rows, dtype=torch.long, device=dec.device)
        entry = {"gptfast_compiled": kernel_profile(lambda d=dec, t=tokens: d(t, ctx), device)}
        if device.type == "cuda":
            from bench.step_replay import captured_step

            mcfg = getattr(cfg.model, role)
            try:
                with captured_step(mcfg.preset, role, rows, rows, ctx=ctx, cap=cfg.workload.max_seq_len_tokens,
                                   dtype=mcfg.dtype) as (replay, _):
                    entry["swiftspec"] = kernel_profile(replay, device)
            except Exception as exc:  # our side's profile is a diagnostic: its failure is reported, not fatal
                entry["swiftspec"] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        else:
            entry["swiftspec"] = {"skipped": "our decode steps are CUDA graphs: profiled on a GPU only"}
        steps[name] = entry


def profile_table(profiles: dict[str, Any]) -> str:
    """Markdown: per profiled step, the totals and the top kernels of ours and of gptfast (time per step, calls)."""
    lines = []
    for step, sides in profiles.get("steps", {}).items():
        lines += [f"#### {step}, context {profiles['ctx']}", ""]
        for system in ("swiftspec", "gptfast_compiled"):
            p = sides.get(system, {})
            if "kernels" not in p:
                lines += [f"- {system}: {p.get('error') or p.get('skipped')}", ""]
                continue
            graphs = ("CPU (aten ops' self time)" if p.get("device") == "cpu" else
                      "CUDA graphs " + ("used" if p["graph_launches_per_step"] >= 1 else "NOT used"))
            lines += [f"- {system}: {graphs}: {p['graph_launches_per_step']:.0f} graph launches and "
                      f"{p['kernel_launches_per_step']:.0f} single kernel launches per step; device time "
                      f"{1e3 * p['device_time_per_step_s']:.3f} ms per step, {p['distinct_kernels']} distinct kernels",
                      "",
                      "| kernel | us / step | calls / step | share |", "|---|---|---|---|"]
            lines += [f"| `{k['name'][:90]}` | {1e6 * k['time_per_step_s']:.1f} | {k['calls_per_step']:.0f} | "
                      f"{100 * (k['share'] or 0):.1f}% |" for k in p["kernels"]]
            lines.append("")
    return "\n".join(lines)


def diagnosis_line(key: str, raw: dict[str, Any]) -> str:
    """One line of a compiled job's compile diagnostics (printed by the phase)."""
    c = raw.get("compile", {})
    if "unique_graphs" not in c:
        return f"[bench] {key}: no compile diagnostics ({str(raw.get('error') or raw.get('skipped'))[:120]})"
    reasons = "; ".join(c["cudagraph_skip_reasons"])[:300] or "none"
    return (f"[bench] {key} diagnostics: graphs compiled {c['unique_graphs']} (recompiles {c['recompiles']}), "
            f"graph breaks {c['graph_breaks']}, CUDA-graph skips {c['cudagraph_skips']} (reasons: {reasons}), "
            f"compile {raw.get('compile_s', 0):.1f} s")


# ---- the benchmark phase ------------------------------------------------------------------------------------------
def cache_slots(prompts: list[list[int]], max_new_tokens: int, capacity: int, gamma: int) -> int:
    """Static cache size of the compiled peers: the longest request (within `capacity`) plus a chain verify's
    lookahead (gamma + 1 rows past the last emitted position). gpt-fast sizes its cache to the request the same way;
    attention reads every slot, so a cache sized to `capacity` would cost reads for nothing."""
    longest = max(len(p) + max_new(p, max_new_tokens, capacity) for p in prompts)
    return longest + gamma + 1


def run_compiled_phase(bc: Any, cfg: Any, prompts: list[list[int]], eos_token_id: int | None, device: torch.device,
                       deadline: float, on_result: Callable[[dict[str, Any]], None] | None = None,
                       profiles: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Phase 4 of bench/bench_runtime.py, in the calling process (GPU 0 or CPU): the compiled peers the workload
    asks for, gptfast first. Returns {"<system>/<mode>": {"repeats", "compile_s", "compile", ...} | {"error"} |
    {"skipped"}}; `on_result(results so far)` after each (the caller writes its results file).

    Budgets: a job starts only while its system's budget (`bc.peer_budget_s`, compile and repeats) is left before
    `deadline`, else its row is skipped with the reason; before it starts, its row already says it did not finish (what
    the results file keeps if the stage's timeout ends the process). `profiles` (a dict, filled in place): the
    per-kernel profiles (`profile_steps`) of the steps each gptfast job compiled, right after it (a later job cut by
    the stage's timeout costs none of them), when `PROFILE_NEEDS_S` is left.
    """
    from bench.peers import BUDGET_SPENT, hf_from_runtime, load_hf
    from conf.presets import model_preset
    from runtime.loader import build_model

    wl = bc.selected
    has_draft = cfg.model.draft is not None
    gamma = cfg.spec.gamma
    wanted = [(GPTFAST, "autoregressive"), (GPTFAST, "chain"), (TRANSFORMERS, "greedy"), (TRANSFORMERS, "assisted")]
    picked = {(GPTFAST, "autoregressive"): GPTFAST in wl.peers, (GPTFAST, "chain"): GPTFAST in wl.peers,
              (TRANSFORMERS, "greedy"): TRANSFORMERS in wl.peers,
              (TRANSFORMERS, "assisted"): "transformers_compiled_assisted" in wl.peers}
    jobs = [j for j in wanted if picked[j]]
    if not jobs:
        return {}
    dev = torch.device("cuda:0" if device.type == "cuda" else "cpu")
    clock = Clock(dev)
    capacity = cfg.workload.max_seq_len_tokens
    kw = dict(repeats=bc.repeats, warmup_runs=max(1, bc.warmup_runs))
    record = compile_record(bc.peer_compile)
    apply_inductor_settings(bc.peer_compile)
    runtime_models: dict[str, Any] = {}
    hf_models: dict[str, Any] = {}
    gptfast: dict[str, StaticDecoder] = {}
    slots = cache_slots(prompts, wl.max_new_tokens, capacity, gamma)

    def runtime_model(role: str) -> Any:
        if role not in runtime_models:
            mcfg = getattr(cfg.model, role)
            runtime_models[role] = build_model(model_preset(mcfg.preset), mcfg.dtype, dev, cfg.seed,
                                               checkpoint=mcfg.checkpoint)
        return runtime_models[role]

    def decoder(role: str) -> StaticDecoder:
        if role not in gptfast:
            gptfast[role] = StaticDecoder(runtime_model(role), slots, bc.peer_compile)
        return gptfast[role]

    def hf_model(role: str) -> Any:
        if role not in hf_models:
            from pathlib import Path

            mcfg = getattr(cfg.model, role)
            folder = mcfg.checkpoint is not None and (Path(mcfg.checkpoint) / "config.json").is_file()
            hf_models[role] = (load_hf(mcfg, dev, cfg.seed) if folder
                               else hf_from_runtime(runtime_model(role), model_preset(mcfg.preset)))
        return hf_models[role]

    def profile() -> None:
        left = deadline - time.time()
        if left < PROFILE_NEEDS_S:
            profiles["skipped"] = f"{BUDGET_SPENT}: {left:.0f} s left, a profile needs {PROFILE_NEEDS_S:.0f} s"
            return
        print("[bench] per-kernel profiles of the decode steps compiled so far, ours and gptfast", flush=True)
        try:
            before = set(profiles.get("steps", {}))
            profile_steps(gptfast, prompts[0], cfg, gamma, dev, profiles)
            new = {k: v for k, v in profiles["steps"].items() if k not in before}
            print(profile_table({"ctx": profiles["ctx"], "steps": new}), flush=True)
        except Exception as exc:  # a diagnostic: reported, the benchmark goes on
            profiles["error"] = f"{type(exc).__name__}: {exc}"[:4000]

    def run_job(system: str, mode: str) -> dict[str, Any]:
        """One job's raw result: repeats, compile time and settings, compile diagnostics; or its error."""
        made = sum(d.steps_made for d in gptfast.values())
        watch = CompileWatch()
        try:
            with watch:
                if system == GPTFAST and mode == "autoregressive":
                    run = partial(decode_autoregressive, decoder("target"), capacity=capacity, eos=eos_token_id,
                                  clock=clock)
                    raw = measure_gptfast(run, prompts, wl.max_new_tokens, clock,
                                          warmup_new_tokens=bc.warmup_new_tokens, **kw)
                elif system == GPTFAST:
                    run = partial(decode_chain, decoder("target"), decoder("draft"), capacity=capacity,
                                  eos=eos_token_id, gamma=gamma, clock=clock)
                    raw = measure_gptfast(run, prompts, wl.max_new_tokens, clock,
                                          warmup_new_tokens=bc.warmup_new_tokens, gamma=gamma, **kw)
                    raw["gamma"] = gamma
                else:
                    raw = measure_transformers_job(mode)
            expected = (sum(d.steps_made for d in gptfast.values()) - made
                        if system == GPTFAST and bc.peer_compile.enabled else None)
            raw["compile"] = {**record, **watch.delta(expected)}
            if system == GPTFAST:
                raw["cache_slots"] = slots
            return raw
        except Exception as exc:  # reported as the row's reason; the benchmark goes on
            what = "assisted generation on a static cache: " if mode == "assisted" else ""
            diag = watch.delta() if hasattr(watch, "_after") else {}  # e.g. a graph break's skip reasons
            return {"error": f"{what}{type(exc).__name__}: {exc}"[:4000], "compile": {**record, **diag}}

    def measure_transformers_job(mode: str) -> dict[str, Any]:
        target = hf_model("target")
        raw_setup = static_cache_generation(target, eos_token_id, bc.peer_compile, slots)
        assistant = None
        if mode == "assisted":
            from bench.peers import set_greedy

            assistant = hf_model("draft")
            set_greedy(assistant, eos_token_id)
            assistant.generation_config.num_assistant_tokens = gamma
            assistant.generation_config.num_assistant_tokens_schedule = "constant"
            raw_setup["assistant"] = {"num_assistant_tokens": gamma, "schedule": "constant", "cache": "dynamic",
                                      "compiled": False}
        raw = measure_transformers(target, prompts, wl.max_new_tokens, capacity, clock, assistant=assistant, **kw)
        raw["generation"] = raw_setup
        raw["attn_implementation"] = target.config._attn_implementation
        if mode == "assisted":
            raw["gamma"] = gamma
        return raw

    results: dict[str, dict[str, Any]] = {}
    for system, mode in jobs:
        key = f"{system}/{mode}"
        name = "transformers_compiled_assisted" if mode == "assisted" else system
        budget = bc.peer_budget_s[name]
        left = deadline - time.time()
        if mode in ("chain", "assisted") and not has_draft:
            results[key] = {"skipped": "the workload has no draft model"}
        elif left < budget:
            results[key] = {"skipped": f"{BUDGET_SPENT}: {left:.0f} s left, its budget (peer_budget_s.{name}) is "
                                       f"{budget:.0f} s"}
        else:
            results[key] = {"skipped": f"did not finish: the stage's timeout ended it (started with {left:.0f} s "
                                       f"left, its budget {budget:.0f} s)"}
            if on_result is not None:
                on_result(results)
            print(f"[bench] {key}: warm-up (compiles) and {bc.repeats} repeats (budget {budget:.0f} s)", flush=True)
            results[key] = run_job(system, mode)
            print(diagnosis_line(key, results[key]), flush=True)
        raw = results[key]
        status = ("ok: decode " + ", ".join(f"{1e3 * r['decode_tpot_s']:.3f}" for r in raw["repeats"]
                                            if r["decode_tpot_s"]) + " ms/token, compile "
                  f"{raw['compile_s']:.1f} s") if "repeats" in raw else (raw.get("error") or raw["skipped"])[:200]
        print(f"[bench] {key}: {status}", flush=True)
        if profiles is not None and system == GPTFAST and "repeats" in raw:  # the steps this job compiled
            profile()
        if on_result is not None:
            on_result(results)
    return results


# ---- the short table of a `scripts/gpu.sh peers` call ---------------------------------------------------------------
def summary(results: list[dict[str, Any]]) -> str:
    """Markdown: per results JSON of bench/bench_runtime.py, its comparison table (ours against the compiled peers)
    and one line per row: tok/s, decode time per output token, chain iteration, compile time, outputs, status."""
    from bench.bench_runtime import comparison_table, peer_comparison

    out = []
    for res in results:
        out += [f"### {res['workload']} ({res['device']}, git {res['git_sha'][:7]}, {res['date']})", ""]
        out += [f"- note: {n}" for n in res.get("notes", [])]
        out += ["", comparison_table(res["workload"], res.get("comparison") or peer_comparison(res["rows"])), "",
                "| system | mode | tok/s | decode TPOT (ms) | iteration (ms) | floor fwd / iter (ms) | compile (s) | "
                "outputs | status |", "|---|---|---|---|---|---|---|---|---|"]
        for r in res["rows"]:
            def ms(x: float | None) -> str:
                return "-" if x is None else f"{1e3 * x:.3f}"

            floors = ms(r.get("byte_floor_s")) + (f" / {ms(r['iteration_floor_s'])}" if "iteration_floor_s" in r
                                                   else "")
            check = r["outputs_check"]["status"] if r.get("outputs_check") else "-"
            status = r["status"] if r["status"] == "ok" else f"{r['status']}: {str(r.get('reason'))[:90]}"
            tps = "-" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:.1f}"
            compile_s = "-" if r.get("compile_s") is None else f"{r['compile_s']:.0f}"
            mode = f"{r['mode']} ({r['spec']})" if r.get("spec") else r["mode"]
            out.append(f"| {r['system']} | {mode} | {tps} | {ms(r.get('decode_tpot_s'))} | "
                       f"{ms(r.get('iteration_time_s'))} | {floors} | {compile_s} | {check} | {status} |")
        out.append("")
        if res.get("kernel_profiles"):
            kp = res["kernel_profiles"]
            out += ["### Per-kernel profiles (one decode step)", "",
                    profile_table(kp) if "steps" in kp else f"- {kp.get('error') or kp.get('skipped')}", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.compiled_peers RESULTS.json ...`: print `summary` of the files (a missing one is named)."""
    import argparse
    import json
    import sys
    from pathlib import Path

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("results", nargs="*", type=Path, help="runtime_<preset>_<date>_<sha>.json files")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.results if not p.is_file()]
    if missing:
        print(f"compiled_peers: no such results file: {', '.join(missing)}", file=sys.stderr)
        return 2
    print(summary([json.loads(p.read_text()) for p in args.results]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
