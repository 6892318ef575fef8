"""runtime/presend.py on its own: which conditional proposal the target leader takes, and the refusals."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from conf.messages import ConditionalProposal, DraftProposal, Stop, VerifiedPath
from runtime.presend import Presend
from runtime.verify import Verdict


class FakeChannel:
    """The unix channel's leader-side calls over a list of waiting messages."""

    kind = "unix"

    def __init__(self, waiting: list) -> None:
        self.waiting, self.sent = list(waiting), []

    def ready(self) -> bool:
        return bool(self.waiting)

    def recv_from_peer(self):
        return self.waiting.pop(0)

    def send(self, msg) -> None:
        self.sent.append(msg)


def _ctx(role: str = "target") -> SimpleNamespace:
    return SimpleNamespace(is_leader=True, role=role, group_size=1, label=f"rank 0 ({role} leader)",
                           device=SimpleNamespace(type="cpu"))


def _cond(it: int, after: int, rank: int, root: int, rid: int = 0) -> ConditionalProposal:
    return ConditionalProposal(DraftProposal(rid, it, (root, root + 1), (-1, 0)), after_node=after, bonus_rank=rank)


def test_the_target_takes_the_conditional_proposal_its_verdict_matches():
    """Matched on the path's last node and the bonus token (real runs) or the drawn rank (oracle runs); stale ones
    (another iteration or request) and other outcomes are passed over; none matching: None."""
    vp = VerifiedPath(0, 4, (7, 8, 30), (0, 2))  # accepted node 2, bonus token 30
    conds = [_cond(4, 2, 0, 30), _cond(5, 1, 0, 30), _cond(5, 2, 1, 31), _cond(5, 2, 0, 30, rid=1),
             _cond(5, 2, 2, 30)]
    presend = Presend(_ctx(), FakeChannel(conds), rows=2)
    presend.verdict = Verdict((0, 2), 30)
    assert presend.take(vp) == conds[4].proposal
    presend = Presend(_ctx(), FakeChannel(conds), rows=2)
    presend.verdict = Verdict((0, 2), 99, bonus_rank=1)  # oracle: the target's token is a placeholder
    assert presend.take(vp) == conds[2].proposal
    presend = Presend(_ctx(), FakeChannel(conds[:2]), rows=2)
    presend.verdict = Verdict((0, 2), 30)
    assert presend.take(vp) is None and presend.channel.waiting == []  # all read, none taken


def test_the_next_proposal_skips_late_conditional_ones_and_refusals_name_the_cause():
    prop = DraftProposal(0, 5, (3, 4), (-1, 0))
    presend = Presend(_ctx(), FakeChannel([_cond(5, 0, 0, 3), prop]), rows=2)
    assert presend.next_proposal(None) == prop  # the late conditional one is dropped
    assert presend.next_proposal(prop) == prop  # a taken one: nothing read
    presend = Presend(_ctx(), FakeChannel([prop]), rows=2)
    presend.verdict = Verdict((0,), 5)
    with pytest.raises(RuntimeError, match=r"spec\.presend: expected only conditional proposals while verifying"):
        presend.take(VerifiedPath(0, 4, (3, 5), (0,)))
    draft = Presend(_ctx("draft"), FakeChannel([]), rows=2)
    with pytest.raises(RuntimeError, match=r"the target took a conditional proposal for iteration 5, but"):
        draft.check_taken(prop, [_cond(5, 0, 0, 9)])
    draft.close()
    assert draft.channel.sent == [Stop(-1, -1)]
    target = Presend(_ctx(), FakeChannel([_cond(9, 0, 0, 1), Stop(-1, -1), prop]), rows=2)
    target.close()
    assert target.channel.waiting == [prop]  # read up to the Stop
    dist = SimpleNamespace(kind="dist")
    with pytest.raises(ValueError, match=r"spec\.presend: needs the unix leader channel.* resolved to dist"):
        Presend(_ctx(), dist, rows=2)
