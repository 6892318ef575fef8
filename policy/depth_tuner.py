"""d for the tree modes: fixed, or auto from measured rounds. Torch-free: the runtime's draft leader runs the
tuners on host time (runtime.controller passes its group's broadcast as `share`), the simulator on SimPy time
(`sim.d_rule=runtime`), so a simulated auto-d run pays the same warm-up and trial rounds as a measured one.

- async_tree (`DepthTuner`), [P] §3.1.3: r = floor(t_verify / t_expand) after skipping the compile-laden first
  rounds, try d = r and d = r + 1 bounded by what fits in the tree, keep the faster.
- serial_tree (`SerialDepthTuner`, not in [P]): d expansions after the refill, found by a hill climb (`HillClimb`)
  from the breadth rule `breadth_d` over measured rounds, each scored by the expected tokens per second of the
  proposals it grew. The simulator's analytic rules take the same climb over pilot simulations
  (simulator/simulation.py `serial_auto_d`), so both land on the same d.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable


def breadth_d(bs: int, w: int) -> int:
    """The breadth rule: ceil((bs - 1) / w), the fewest forwards of w leaves that grow bs - 1 nodes below the root.
    serial_tree's d before the tuner, and its climb's start (`SerialDepthTuner`). Blind to the draft: a strong draft's
    tree wants depth, not breadth (at bs 16, w 8 it caps the proposal near depth 3 whatever the draft)."""
    return max(1, math.ceil((bs - 1) / w))


def serial_d_max(bs: int, w: int, max_tree_nodes: int) -> int:
    """The largest serial d worth trying: min(bs - 1, max_tree_nodes // w), at least 1.

    bs - 1: expansion is best-first (each forward takes the w highest-weight leaves, weights never rise along a
    path or along sibling ranks), so forward k expands the k-th best node of the unbounded tree at the latest; after
    bs - 1 forwards the bs - 1 best are expanded and the top-bs selection is final: more cannot change the proposal.
    max_tree_nodes // w: the forwards an empty tree region holds (runtime and simulator stop a full tree)."""
    return max(1, min(bs - 1, max_tree_nodes // w))


class HillClimb:
    """The order in which serial d candidates are measured: d0 first, then d0 + 1, d0 + 2, ... until `PATIENCE`
    candidates in a row did not beat the best so far; if none going up did, d0 - 1, d0 - 2, ... the same way; all
    within [1, `d_max`]. The best measured is kept (ties: the one measured first). Torch-free and clock-free: the
    caller measures (`SerialDepthTuner` on rounds, the simulator on pilot simulations) and `record`s each rate.

    Why a climb and not a formula: tokens per second against d is unimodal on every preset of the acceptance family
    (more depth adds expected tokens at a falling rate, each forward adds a fixed time), and where its peak lies
    depends on the draft (weak: d = 1, strong at bs 16: d = 8-11), which no rule of bs and w alone can know."""

    PATIENCE = 2
    """Candidates in a row that do not beat the best before a direction ends. Why not 1: neighbouring d differ by a
    few percent, about the noise of a measured trial, so one unlucky trial would end the climb far below the peak."""

    def __init__(self, d0: int, d_max: int) -> None:
        if d_max < 1:
            raise ValueError(f"HillClimb: d_max must be >= 1, got {d_max}")
        self.d_max = d_max
        self.d0 = min(max(1, d0), d_max)
        self.rates: dict[int, float] = {}
        self.next: int | None = self.d0
        """The candidate to measure next; None: done, `best` is final."""
        self._step, self._misses = 1, 0

    @property
    def best(self) -> int:
        """The best candidate measured so far (d0 before any)."""
        return max(self.rates, key=lambda d: self.rates[d]) if self.rates else self.d0

    def record(self, d: int, rate: float) -> None:
        """`d`'s measured rate (tokens per second); moves `next` on."""
        if d != self.next:
            raise ValueError(f"HillClimb: measured d = {d}, expected the candidate {self.next}")
        improved = not self.rates or rate > self.rates[self.best]
        self.rates[d] = rate
        self._misses = 0 if improved else self._misses + 1
        nxt = d + self._step
        if self._misses >= self.PATIENCE or not 1 <= nxt <= self.d_max:
            if self._step < 0 or self.best != self.d0:  # done: down already, or up found a better d
                self.next = None
                return
            self._step, self._misses, nxt = -1, 0, self.d0 - 1  # nothing up beat d0: try down
        self.next = nxt if 1 <= nxt <= self.d_max and nxt not in self.rates else None


def climb(rate: Callable[[int], float], d0: int, d_max: int) -> int:
    """The `HillClimb` over a rate function (e.g. the simulator's pilot simulations): its best d."""
    hc = HillClimb(d0, d_max)
    while hc.next is not None:
        hc.record(hc.next, rate(hc.next))
    return hc.best


class DepthTuner:
    """d for async_tree: fixed, or auto from measured times; decided on the draft leader, shared in its group.

    A round runs from one proposal's send to the next: `sent` -> (the last re-root's deferred KV compaction) ->
    `shared_d` -> d overlapped expansions -> `received` -> re-root and refill (more `expanded` calls) -> `sent`
    of the next round. The measured t_expand does not include the compaction; the r / r + 1 trial's
    tokens-per-second does.

    Auto:
    - the first `SKIP` rounds of the run are not measured: their verify and expansion times include one-off
      costs (Triton JIT compilation on either side, allocator warm-up) that can reach seconds. Neither is the
      first round of a request as a verify sample (its verify may still cover the target's prefill);
    - `WARMUP` rounds at d = 1 measure t_expand (every expansion in them) and t_verify (send -> receive of the
      verified path, which covers the one overlapped expansion when it is shorter than the verify); then
      r = floor(median t_verify / median t_expand) ([P] §3.1.3);
    - the candidates r and r + 1 are clamped to [1, `d_max`] (`d_max`: the overlapped expansions that can
      still fit into the tree; None = unbounded); if both clamp to one value it is taken at once, else `TRIAL`
      rounds at d = r, then `TRIAL` at d = r + 1 (`ALTERNATE`: r, r + 1, r, ...) measure tokens per second
      (tokens over the time between consecutive proposals; a round slower than `OUTLIER` x its candidate's
      median round is left out, as a late compilation), and the faster is kept (ties: the smaller d);
    - a round's tokens are those of the proposal it grew (its d overlapped expansions and its refill made the
      next proposal sent), not of the one it verified: that proposal's *expected* tokens when the caller gives
      them (`sent(expected_tokens=...)`: 1 + the selected nodes' path probabilities under the draft's own
      weights), else the tokens it emits (`EXPECTED`, `CREDIT_GROWN`). Not in [P]. Why: a round emits 1 to 5 tokens and
      hits or misses by luck, which swamps the few percent between d = r and r + 1; on the simulator this policy
      (16 + 16 rounds, expected tokens of the grown proposal) finds the best fixed d far more often than the earlier
      one (4 + 4 rounds, emitted tokens of the verified proposal); the study's numbers are in docs/archive/LOG_*.md;
    - drift: the median time of `WINDOW` rounds at the kept d right after the choice is the reference; when
      the median of the last `WINDOW` rounds later differs from it by more than a factor `DRIFT`, the tuning
      restarts from the warm-up, at most `RETUNES` times per run.
    Expansion times that are not positive and finite (clock artefacts) are ignored; without a usable one
    d stays 1. A fixed d is taken as given (no clamping, no measurement).
    """

    SKIP = 2
    WARMUP = 3
    TRIAL = 16
    OUTLIER = 4.0
    WINDOW = 8
    DRIFT = 2.0
    RETUNES = 1
    ALTERNATE = False
    """Trial rounds alternate the candidates (False: `TRIAL` rounds of r, then of r + 1). Alternating mixes the
    trees the two candidates grow, and with each round credited with the proposal it grew it gains nothing (the same
    study)."""
    EXPECTED = True
    """Trials count the proposals' expected tokens when given (False: the emitted ones, the earlier policy)."""
    CREDIT_GROWN = True
    """A round is credited with the proposal it grew (the next one sent); False: with the one it verified, the
    earlier policy, one round off (a trial round's d shaped the next proposal, not the one being verified)."""

    def __init__(self, fixed: int | None, d_max: int | None = None,
                 clock: Callable[[], float] = time.perf_counter, *, leader: bool = True,
                 share: Callable[[int], int] | None = None) -> None:
        """`fixed` = spec d as an int, None = auto; `d_max` bounds auto d (None = unbounded); `clock` in seconds.

        `leader`: this rank decides d (a group's other ranks take it from `share`). `share(d)` hands the leader's d
        to every rank of a group of more than one and returns it (the runtime broadcasts over the draft group);
        None: a group of one, the leader alone (the simulator's draft group).
        """
        if not leader and share is None:
            raise ValueError("DepthTuner: a rank that is not its group's leader needs `share` to learn d")
        if d_max is not None and d_max < 1:
            raise ValueError(f"d_max must be >= 1 (or None), got {d_max}")
        self.leader, self.fixed, self.d_max, self.clock, self.share = leader, fixed, d_max, clock, share
        self.chosen: int | None = fixed
        self._expand_s: list[float] = []
        self._verify_s: list[float] = []
        self._trials: dict[int, list[tuple[float, float]]] = {}  # d -> [(seconds, tokens) per round]
        self._candidates: list[int] = []
        self._sent_at: float | None = None
        self.round_d = 1 if fixed is None else fixed  # d of the current round
        self._round_tokens = 0
        self._pending: tuple[int, float] | None = None  # (d, seconds) of a round awaiting its emitted yield
        self._rounds = 0  # rounds started (proposals sent) in this run
        self._first_of_request = False  # the current round is a request's first
        self._watch: deque[float] = deque(maxlen=self.WINDOW)  # round times at the chosen d
        self._reference: float | None = None
        self._retunes_left = self.RETUNES

    def _warming_up(self) -> bool:
        """True while auto d collects warm-up samples (on the leader, past the skipped rounds)."""
        return self.leader and self.chosen is None and not self._candidates and self._rounds > self.SKIP

    def expanded(self, seconds: float) -> None:
        """Record one expansion's duration."""
        if self._warming_up() and math.isfinite(seconds) and seconds > 0:
            self._expand_s.append(seconds)

    def sent(self, new_request: bool = False, expected_tokens: float | None = None) -> None:
        """A proposal went out: closes the previous round (unless a new request started). `expected_tokens`: this
        proposal's expected yield under the draft's weights. The previous round grew this proposal (its d
        overlapped expansions and its refill), so the round's yield is this proposal's: its expected tokens here,
        or (None, or `EXPECTED` off) the tokens it emits, credited at the next `received`."""
        if expected_tokens is not None and not (math.isfinite(expected_tokens) and expected_tokens >= 1.0):
            raise ValueError(f"DepthTuner.sent: expected_tokens must be a finite number >= 1 (the bonus token at "
                             f"least), got {expected_tokens!r}")
        now = self.clock()
        if new_request:
            self._pending = None  # the last round of the previous request grew nothing that is verified
        if self._sent_at is not None and not new_request and self._round_tokens:
            seconds, d = now - self._sent_at, self.round_d
            self._watch_round(seconds, d)
            if not self.CREDIT_GROWN:  # the earlier policy: the tokens of the proposal the round verified
                self._trial_round(d, seconds, self._round_tokens)
            elif self.EXPECTED and expected_tokens is not None:
                self._trial_round(d, seconds, expected_tokens)
            else:
                self._pending = (d, seconds)
        self._sent_at, self._round_tokens = now, 0
        self._rounds += 1
        self._first_of_request = new_request

    def received(self, emitted: int) -> None:
        """The verified path arrived (after the overlapped expansions)."""
        if self._sent_at is not None and self._warming_up() and not self._first_of_request:
            took = self.clock() - self._sent_at
            if math.isfinite(took):
                self._verify_s.append(took)
        if self._pending is not None:  # the round that grew this proposal: its yield, emitted
            d, seconds = self._pending
            self._pending = None
            self._trial_round(d, seconds, emitted)
        self._round_tokens = emitted

    def shared_d(self) -> int:
        """This round's d, the leader's decision broadcast to the draft group when it is measured."""
        if self.fixed is not None:  # every rank of the group knows it: nothing to share
            self.round_d = self.fixed
            return self.fixed
        d = self._decide() if self.leader else 0
        if self.share is not None:
            d = self.share(d)
        self.round_d = d
        return d

    # ---- internals (auto d, on the leader) ------------------------------------------------------------------
    def _clamp(self, d: int) -> int:
        return max(1, d if self.d_max is None else min(d, self.d_max))

    def _trial_round(self, d: int, seconds: float, tokens: float) -> None:
        """A trial round at `d` took `seconds` and grew a proposal worth `tokens`: feed its candidate's trial."""
        trial = self._trials.get(d)
        if self.fixed is None and self.chosen is None and trial is not None:
            trial.append((seconds, tokens))

    def _watch_round(self, seconds: float, d: int) -> None:
        """A round at the chosen d ended: the drift watch."""
        if self.fixed is None and self.chosen is not None and d == self.chosen and self._retunes_left > 0:
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
        self._pending = None
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
        def rounds(c: int) -> int:  # trial rounds run at c, one awaiting its emitted yield included
            return len(self._trials[c]) + (self._pending is not None and self._pending[0] == c)

        todo = [c for c in self._candidates if rounds(c) < self.TRIAL]
        if todo:  # alternate: the candidate with fewer rounds so far; else each in turn
            return min(todo, key=rounds) if self.ALTERNATE else todo[0]
        short = [c for c in self._candidates if len(self._trials[c]) < self.TRIAL]
        if short:  # the last trial round's emitted yield comes in during this round: decide at the next
            return short[0]
        return self._choose(max(self._candidates, key=self._rate))


class SerialDepthTuner(DepthTuner):
    """d for serial_tree: fixed, or auto by a `HillClimb` from the breadth rule over measured rounds.

    A round runs from one proposal's send to the next: the verify -> `received` -> re-root -> `shared_d` -> the
    refill and d expansions -> `sent` of the next proposal. That proposal is the round's yield (its expected tokens
    when given, else the tokens it emits: `DepthTuner.EXPECTED`, `CREDIT_GROWN`); the round's time covers everything
    the loop does (in a colocated run the verify and the KV keep too), so tokens per second is the loop's own.

    Auto:
    - the first `SKIP` rounds of the run run at d0 = `breadth_d(bs, w)` and are not measured (compilation);
    - the climb's candidates (`HillClimb`: d0, then up while each is faster, else down; within [1, `serial_d_max`])
      each run `SETTLE` rounds that are not measured (the tree a hit carries over was grown at the previous
      candidate's d), then `TRIAL` measured rounds (a round slower than `OUTLIER` x its candidate's median is left
      out); each candidate's tokens per second decides the climb; the best is kept;
    - drift: as `DepthTuner` (a retune restarts the climb at d0).
    No t_verify / t_expand warm-up: unlike async d, serial d has no time it must hide under, only tokens to buy.
    Why expected tokens: a round at d0 + 1 differs from one at d0 by a few percent, less than the luck of one
    round's emitted tokens (1 to bs), as for async d (`DepthTuner`).
    """

    SETTLE = 1

    def __init__(self, fixed: int | None, bs: int, w: int, max_tree_nodes: int,
                 clock: Callable[[], float] = time.perf_counter, *, leader: bool = True,
                 share: Callable[[int], int] | None = None) -> None:
        """`fixed` = spec d as an int, None = auto; bs, w, max_tree_nodes: the spec's (the climb's start and bound)."""
        super().__init__(fixed, d_max=serial_d_max(bs, w, max_tree_nodes), clock=clock, leader=leader, share=share)
        self.d0 = min(breadth_d(bs, w), self.d_max or 1)
        self.climb: HillClimb | None = None
        self._settling: dict[int, int] = {}  # candidate -> rounds still to leave out
        if fixed is None:
            self.round_d = self.d0

    def _warming_up(self) -> bool:
        return False  # no verify / expansion times to collect

    def _trial_round(self, d: int, seconds: float, tokens: float) -> None:
        if self._settling.get(d, 0) > 0:
            self._settling[d] -= 1
            return
        super()._trial_round(d, seconds, tokens)

    def _retune(self) -> None:
        super()._retune()
        self.climb = None

    def _decide(self) -> int:
        if self.chosen is not None:
            return self.chosen
        if self.climb is None:
            if self._rounds <= self.SKIP:
                return self.d0
            self.climb = HillClimb(self.d0, self.d_max or 1)
        d = self.climb.next
        while d is not None:
            if d not in self._trials:  # a new candidate
                self._trials[d], self._settling[d] = [], self.SETTLE
            if len(self._trials[d]) < self.TRIAL:
                return d
            self.climb.record(d, self._rate(d))
            d = self.climb.next
        return self._choose(self.climb.best)
