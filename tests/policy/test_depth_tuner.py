"""DepthTuner (auto d of async_tree) driven by a fake clock through the draft loop's call sequence."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from policy.depth_tuner import DepthTuner

SETTLE = DepthTuner.SKIP + DepthTuner.WARMUP + 2 * DepthTuner.TRIAL + 4
"""Rounds after which a steady run has chosen its d (skipped, warm-up and both candidates' trials, and slack)."""


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def drive(tuner: DepthTuner, clock: FakeClock, rounds: int, verify: Callable[[int, int], float],
          expand: Callable[[int], float], tokens: int | Callable[[int], int] = 2, request_rounds: int | None = None,
          expected: Callable[[int], float] | None = None) -> list[int]:
    """The engine's `_draft_loop` order: send, d overlapped expansions during the verify, receive, one refill
    expansion; `verify(round, d)` / `expand(round)` in seconds. A proposal is grown by the round before its send:
    `tokens(d)` it emits and `expected(d)` its expected yield (given to `sent`), d that round's. Returns each
    round's d."""
    used = []
    last_d = 1
    for k in range(rounds):
        tuner.sent(new_request=k == 0 or (request_rounds is not None and k % request_rounds == 0),
                   expected_tokens=None if expected is None else expected(last_d))
        d = tuner.shared_d()
        used.append(d)
        e = expand(k)
        for _ in range(d):
            tuner.expanded(e)
        clock.t += max(verify(k, d), d * max(e, 0.0))
        tuner.received(tokens(last_d) if callable(tokens) else tokens)  # the proposal sent this round
        last_d = d
        tuner.expanded(e)  # refill of the next proposal
        clock.t += max(e, 0.0)
    return used


def make(d_max: int | None = None, fixed: int | None = None) -> tuple[DepthTuner, FakeClock]:
    clock = FakeClock()
    return DepthTuner(fixed, d_max=d_max, clock=clock), clock


def test_steady_times_give_r_or_r_plus_one():
    tuner, clock = make()
    used = drive(tuner, clock, SETTLE + 4, lambda k, d: 0.0305, lambda k: 0.01)
    assert tuner.chosen == 3  # d = 3 hides under the verify, d = 4 does not
    assert set(used) == {1, 3, 4} and used[-1] == 3


@pytest.mark.parametrize("inflated", [[3.0, 2.0], [3.0, 2.0, 1.0]])
def test_compile_inflated_first_rounds_are_not_taken_as_the_verify_time(inflated):
    tuner, clock = make()
    used = drive(tuner, clock, SETTLE + 4, lambda k, d: inflated[k] if k < len(inflated) else 0.0305,
                 lambda k: 0.5 if k == 0 else 0.01)  # the draft compiles in round 0 too
    assert tuner.chosen in (3, 4)
    assert max(used) <= 4  # not ~200


def test_first_round_of_each_request_is_no_verify_sample():
    tuner, clock = make()
    # every request's first verify waits for the target's prefill (1 s); requests are 2 rounds long
    used = drive(tuner, clock, 2 * SETTLE, lambda k, d: 1.0 if k % 2 == 0 else 0.0305, lambda k: 0.01, request_rounds=2)
    assert tuner.chosen in (3, 4) and max(used) <= 4


def test_d_never_exceeds_d_max():
    tuner, clock = make(d_max=32)
    used = drive(tuner, clock, SETTLE + 4, lambda k, d: 1.0, lambda k: 0.01)  # r = 100
    assert max(used) == 32 and tuner.chosen == 32
    assert used.count(32) == len(used) - used.index(32)  # a single candidate: no trial of d_max + 1


def test_d_max_clamps_only_the_upper_candidate():
    tuner, clock = make(d_max=4)
    used = drive(tuner, clock, SETTLE + 4, lambda k, d: 0.0405, lambda k: 0.01)  # r = 4, r + 1 = 5 -> 4
    assert max(used) == 4 and tuner.chosen == 4


def test_unbounded_by_default():
    tuner, clock = make()
    used = drive(tuner, clock, SETTLE + 4, lambda k, d: 1.005, lambda k: 0.01)  # r = 100
    assert tuner.chosen in (100, 101) and max(used) == 101


def test_d_max_must_be_positive():
    with pytest.raises(ValueError):
        DepthTuner(None, d_max=0)


def test_fixed_d_is_taken_as_given():
    tuner, clock = make(d_max=4, fixed=70)
    assert drive(tuner, clock, 10, lambda k, d: 0.03, lambda k: 0.01) == [70] * 10


@pytest.mark.parametrize("expand_s", [0.0, -0.01])
def test_non_positive_expand_times_do_not_crash(expand_s):
    tuner, clock = make()
    used = drive(tuner, clock, SETTLE + 4, lambda k, d: 0.03, lambda k: expand_s)
    assert set(used) == {1}  # no usable expansion time: d stays at the warm-up value


def test_zero_expand_times_are_ignored_among_real_ones():
    tuner, clock = make(d_max=8)
    used = drive(tuner, clock, SETTLE + 4, lambda k, d: 0.0305, lambda k: 0.0 if k % 2 else 0.01)
    assert tuner.chosen in (3, 4) and max(used) <= 4


def test_small_verify_gives_d_one():
    tuner, clock = make()
    drive(tuner, clock, SETTLE + 4, lambda k, d: 0.001, lambda k: 0.01)  # r = 0 -> 1 (r + 1 = 1 too)
    assert tuner.chosen == 1


def test_an_outlier_trial_round_does_not_flip_the_choice():
    tuner, clock = make()
    seen = {}

    def verify(k: int, d: int) -> float:
        seen[d] = seen.get(d, 0) + 1
        return 5.0 if d == 3 and seen[d] == 2 else 0.0305  # a late compilation in a d = 3 trial round

    drive(tuner, clock, SETTLE + 4, verify, lambda k: 0.01)
    assert tuner.chosen == 3


def test_retunes_once_when_round_time_drifts():
    tuner, clock = make()
    # verify grows 10x (e.g. a long prompt) once d is chosen and watched: d re-tuned to ~30; back later: no 2nd
    # re-tune
    grow, back = SETTLE + 2 * DepthTuner.WINDOW, 3 * SETTLE + 4 * DepthTuner.WINDOW
    used = drive(tuner, clock, back + 2 * SETTLE, lambda k, d: 0.3005 if grow <= k < back else 0.0305,
                 lambda k: 0.01)
    assert used[grow - 1] == 3
    assert used[back - 1] in (30, 31)
    assert tuner.chosen in (30, 31) and used[-1] == tuner.chosen


def test_non_leader_collects_nothing_and_takes_the_leaders_d():
    shared: list[int] = []

    def share(d: int) -> int:  # the group's broadcast: this rank offers 0, the leader's 5 comes back
        shared.append(d)
        return 5

    tuner = DepthTuner(None, d_max=8, clock=FakeClock(), leader=False, share=share)
    for k in range(10):
        tuner.sent(new_request=k == 0)
        assert tuner.shared_d() == 5
        tuner.expanded(0.01)
        tuner.received(2)
    assert tuner._verify_s == [] and tuner._expand_s == [] and tuner.chosen is None
    assert shared == [0] * 10


def test_a_non_leader_without_share_is_refused():
    with pytest.raises(ValueError, match="not its group's leader needs `share`"):
        DepthTuner(None, leader=False)


@pytest.mark.parametrize("alternate", [False, True])
def test_trials_run_in_blocks_or_alternate(alternate, monkeypatch):
    monkeypatch.setattr(DepthTuner, "ALTERNATE", alternate)
    tuner, clock = make()
    used = drive(tuner, clock, SETTLE + 4, lambda k, d: 0.0305, lambda k: 0.01)
    trials = used[used.index(3):used.index(3) + 2 * DepthTuner.TRIAL]
    assert trials == ([3, 4] * DepthTuner.TRIAL if alternate else [3] * DepthTuner.TRIAL + [4] * DepthTuner.TRIAL)


@pytest.mark.parametrize("alternate", [False, True])
def test_a_trial_round_is_credited_with_the_proposal_it_grew(alternate, monkeypatch):
    """Proposals grown at d = 4 are worth 5 tokens, at d = 3 2: d = 4 is faster despite its longer rounds, and
    the tuner sees it whether the yield is expected (given to `sent`) or emitted (at the next `received`). With
    the yield credited to the round that verified it (the earlier policy), alternating trials mix the two up."""
    monkeypatch.setattr(DepthTuner, "ALTERNATE", alternate)
    grown = lambda d: 5.0 if d == 4 else 2.0  # noqa: E731
    for expected, tokens in ((grown, 2), (None, lambda d: int(grown(d)))):
        tuner, clock = make()
        drive(tuner, clock, SETTLE + 4, lambda k, d: 0.0305, lambda k: 0.01, tokens=tokens, expected=expected)
        assert tuner.chosen == 4, expected
    if alternate:
        monkeypatch.setattr(DepthTuner, "CREDIT_GROWN", False)
        tuner, clock = make()
        drive(tuner, clock, SETTLE + 4, lambda k, d: 0.0305, lambda k: 0.01, tokens=lambda d: int(grown(d)))
        assert tuner.chosen == 3  # each round credited with the other candidate's proposal


def test_expected_tokens_decide_the_trials_over_emitted_ones():
    """Proposals grown at d = 4 happen to emit more (luck: 5 vs 1 tokens), but their expected yields are equal,
    so the shorter rounds of d = 3 pay: with expected tokens the tuner keeps 3, with the emitted ones 4."""
    lucky = lambda d: 5 if d == 4 else 1  # noqa: E731
    for expected, want in ((lambda d: 2.5, 3), (None, 4)):
        tuner, clock = make()
        drive(tuner, clock, SETTLE + 4, lambda k, d: 0.0305, lambda k: 0.01, tokens=lucky, expected=expected)
        assert tuner.chosen == want, expected


@pytest.mark.parametrize("bad", [0.5, float("nan"), float("inf")])
def test_expected_tokens_must_count_the_bonus_token(bad):
    tuner, _ = make()
    with pytest.raises(ValueError, match="expected_tokens must be a finite number >= 1"):
        tuner.sent(expected_tokens=bad)
