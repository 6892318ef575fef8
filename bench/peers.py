"""Peer systems of the runtime benchmark (bench/bench_runtime.py): transformers `generate` and DeepSpeed-Inference.

- `hf_greedy`: `model.generate(do_sample=False)` of transformers (SDPA attention, dynamic KV cache, eager);
- `hf_assisted`: the same with `assistant_model=` our draft (transformers' assisted generation, greedy: lossless);
- `deepspeed`: `deepspeed.init_inference(model, tensor_parallel={"tp_size": N}, replace_with_kernel_inject=False)`
  (AutoTP) on N GPUs, then the same greedy `generate`, autoregressive.

Weights. A peer decodes exactly the weights our runtime decodes. A Hugging Face folder checkpoint is loaded by
transformers itself (`from_pretrained`: an independent reader, so the token-identical check also covers our
loader). Random weights and GGUF checkpoints go through our loader (`runtime.loader.build_model`, TP 1: seeded
counter-hash init or GGUF dequantisation) and become a transformers module with a `LlamaConfig` /
`Qwen2Config` built from the shape preset (`hf_config`); its q/k/v and gate/up weights are views into our fused
`wqkv` / `w13` (no copy).

Timing. `ForwardTimer` hooks the top module and times every forward (CUDA events on GPU, so nothing synchronises
inside `generate`; `perf_counter` on CPU); a whole decode is timed between two device synchronisations. The
first forward of a request is its prefill; the others are decode steps (greedy: one token; assisted: one
verify of the candidates).

Tie-aware output check (`check_outputs`): every system's tokens are compared with transformers' greedy tokens.
At the first divergence the reference model's top-1 / top-2 logit margin at that step is measured; a
divergence is a numerical tie if the margin is at most `TIE_EPSILON[dtype]`, otherwise an error.
This module does not aggregate repeats or write results (bench/bench_runtime.py does).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from conf.presets import ModelShape, model_preset

TIE_EPSILON = {"float32": 1e-3, "float16": 0.1, "bfloat16": 0.5}
"""Largest top-1 / top-2 logit margin at which two correct implementations may pick different greedy tokens.
fp32: transformers' and our logits agree within 1e-5 on CPU (README), so 1e-3 leaves 100x headroom for GPU
reduction orders. bf16 / fp16: unit roundoff u = 2^-8 / 2^-11 applied to logits of magnitude ~10-30 after
O(10) roundings per layer gives differences of O(0.1) / O(0.02); the bounds take ~4x of that."""


# ---- models ---------------------------------------------------------------------------------------------
def hf_config(shape: ModelShape) -> Any:
    """A transformers LlamaConfig / Qwen2Config of `shape`, without BOS / EOS ids (the caller sets EOS)."""
    from transformers import LlamaConfig, Qwen2Config

    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": shape.rope_theta}
    if shape.rope_scaling is not None:
        rs = shape.rope_scaling
        rope = {"rope_type": "llama3", "rope_theta": shape.rope_theta, "factor": rs.factor,
                "low_freq_factor": rs.low_freq_factor, "high_freq_factor": rs.high_freq_factor,
                "original_max_position_embeddings": rs.original_max_position}
    common = dict(
        vocab_size=shape.vocab_size, hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers, num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads, max_position_embeddings=shape.max_position,
        rms_norm_eps=shape.rms_eps, tie_word_embeddings=shape.tie_embeddings, rope_parameters=rope,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    if shape.arch == "qwen2":
        return Qwen2Config(**common)
    return LlamaConfig(head_dim=shape.head_dim, attention_bias=shape.qkv_bias, **common)


def hf_from_runtime(model: Any, shape: ModelShape) -> Any:
    """A transformers module whose parameters are views of our (TP 1) `Transformer`'s, on its device."""
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM

    config = hf_config(shape)
    with torch.device("meta"):
        hf = (Qwen2ForCausalLM if shape.arch == "qwen2" else LlamaForCausalLM)(config)
    q, kv = shape.q_size, shape.kv_size
    state = {"model.embed_tokens.weight": model.embed.weight, "model.norm.weight": model.norm.weight,
             "lm_head.weight": model.lm_head.weight}
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        state[p + "input_layernorm.weight"] = layer.attn_norm.weight
        state[p + "post_attention_layernorm.weight"] = layer.mlp_norm.weight
        for name, part in zip("qkv", layer.attn.wqkv.weight.split([q, kv, kv])):
            state[f"{p}self_attn.{name}_proj.weight"] = part
        if shape.qkv_bias:
            for name, part in zip("qkv", layer.attn.wqkv.bias.split([q, kv, kv])):
                state[f"{p}self_attn.{name}_proj.bias"] = part
        state[p + "self_attn.o_proj.weight"] = layer.attn.wo.weight
        gate, up = layer.mlp.w13.weight.chunk(2)  # w13 = gate | up (runtime/model.py)
        state[p + "mlp.gate_proj.weight"], state[p + "mlp.up_proj.weight"] = gate, up
        state[p + "mlp.down_proj.weight"] = layer.mlp.w2.weight
    hf.load_state_dict(state, strict=False, assign=True)
    if shape.tie_embeddings:
        hf.tie_weights()
    # RoPE tables are buffers, not weights: rebuilt in fp32 off the meta device (as transformers computes them).
    hf.model.rotary_emb = type(hf.model.rotary_emb)(hf.config).to(model.embed.weight.device)
    meta = [n for n, t in [*hf.named_parameters(), *hf.named_buffers()] if t.is_meta]
    if meta:
        raise RuntimeError(f"{shape.name}: weights missing in the transformers module: {meta[:5]}")
    return hf.eval().requires_grad_(False)


def load_hf(mcfg: Any, device: torch.device | str, seed: int = 0) -> Any:
    """The model of `mcfg` (conf.schema.ModelConfig) as a transformers module on `device`, in `mcfg.dtype` (random
    weights: from the run's `seed`)."""
    from pathlib import Path

    from runtime.loader import build_model, resolve_dtype

    dtype = resolve_dtype(mcfg.dtype)
    ckpt = mcfg.checkpoint
    if ckpt is not None and (Path(ckpt) / "config.json").is_file():
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype).to(device)
        return model.eval().requires_grad_(False)
    shape = model_preset(mcfg.preset)
    return hf_from_runtime(build_model(shape, dtype, device, seed, checkpoint=ckpt), shape)


def set_greedy(model: Any, eos_token_id: int | None) -> None:
    """In place: the model's generation config becomes plain greedy decoding with our stop rule (EOS or length).

    Replacing the whole object matters: a checkpoint's generation_config.json (or LlamaConfig's defaults) may
    carry an EOS id the runtime does not use, or sampling settings.
    """
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(do_sample=False, eos_token_id=eos_token_id,
                                               pad_token_id=0 if eos_token_id is None else eos_token_id)


# ---- timing ---------------------------------------------------------------------------------------------
class ForwardTimer:
    """Times every forward of `module`, in call order.

    GPU: CUDA events recorded by forward hooks on the current stream (read by `calls()` after the caller's
    synchronisation); CPU: `perf_counter`.
    """

    def __init__(self, module: torch.nn.Module, device: torch.device | str) -> None:
        """Attach the hooks (remove them with `close()`)."""
        self.is_cuda = torch.device(device).type == "cuda"
        self._open: list[Any] = []
        self._done: list[tuple[Any, Any]] = []
        self._handles = [module.register_forward_pre_hook(self._pre), module.register_forward_hook(self._post)]

    def _stamp(self) -> Any:
        if not self.is_cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def _pre(self, *_: Any) -> None:
        self._open.append(self._stamp())

    def _post(self, *_: Any) -> None:
        self._done.append((self._open.pop(), self._stamp()))

    @property
    def count(self) -> int:
        """Forwards completed so far (a request boundary when read between two `generate` calls)."""
        return len(self._done)

    def calls(self) -> list[float]:
        """Seconds of every completed forward since the last call; resets the record."""
        out = [a.elapsed_time(b) / 1e3 if self.is_cuda else b - a for a, b in self._done]
        self._done.clear()
        return out

    def close(self) -> None:
        """Remove the hooks."""
        for h in self._handles:
            h.remove()


def sync(device: torch.device | str) -> None:
    """Wait for the device (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def generate(model: Any, prompt: list[int], max_new_tokens: int, assistant: Any = None) -> list[int]:
    """Greedy continuation of one prompt by transformers (`set_greedy` first); the generated ids."""
    device = model.device
    ids = torch.tensor([prompt], device=device)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             assistant_model=assistant)
    return out[0, len(prompt):].tolist()


def measure(model: Any, prompts: list[list[int]], max_new_tokens: int, *, repeats: int, warmup_runs: int,
            warmup_new_tokens: int, assistant: Any = None, timed: bool = True) -> list[dict[str, Any]]:
    """Warm-up runs, then `repeats` timed decodes of every prompt; one dict of metrics (+ outputs) per repeat.

    Every rank of a DeepSpeed group calls this in lockstep; only rank 0 passes `timed` (the others would only
    add hook overhead).
    """
    device = model.device
    for _ in range(warmup_runs):
        for p in prompts:
            generate(model, p, min(warmup_new_tokens, max_new_tokens), assistant)
    reps = []
    for _ in range(repeats):
        timers = [ForwardTimer(m, device) for m in (model, assistant) if m is not None and timed]
        firsts: list[list[int]] = [[] for _ in timers]  # index of each request's first forward, per model
        outputs = []
        sync(device)
        start = time.perf_counter()
        for p in prompts:
            for t, f in zip(timers, firsts):
                f.append(t.count)
            outputs.append(generate(model, p, max_new_tokens, assistant))
        sync(device)
        wall_s = time.perf_counter() - start
        calls = [_split(t.calls(), f) for t, f in zip(timers, firsts)]
        for t in timers:
            t.close()
        reps.append(repeat_metrics(outputs, wall_s, *calls) if timed else {"outputs": outputs})
    return reps


def _split(calls: list[float], firsts: list[int]) -> tuple[list[float], list[float]]:
    """(prefill seconds, other forwards' seconds): a request's first forward is its prefill."""
    first = set(firsts)
    return [s for i, s in enumerate(calls) if i in first], [s for i, s in enumerate(calls) if i not in first]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def repeat_metrics(outputs: list[list[int]], wall_s: float, target: tuple[list[float], list[float]],
                   draft: tuple[list[float], list[float]] | None = None) -> dict[str, Any]:
    """The benchmark's per-repeat metrics of a peer from its timed forwards ((prefills, others) per model).

    `verify_time_s` is the mean target forward after the prefill (greedy: a one-token decode step; assisted: a
    verify of the candidates); every target forward emits >= 1 token, so `mean_accept_len` = generated tokens /
    target forwards (greedy: exactly 1) and `iteration_time_s` = wall time / target forwards.
    `expand_time_s` is the mean draft forward after the draft's prefill.
    """
    generated = sum(len(o) for o in outputs)
    forwards = len(target[0]) + len(target[1])
    return {
        "outputs": outputs, "wall_s": wall_s, "generated_tokens": generated,
        "tokens_per_s": generated / wall_s if wall_s > 0 else None,
        "time_per_output_token_s": wall_s / generated if generated else None,
        "target_forwards": forwards,
        "mean_accept_len": generated / forwards if forwards else None,
        "iteration_time_s": wall_s / forwards if forwards else None,
        "verify_time_s": _mean(target[1]), "prefill_s": _mean(target[0]),
        "expand_time_s": _mean(draft[1]) if draft is not None else None,
        "draft_forwards": len(draft[0]) + len(draft[1]) if draft is not None else None,
    }


# ---- tie-aware output check -----------------------------------------------------------------------------
def first_divergence(ref: list[int], out: list[int]) -> int | None:
    """Index of the first differing token (a length difference counts at the shorter length), or None."""
    for k, (a, b) in enumerate(zip(ref, out)):
        if a != b:
            return k
    return None if len(ref) == len(out) else min(len(ref), len(out))


def top2_margin(model: Any, prefix: list[int]) -> float:
    """Top-1 minus top-2 logit of the reference model's next-token distribution after `prefix` (fp32)."""
    ids = torch.tensor([prefix], device=model.device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, -1].float()
    top = logits.topk(2).values
    return float(top[0] - top[1])


def check_outputs(model: Any, prompts: list[list[int]], reference: list[list[int]], outputs: list[list[int]],
                  dtype: str) -> dict[str, Any]:
    """Compare `outputs` with the reference (transformers greedy) tokens, request by request, tie-aware.

    Returns {"status": "identical" | "tie" | "error", "epsilon", "requests": [per-request dicts]}: "tie" when
    every divergence has a reference margin <= epsilon, "error" when any has a larger one.
    """
    eps = TIE_EPSILON[dtype]
    per: list[dict[str, Any]] = []
    for rid, (prompt, ref, out) in enumerate(zip(prompts, reference, outputs)):
        k = first_divergence(ref, out)
        if k is None:
            per.append({"request": rid, "identical": True})
            continue
        margin = top2_margin(model, prompt + ref[:k])
        per.append({"request": rid, "identical": False, "first_divergence": k, "margin": margin,
                    "reference_token": ref[k] if k < len(ref) else None,
                    "token": out[k] if k < len(out) else None, "is_tie": margin <= eps})
    status = ("identical" if all(r["identical"] for r in per)
              else "tie" if all(r["identical"] or r["is_tie"] for r in per) else "error")
    return {"status": status, "epsilon": eps, "dtype": dtype, "requests": per}


# ---- DeepSpeed-Inference (AutoTP) -----------------------------------------------------------------------
def deepspeed_skip_reason(device: torch.device, tp_size: int) -> str | None:
    """Why the DeepSpeed peer cannot run here (None if it can)."""
    if device.type != "cuda":
        # NOTE(bench, 2026-11-29): on this project's CPU machine AutoTP shards the model, but the first
        # all-reduce (DeepSpeed's shm inference_all_reduce op) dies with SIGSEGV; CPU timings would not
        # describe the GPU peer anyway.
        return "DeepSpeed-Inference runs on CUDA devices only here (no GPU: its CPU shm all-reduce crashes)"
    if torch.cuda.device_count() < tp_size:
        return f"needs {tp_size} GPUs for tp_size={tp_size}, {torch.cuda.device_count()} visible"
    try:
        import deepspeed  # noqa: F401
    except Exception as exc:  # an ImportError, or a broken install failing at import
        return f"deepspeed is not importable: {type(exc).__name__}: {exc}"
    return None


class GroupMpu:
    """The model-parallel unit DeepSpeed asks for, over our TP group (DeepSpeed's own group creation reads
    LOCAL_RANK from the environment, which spawned ranks do not set)."""

    def __init__(self, group: Any) -> None:
        """Wrap `group` (a torch.distributed process group)."""
        self.group = group

    def get_model_parallel_group(self) -> Any:
        """The TP group."""
        return self.group

    def get_model_parallel_rank(self) -> int:
        """This rank's index in the TP group."""
        import torch.distributed as dist

        return dist.get_rank(self.group)

    def get_model_parallel_world_size(self) -> int:
        """The TP degree."""
        import torch.distributed as dist

        return dist.get_world_size(self.group)


def run_deepspeed(ctx: Any, cfg: Any, *, prompts: list[list[int]], eos_token_id: int | None, max_new_tokens: int,
                  repeats: int, warmup_runs: int, warmup_new_tokens: int) -> dict[str, Any] | None:
    """Rank function (`runtime.launch`, `cfg.parallel` = N target ranks, no draft): AutoTP over the target
    group, then greedy `generate` of every prompt on every rank in lockstep; rank 0 returns the repeats.

    Every rank builds the full (TP 1) model on its GPU first; `init_inference` then keeps its shard.
    """
    import deepspeed

    model = load_hf(cfg.model.target, ctx.device, cfg.seed)
    set_greedy(model, eos_token_id)
    deepspeed.init_distributed(dist_backend=ctx.backend)  # adopts the process group `launch` created
    tp: dict[str, Any] = {"tp_size": ctx.group_size}
    if ctx.group_size > 1:
        tp["mpu"] = GroupMpu(ctx.tp_group)
    engine = deepspeed.init_inference(model, tensor_parallel=tp, dtype=model.dtype, replace_with_kernel_inject=False)
    inner = getattr(engine.module, "model", None)
    if getattr(inner, "rotary_emb", None) is not None:
        # init_inference casts the whole module to `dtype`, RoPE inverse frequencies included (to 8 bits in
        # bf16); transformers and our runtime keep them in fp32. Restore them so that only TP differs.
        inner.rotary_emb = type(inner.rotary_emb)(engine.module.config).to(ctx.device)
    reps = measure(engine.module, prompts, max_new_tokens, repeats=repeats, warmup_runs=warmup_runs,
                   warmup_new_tokens=warmup_new_tokens, timed=ctx.rank == 0)
    return {"repeats": reps, "tp_size": ctx.group_size} if ctx.rank == 0 else None


# ---- the benchmark's peer phases ------------------------------------------------------------------------
BUDGET_SPENT = "time budget spent (budget_s)"


def run_deepspeed_phase(bc: Any, cfg: Any, prompts: list[list[int]], eos_token_id: int | None,
                        device: torch.device, deadline: float) -> dict[str, Any]:
    """Phase 2 of bench/bench_runtime.py: `cfg` (N target ranks, no draft) launched with `run_deepspeed`.

    Returns {"repeats": [...], "tp_size"}, {"error": ...} or {"skipped": reason}.
    """
    from functools import partial

    from runtime.launch import launch

    reason = deepspeed_skip_reason(device, cfg.parallel.target_gpus)
    if reason is not None or time.time() > deadline:
        return {"skipped": reason or BUDGET_SPENT}
    fn = partial(run_deepspeed, prompts=prompts, eos_token_id=eos_token_id, max_new_tokens=bc.selected.max_new_tokens,
                 repeats=bc.repeats, warmup_runs=bc.warmup_runs, warmup_new_tokens=bc.warmup_new_tokens)
    try:
        return launch(fn, cfg)
    except Exception as exc:  # reported as the peer's row; the benchmark goes on
        return {"error": f"{type(exc).__name__}: {exc}"[:4000]}


def run_hf_phase(bc: Any, cfg: Any, prompts: list[list[int]], eos_token_id: int | None, device: torch.device,
                 deadline: float) -> dict[str, Any]:
    """Phase 3, in the calling process (GPU 0 or CPU): hf_greedy and hf_assisted as the workload asks.

    Returns {peer: {"repeats"} | {"error"} | {"skipped"}}.
    """
    wl = bc.selected
    wanted = [p for p in ("hf_greedy", "hf_assisted") if p in wl.peers]
    results: dict[str, Any] = {}
    if not wanted:
        return results
    try:
        import transformers  # noqa: F401
    except Exception as exc:  # an ImportError, or a broken install failing at import
        return {p: {"skipped": f"transformers is not importable: {exc}"} for p in wanted}
    kw = dict(repeats=bc.repeats, warmup_runs=bc.warmup_runs, warmup_new_tokens=bc.warmup_new_tokens)
    dev = "cuda:0" if device.type == "cuda" else "cpu"
    target = None
    for peer in wanted:
        if time.time() > deadline:
            results[peer] = {"skipped": BUDGET_SPENT}
            continue
        try:
            if target is None:
                target = load_hf(cfg.model.target, dev, cfg.seed)
                set_greedy(target, eos_token_id)
            draft = None
            if peer == "hf_assisted":
                draft = load_hf(cfg.model.draft, dev, cfg.seed)
                set_greedy(draft, eos_token_id)
            results[peer] = {"repeats": measure(target, prompts, wl.max_new_tokens, assistant=draft, **kw),
                             "attn_implementation": target.config._attn_implementation}
            del draft
        except Exception as exc:  # reported as the peer's row; the benchmark goes on
            results[peer] = {"error": f"{type(exc).__name__}: {exc}"[:4000]}
    return results


def run_checks(cfg: Any, prompts: list[list[int]], device: torch.device, reference: str,
               outputs: dict[str, list[list[int]]]) -> dict[str, Any]:
    """The tie-aware check of every system's tokens in `outputs` against those of `outputs[reference]` (a greedy
    transformers run), margins from an eager transformers target (`load_hf`).

    Returns {system key: check_outputs result} for every key but the reference's.
    """
    target = load_hf(cfg.model.target, "cuda:0" if device.type == "cuda" else "cpu", cfg.seed)
    return {key: check_outputs(target, prompts, outputs[reference], out, cfg.model.target.dtype)
            for key, out in outputs.items() if key != reference}
