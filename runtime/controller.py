"""Request-level control of the engine: workload, stop rule, per-request generators, and the choice of d.

- `load_workload`: the prompts (token ids) and EOS id of a run, checked against the model and the cache;
- `Emitter`: a request's output and its stop rule (EOS, max_new_tokens, cache capacity), token by token;
- `request_generator`: one seeded `torch.Generator` per request and purpose (sampling, oracle);
- `DepthTuner`: d, the draft expansions that overlap one verify in async_tree, fixed or auto ([P] §3.1.3:
  r = floor(t_verify / t_expand), try d = r and d = r + 1, keep the faster).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist

from conf.presets import model_preset
from conf.schema import ExperimentConfig
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


def load_workload(cfg: ExperimentConfig, prompts: list[list[int]] | None = None,
                  eos_token_id: int | None = None) -> tuple[list[list[int]], int | None]:
    """The run's prompts as token ids, and the EOS id.

    Given `prompts` win; else `workload.prompts` (all of them) or `workload.prompt_file` (JSONL, key
    "prompt") through the tokenizer; else `workload.num_requests` random prompts of `prompt_tokens` tokens
    from `workload.seed`. EOS: `eos_token_id` if given, else the tokenizer's (none for random weights
    without a tokenizer).
    """
    wl = cfg.workload
    vocab = model_preset(cfg.model.target.preset).token_count
    source = cfg.model.tokenizer or cfg.model.target.checkpoint
    texts = list(wl.prompts)
    if not texts and wl.prompt_file is not None and prompts is None:
        texts = [json.loads(line)["prompt"] for line in Path(wl.prompt_file).read_text().splitlines() if line.strip()]
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
                       for _ in range(wl.num_requests)]
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


class DepthTuner:
    """d for async_tree: fixed, or auto from measured times; decided on the draft leader, shared in its group.

    Auto: `WARMUP` rounds at d = 1 measure t_expand (every expansion) and t_verify (send -> receive of the
    verified path, which covers the one overlapped expansion when it is shorter than the verify); then
    r = floor(t_verify / t_expand), and `TRIAL` rounds each at d = r and d = r + 1 measure tokens per second
    (emitted tokens over the time between consecutive proposals); the faster is kept for the rest of the run.
    """

    WARMUP = 3
    TRIAL = 4

    def __init__(self, fixed: int | None, ctx: ParallelContext) -> None:
        """`fixed` = spec d as an int, None = auto."""
        self.ctx, self.fixed = ctx, fixed
        self.chosen: int | None = fixed
        self._expand_s: list[float] = []
        self._verify_s: list[float] = []
        self._trials: dict[int, list[float]] = {}  # d -> [seconds, tokens, rounds]
        self._candidates: list[int] = []
        self._sent_at: float | None = None
        self.round_d = 1 if fixed is None else fixed  # d of the current round
        self._round_tokens = 0

    def expanded(self, seconds: float) -> None:
        """Record one expansion's duration."""
        self._expand_s.append(seconds)

    def sent(self, new_request: bool = False) -> None:
        """A proposal went out: closes the previous round (unless a new request started)."""
        now = time.perf_counter()
        if self._sent_at is not None and not new_request and self._round_tokens:
            trial = self._trials.get(self.round_d)
            if trial is not None:
                trial[0] += now - self._sent_at
                trial[1] += self._round_tokens
                trial[2] += 1
        self._sent_at, self._round_tokens = now, 0

    def received(self, emitted: int) -> None:
        """The verified path arrived (after the overlapped expansions)."""
        if self._sent_at is not None and self.chosen is None and not self._candidates:
            self._verify_s.append(time.perf_counter() - self._sent_at)
        self._round_tokens = emitted

    def shared_d(self) -> int:
        """This round's d, the leader's decision broadcast to the draft group when it is measured."""
        if self.fixed is not None:  # every rank of the group knows it: nothing to share
            self.round_d = self.fixed
            return self.fixed
        d = self._decide() if self.ctx.is_leader else 0
        if self.ctx.group_size > 1:
            t = torch.tensor([d], device=self.ctx.device)
            work = dist.broadcast(t, src=self.ctx.leader_rank, group=self.ctx.tp_group, async_op=True)
            wait_bounded(work, 2 * self.ctx.timeout_s, f"{self.ctx.label}: broadcast of d",
                         poll=self.ctx.backend == "nccl")
            d = int(t)
        self.round_d = d
        return d

    def _decide(self) -> int:
        if self.chosen is not None:
            return self.chosen
        if len(self._verify_s) < self.WARMUP or not self._expand_s:
            return 1
        if not self._candidates:
            r = math.floor(statistics.median(self._verify_s) / statistics.median(self._expand_s))
            self._candidates = [r, r + 1]
            self._trials = {d: [0.0, 0, 0] for d in self._candidates}
        for d in self._candidates:
            if self._trials[d][2] < self.TRIAL:
                return d
        self.chosen = max(self._candidates, key=lambda d: self._trials[d][1] / max(self._trials[d][0], 1e-12))
        return self.chosen
