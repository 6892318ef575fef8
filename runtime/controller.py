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
import math
import statistics
import time
from collections import deque
from collections.abc import Callable
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

    A round runs from one proposal's send to the next: `sent` -> `shared_d` -> d overlapped expansions ->
    `received` -> re-root and refill (more `expanded` calls) -> `sent` of the next round.

    Auto:
    - the first `SKIP` rounds of the run are not measured: their verify and expansion times include one-off
      costs (Triton JIT compilation on either side, allocator warm-up) that can reach seconds. Neither is the
      first round of a request as a verify sample (its verify may still cover the target's prefill);
    - `WARMUP` rounds at d = 1 measure t_expand (every expansion in them) and t_verify (send -> receive of the
      verified path, which covers the one overlapped expansion when it is shorter than the verify); then
      r = floor(median t_verify / median t_expand) ([P] §3.1.3);
    - the candidates r and r + 1 are clamped to [1, `d_max`] (`d_max`: the overlapped expansions that can
      still fit into the tree; None = unbounded); if both clamp to one value it is taken at once, else `TRIAL`
      rounds each at d = r and d = r + 1 measure tokens per second (emitted tokens over the time between
      consecutive proposals; a round slower than `OUTLIER` x its candidate's median round is left out, as a
      late compilation), and the faster is kept (ties: the smaller d);
    - drift: the median time of `WINDOW` rounds at the kept d right after the choice is the reference; when
      the median of the last `WINDOW` rounds later differs from it by more than a factor `DRIFT`, the tuning
      restarts from the warm-up, at most `RETUNES` times per run.
    Expansion times that are not positive and finite (clock artefacts) are ignored; without a usable one
    d stays 1. A fixed d is taken as given (no clamping, no measurement).
    """

    SKIP = 2
    WARMUP = 3
    TRIAL = 4
    OUTLIER = 4.0
    WINDOW = 8
    DRIFT = 2.0
    RETUNES = 1

    def __init__(self, fixed: int | None, ctx: ParallelContext, d_max: int | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        """`fixed` = spec d as an int, None = auto; `d_max` bounds auto d (None = unbounded); `clock` in seconds."""
        if d_max is not None and d_max < 1:
            raise ValueError(f"d_max must be >= 1 (or None), got {d_max}")
        self.ctx, self.fixed, self.d_max, self.clock = ctx, fixed, d_max, clock
        self.chosen: int | None = fixed
        self._expand_s: list[float] = []
        self._verify_s: list[float] = []
        self._trials: dict[int, list[tuple[float, int]]] = {}  # d -> [(seconds, tokens) per round]
        self._candidates: list[int] = []
        self._sent_at: float | None = None
        self.round_d = 1 if fixed is None else fixed  # d of the current round
        self._round_tokens = 0
        self._rounds = 0  # rounds started (proposals sent) in this run
        self._first_of_request = False  # the current round is a request's first
        self._watch: deque[float] = deque(maxlen=self.WINDOW)  # round times at the chosen d
        self._reference: float | None = None
        self._retunes_left = self.RETUNES

    def _warming_up(self) -> bool:
        """True while auto d collects warm-up samples (on the leader, past the skipped rounds)."""
        return self.ctx.is_leader and self.chosen is None and not self._candidates and self._rounds > self.SKIP

    def expanded(self, seconds: float) -> None:
        """Record one expansion's duration."""
        if self._warming_up() and math.isfinite(seconds) and seconds > 0:
            self._expand_s.append(seconds)

    def sent(self, new_request: bool = False) -> None:
        """A proposal went out: closes the previous round (unless a new request started)."""
        now = self.clock()
        if self._sent_at is not None and not new_request and self._round_tokens:
            self._close_round(now - self._sent_at, self._round_tokens)
        self._sent_at, self._round_tokens = now, 0
        self._rounds += 1
        self._first_of_request = new_request

    def received(self, emitted: int) -> None:
        """The verified path arrived (after the overlapped expansions)."""
        if self._sent_at is not None and self._warming_up() and not self._first_of_request:
            took = self.clock() - self._sent_at
            if math.isfinite(took):
                self._verify_s.append(took)
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

    # ---- internals (auto d, on the leader) ------------------------------------------------------------------
    def _clamp(self, d: int) -> int:
        return max(1, d if self.d_max is None else min(d, self.d_max))

    def _close_round(self, seconds: float, tokens: int) -> None:
        """A measured round (at `round_d`) ended: feed the trial of its d, or the drift watch."""
        if self.fixed is not None:
            return
        trial = self._trials.get(self.round_d)
        if self.chosen is None and trial is not None:
            trial.append((seconds, tokens))
        elif self.chosen is not None and self.round_d == self.chosen and self._retunes_left > 0:
            self._watch.append(seconds)
            if len(self._watch) < self.WINDOW:
                return
            median = statistics.median(self._watch)
            if self._reference is None:
                self._reference = median
                self._watch.clear()
            elif not self._reference / self.DRIFT <= median <= self._reference * self.DRIFT:
                self._retune()

    def _retune(self) -> None:
        """Start over from the warm-up (the run's compilations are behind it: nothing more is skipped)."""
        self._retunes_left -= 1
        self.chosen, self._candidates, self._trials = None, [], {}
        self._expand_s, self._verify_s = [], []
        self._watch.clear()
        self._reference = None

    def _choose(self, d: int) -> int:
        self.chosen = d
        self._watch.clear()
        self._reference = None
        return d

    def _rate(self, d: int) -> float:
        """Tokens per second of a candidate's trial rounds, outlier rounds left out."""
        rounds = self._trials[d]
        cut = self.OUTLIER * statistics.median(s for s, _ in rounds)
        kept = [(s, n) for s, n in rounds if s <= cut]
        return sum(n for _, n in kept) / max(sum(s for s, _ in kept), 1e-12)

    def _decide(self) -> int:
        if self.chosen is not None:
            return self.chosen
        if not self._candidates:
            if len(self._verify_s) < self.WARMUP or not self._expand_s:
                return 1
            r = math.floor(statistics.median(self._verify_s) / statistics.median(self._expand_s))
            candidates = sorted({self._clamp(r), self._clamp(r + 1)})
            if len(candidates) == 1:
                return self._choose(candidates[0])
            self._candidates = candidates
            self._trials = {d: [] for d in candidates}
        for d in self._candidates:
            if len(self._trials[d]) < self.TRIAL:
                return d
        return self._choose(max(self._candidates, key=self._rate))
