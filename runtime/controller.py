"""Request-level control of the engine: workload, stop rule, per-request generators, and the choice of d.

- `load_workload`: the prompts (token ids) and EOS id of a run, checked against the model and the cache;
- `Emitter`: a request's output and its stop rule (EOS, max_new_tokens, cache capacity), token by token;
- `request_generator`: one seeded `torch.Generator` per request and purpose (sampling, oracle);
- `DepthTuner`: d, the draft expansions that overlap one verify in async_tree, fixed or auto ([P] §3.1.3:
  r = floor(t_verify / t_expand) after skipping the compile-laden first rounds, try d = r and d = r + 1
  bounded by what fits in the tree, keep the faster).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from conf.presets import model_preset
from conf.schema import ExperimentConfig
from policy.depth_tuner import DepthTuner as _DepthTuner
from policy.depth_tuner import SerialDepthTuner as _SerialDepthTuner
from runtime.parallel import ParallelContext, wait_bounded

_STREAMS = {"sample": 1, "oracle": 2}


def request_generator(seed: int, request_id: int, stream: str, device: torch.device | str = "cpu") -> torch.Generator:
    """The generator of one request and purpose; equal arguments give equal streams on every rank."""
    gen = torch.Generator(device=device)
    gen.manual_seed((seed * 1_000_003 + request_id) * 8 + _STREAMS[stream])
    return gen


def check_prompt(prompt: list[int], vocab: int, capacity: int, index: int = 0) -> None:
    """Raise ValueError unless the prompt is non-empty, fits the cache and holds only known token ids."""
    if not prompt:
        raise ValueError(f"prompt {index} is empty: decoding needs at least one token")
    if len(prompt) >= capacity:
        raise ValueError(f"prompt {index} has {len(prompt)} tokens, but the context holds {capacity} "
                         f"(workload.max_seq_len_tokens) including at least one generated token")
    bad = [t for t in prompt if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"prompt {index} holds unknown token ids {bad[:5]} (vocabulary: 0..{vocab - 1})")


def read_prompt_file(path: str | Path) -> list[str]:
    """The prompts of a JSONL file, one {"prompt": "..."} per line (blank lines skipped); ConfigError naming
    `workload.prompt_file`, the file and the line otherwise."""
    from conf.frozen import ConfigError
    from conf.paths import resolve_path

    p = resolve_path(path)
    try:
        lines = p.read_text().splitlines()
    except OSError as e:
        raise ConfigError(f"workload.prompt_file: {path}: cannot be read ({e.strerror or e})") from e
    texts = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"workload.prompt_file: {path}:{i} is not JSON ({e})") from e
        if not isinstance(record, dict) or not isinstance(record.get("prompt"), str):
            raise ConfigError(f'workload.prompt_file: {path}:{i} needs a string "prompt" field')
        texts.append(record["prompt"])
    if not texts:
        raise ConfigError(f"workload.prompt_file: {path} holds no prompt")
    return texts


def prompt_source(cfg: ExperimentConfig) -> str:
    """Where the run's prompts come from: prompt_file (when set) > prompts > random (the run records it)."""
    return "prompt_file" if cfg.workload.prompt_file is not None else "prompts" if cfg.workload.prompts else "random"


def workload_texts(cfg: ExperimentConfig) -> tuple[list[str], str]:
    """The run's text prompts and where they come from, by the one precedence of docs/ERRORS.md: the prompt file when
    `workload.prompt_file` is set (it replaces `workload.prompts`, e.g. the demo's), else `workload.prompts`, else
    none (random prompts); the first `workload.num_requests` of them (None: all)."""
    wl = cfg.workload
    source = prompt_source(cfg)
    if source == "random":
        return [], source
    texts = read_prompt_file(wl.prompt_file) if source == "prompt_file" else list(wl.prompts)
    if wl.num_requests is not None:
        if wl.num_requests > len(texts):
            from conf.frozen import ConfigError

            raise ConfigError(f"workload.num_requests: {wl.num_requests} requests, but workload.{source} holds "
                              f"{len(texts)} prompt(s); ask for at most {len(texts)}, or null for all of them")
        texts = texts[:wl.num_requests]
    return texts, source


def load_workload(cfg: ExperimentConfig, prompts: list[list[int]] | None = None,
                  eos_token_id: int | None = None) -> tuple[list[list[int]], int | None]:
    """The run's prompts as token ids, and the EOS id.

    Given `prompts` win; else the text prompts of `workload_texts` (the prompt file, else `workload.prompts`)
    through the tokenizer; else `workload.num_requests` (None: 1) random prompts of `prompt_tokens` tokens from
    `workload.seed`. EOS: `eos_token_id` if given, else `workload.eos_token_id`, else the tokenizer's (none for
    random weights without a tokenizer).
    """
    wl = cfg.workload
    vocab = model_preset(cfg.model.target.preset).token_count
    source = cfg.model.tokenizer or cfg.model.target.checkpoint
    texts = workload_texts(cfg)[0] if prompts is None else []
    tokenizer = None
    if prompts is None and (texts or source is not None):
        from runtime.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(source)
    if prompts is None:
        if texts:
            prompts = [tokenizer.encode(t) for t in texts]
        else:
            gen = torch.Generator().manual_seed(wl.seed)
            prompts = [torch.randint(0, vocab, (wl.prompt_tokens,), generator=gen).tolist()
                       for _ in range(wl.num_requests or 1)]
    if eos_token_id is None:
        eos_token_id = wl.eos_token_id
    if eos_token_id is None and tokenizer is not None:
        eos_token_id = tokenizer.eos_id
    for i, prompt in enumerate(prompts):
        check_prompt(list(prompt), vocab, wl.max_seq_len_tokens, i)
    return [list(p) for p in prompts], eos_token_id


class Emitter:
    """The generated tokens of one request and its stop rule (the same as `runtime.reference`)."""

    def __init__(self, prompt: list[int], max_new_tokens: int, capacity: int, eos_token_id: int | None) -> None:
        """Stop after EOS, after `max_new_tokens`, or when prompt + output reaches `capacity`."""
        self.limit = min(max_new_tokens, capacity - len(prompt))
        self.eos = eos_token_id
        self.tokens: list[int] = []
        self.done = False

    def emit(self, tokens: list[int]) -> bool:
        """Append a verify's tokens up to the stop rule; True once the request is done."""
        for token in tokens:
            self.tokens.append(token)
            if token == self.eos or len(self.tokens) >= self.limit:
                self.done = True
                break
        return self.done

    def replace_last(self, token: int) -> None:
        """Oracle runs: the draft resolved the last (placeholder) bonus token to `token`."""
        self.tokens[-1] = token


def stop_reason(tokens: list[int], prompt_len: int, max_new_tokens: int, capacity: int,
                eos_token_id: int | None) -> str:
    """Which of Emitter's stop rules ended a request's `tokens`: "eos", "max_new_tokens" or "max_seq_len" (prompt +
    output reached `capacity`, workload.max_seq_len_tokens: the KV cache's end, before max_new_tokens). Several can hold
    at once; the first in that order is named."""
    if tokens and eos_token_id is not None and tokens[-1] == eos_token_id:
        return "eos"
    if len(tokens) >= max_new_tokens:
        return "max_new_tokens"
    if prompt_len + len(tokens) >= capacity:
        return "max_seq_len"
    raise ValueError(f"stop_reason: {len(tokens)} tokens after a {prompt_len}-token prompt meet no stop rule "
                     f"(max_new_tokens {max_new_tokens}, capacity {capacity}, eos {eos_token_id})")


def broadcast_d(ctx: ParallelContext) -> Callable[[int], int]:
    """The DepthTuner's `share` for a draft group of several ranks: the leader's d, broadcast over the group."""

    def share(d: int) -> int:
        t = torch.tensor([d], device=ctx.device)
        work = dist.broadcast(t, src=ctx.leader_rank, group=ctx.tp_group, async_op=True)
        wait_bounded(work, 2 * ctx.timeout_s, f"{ctx.label}: broadcast of d", poll=ctx.backend == "nccl")
        return int(t)

    return share


class DepthTuner(_DepthTuner):
    """policy.depth_tuner.DepthTuner of a draft group's rank: its leader decides, a group of several shares d by a
    broadcast (see `broadcast_d`)."""

    def __init__(self, fixed: int | None, ctx: ParallelContext, d_max: int | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__(fixed, d_max=d_max, clock=clock, leader=ctx.is_leader,
                         share=broadcast_d(ctx) if ctx.group_size > 1 else None)


class SerialDepthTuner(_SerialDepthTuner):
    """policy.depth_tuner.SerialDepthTuner of a rank that grows the draft tree (the draft group's, or the target's
    when colocated): its group's leader decides, a group of several shares d by a broadcast (see `broadcast_d`)."""

    def __init__(self, fixed: int | None, ctx: ParallelContext, bs: int, w: int, max_tree_nodes: int,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__(fixed, bs, w, max_tree_nodes, clock=clock, leader=ctx.is_leader,
                         share=broadcast_d(ctx) if ctx.group_size > 1 else None)
