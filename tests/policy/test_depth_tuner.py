"""DepthTuner (auto d of async_tree) and SerialDepthTuner / HillClimb (auto d of serial_tree) driven by a fake clock
through the draft loop's call sequence."""

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


# ---- serial_tree: HillClimb, SerialDepthTuner ---------------------------------------------------------------------
def saturating(d: int, gain: float = 4.0, keep: float = 0.7) -> float:
    """Expected tokens of a proposal grown by d serial forwards: 1 + gain (1 - keep^d), each forward buying less."""
    return 1.0 + gain * (1.0 - keep ** d)


def serial_rate(d: int, verify_s: float = 0.010, expand_s: float = 0.001, **kw: float) -> float:
    """Tokens per second of a serial round: d forwards, then the verify."""
    return saturating(d, **kw) / (verify_s + d * expand_s)


def best_of(rate, d_max: int) -> int:
    return max(range(1, d_max + 1), key=rate)


def test_breadth_rule_and_serial_bound():
    from policy.depth_tuner import breadth_d, serial_d_max

    assert [breadth_d(bs, 8) for bs in (2, 8, 9, 16, 17)] == [1, 1, 1, 2, 2]
    assert serial_d_max(16, 8, 256) == 15  # bs - 1: after it the top-bs selection cannot change
    assert serial_d_max(16, 8, 64) == 8  # the expansions the tree region holds
    assert serial_d_max(2, 64, 32) == 1


@pytest.mark.parametrize("case", [dict(), dict(keep=0.9), dict(keep=0.95, gain=10.0), dict(keep=0.3),
                                  dict(verify_s=0.002)])
@pytest.mark.parametrize("d0", [1, 2, 6])
def test_hill_climb_finds_the_peak_of_a_unimodal_rate(case, d0):
    from policy.depth_tuner import climb

    def rate(d: int) -> float:
        return serial_rate(d, **case)

    assert climb(rate, d0, 15) == best_of(rate, 15)


def test_hill_climb_order_bounds_and_patience():
    from policy.depth_tuner import HillClimb, climb

    seen: list[int] = []

    def falling(d: int) -> float:
        seen.append(d)
        return 1.0 / d

    assert climb(falling, 3, 8) == 1 and seen == [3, 4, 5, 2, 1]  # up twice without gain, then down
    seen.clear()
    assert climb(lambda d: seen.append(d) or float(d), 3, 5) == 5 and seen == [3, 4, 5]  # stops at d_max
    # one dip (a noisy trial) does not end the climb: PATIENCE candidates in a row must fail
    dip = {1: 1.0, 2: 2.0, 3: 1.9, 4: 3.0, 5: 2.5, 6: 2.4, 7: 9.0}
    assert HillClimb.PATIENCE == 2 and climb(dip.__getitem__, 1, 7) == 4
    hc = HillClimb(9, 4)
    assert hc.next == 4  # d0 clamped into [1, d_max]
    with pytest.raises(ValueError, match="expected the candidate 4"):
        hc.record(3, 1.0)
    with pytest.raises(ValueError, match="d_max must be >= 1"):
        HillClimb(1, 0)


def drive_serial(tuner, clock: FakeClock, rounds: int, round_s, expected=saturating,
                 request_rounds: int | None = None) -> list[int]:
    """The engine's serial loop: `shared_d` -> refill and d forwards -> `sent` (the proposal they grew, worth
    `expected(d)`) -> the verify -> `received`. `round_s(k, d)`: the round's seconds. Returns each round's d."""
    used = []
    for k in range(rounds):
        d = tuner.shared_d()
        used.append(d)
        clock.t += round_s(k, d)
        tuner.sent(new_request=k == 0 or (request_rounds is not None and k % request_rounds == 0),
                   expected_tokens=expected(d))
        tuner.received(2)
    return used


@pytest.mark.parametrize("case", [dict(), dict(keep=0.9), dict(keep=0.3), dict(keep=0.95, gain=10.0)])
def test_serial_tuner_keeps_the_fastest_d_on_synthetic_costs(case):
    """Round time verify + d forwards, expected tokens saturating in d: the tuner lands on the d of the closed form's
    peak, whichever side of the breadth rule (bs 16, w 8: d0 = 2) it lies."""
    from policy.depth_tuner import SerialDepthTuner

    clock = FakeClock()
    tuner = SerialDepthTuner(None, 16, 8, 256, clock=clock)
    tokens = {k: v for k, v in case.items() if k in ("gain", "keep")}
    used = drive_serial(tuner, clock, 400, lambda k, d: 0.010 + d * 0.001, lambda d: saturating(d, **tokens))
    want = best_of(lambda d: serial_rate(d, **case), 15)
    assert tuner.chosen == want and used[-1] == want
    assert used[:SerialDepthTuner.SKIP + 1] == [2] * (SerialDepthTuner.SKIP + 1)  # the first rounds: breadth rule


def test_serial_tuner_leaves_out_settle_and_outlier_rounds():
    """A round slower than OUTLIER x its candidate's median (a late compilation) does not flip the choice; every
    candidate counts TRIAL rounds, its first SETTLE ones (a tree grown at the previous candidate's d) left out."""
    from policy.depth_tuner import SerialDepthTuner

    clock = FakeClock()
    tuner = SerialDepthTuner(None, 8, 8, 256, clock=clock)
    seen: dict[int, int] = {}

    def round_s(k: int, d: int) -> float:
        seen[d] = seen.get(d, 0) + 1
        return 5.0 if (d == 3 and seen[d] == 4) else 0.010 + d * 0.001

    drive_serial(tuner, clock, 400, round_s)
    assert tuner.chosen == best_of(serial_rate, 7)
    assert all(len(rounds) == SerialDepthTuner.TRIAL for rounds in tuner._trials.values())


def test_serial_tuner_fixed_bounded_and_shared():
    from policy.depth_tuner import SerialDepthTuner

    clock = FakeClock()
    fixed = SerialDepthTuner(40, 8, 8, 256, clock=clock)  # a fixed d is taken as given
    assert drive_serial(fixed, clock, 5, lambda k, d: 0.01) == [40] * 5
    # tokens that never stop rising: the climb ends at serial_d_max = min(bs - 1, max_tree_nodes // w) = 4
    tuner = SerialDepthTuner(None, 8, 2, 8, clock=clock)
    used = drive_serial(tuner, clock, 300, lambda k, d: 0.01, expected=lambda d: 1.0 + d)
    assert max(used) == 4 and tuner.chosen == 4
    shared: list[int] = []
    follower = SerialDepthTuner(None, 16, 8, 256, clock=clock, leader=False, share=lambda d: shared.append(d) or 5)
    assert drive_serial(follower, clock, 30, lambda k, d: 0.01) == [5] * 30 and shared == [0] * 30
    assert follower.climb is None and follower.chosen is None
