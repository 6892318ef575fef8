"""`spec.presend`: the draft leader sends the next proposal of each prepared hit ahead of the verdict.

While the target verifies, the draft leader (with `spec.reroot_prefetch`, idle after its overlapped expansions)
prepares the re-roots of the likeliest hits (`DraftWorker.prepare_reroots`); with presend it also sends each one's
next proposal as a `ConditionalProposal` (conf/messages.py). The target leader reads them while its verify runs and
after, takes the one its verdict matches (the path's last node and the bonus: the token, or an oracle run's drawn
rank) and flags it in its `VerifiedPath`; it then starts the next verify with no round trip, and the draft, whose
re-root to that hit proposes exactly that (checked), sends nothing for that iteration. Conditional proposals that
arrive after the verdict are skipped. A run ends with a draft `Stop` that the target reads up to, so that no unread
message sits in its socket when it closes (which would reset the draft's last receive).

Needs the unix leader channel (`ready`, `recv_from_peer`); async_tree only (the other modes build their next proposal
after the verdict). Measured on 2 x H200 (docs/BENCHMARKS_RUNTIME.md, thirteenth session): slower, each conditional
costing the target ~20-25 us to read; off by default.
"""

from __future__ import annotations

from typing import Any

import torch

from conf.messages import ConditionalProposal, DraftProposal, Stop, VerifiedPath


class Presend:
    """One leader's (or group member's) side of spec.presend: the draft leader sends, the target leader takes."""

    def __init__(self, ctx: Any, channel: Any, rows: int) -> None:
        """Refuses a channel that cannot say whether a message waits (the dist one), naming the field."""
        if ctx.is_leader and not hasattr(channel, "recv_from_peer"):
            raise ValueError(f"spec.presend: needs the unix leader channel, which can tell when a message is waiting; "
                             f"parallel.leader_channel resolved to {channel.kind} (set spec.presend=false, or "
                             f"leader_channel=unix on one host)")
        self.ctx, self.channel, self.rows = ctx, channel, rows
        self.verdict: Any = None  # the target leader's last verdict (set by the engine's verify)
        self._early: list[Any] = []  # messages the target leader read while its verify ran
        self._done = (torch.cuda.Event() if ctx.is_leader and ctx.role == "target" and ctx.device.type == "cuda"
                      else None)

    # ---- draft leader -------------------------------------------------------------------------------------------
    def send(self, draft: Any, rid: int, it: int, present: list[ConditionalProposal], landed: set[int]) -> None:
        """As each re-root is prepared: send the new conditional proposals for iteration `it` (their landings join
        `landed`), unless the verified path is in already (the target decided without them)."""
        if self.channel.ready():
            return
        for cond in draft.conditional_proposals(rid, it, self.rows, landed):
            self.channel.send(cond)  # a comm.presend span (off the iteration's message time)
            present.append(cond)

    def check_taken(self, prop: DraftProposal, present: list[ConditionalProposal]) -> None:
        """The target took one of this round's conditional proposals: the re-rooted draft's own must be one."""
        if prop not in [c.proposal for c in present]:
            raise RuntimeError(f"{self.ctx.label}: spec.presend: the target took a conditional proposal for "
                               f"iteration {prop.iteration}, but the re-rooted draft proposes {prop}, none of the "
                               f"{len(present)} it sent")

    # ---- target group ---------------------------------------------------------------------------------------------
    def read_while_verifying(self) -> None:
        """Target leader, its verify queued on the GPU: read the conditional proposals as they come until the GPU
        is done (a CPU forward is done already)."""
        done = self._done
        if done is None:
            return
        done.record()
        while not done.query():
            if self.channel.ready():
                self._early.append(self.channel.recv_from_peer())

    def take(self, vp: VerifiedPath) -> DraftProposal | None:
        """Target leader, after its verdict: of the conditional proposals read while it verified and any still
        waiting, the one for this outcome, or None (a miss, a hit the draft did not prepare, or sent too late)."""
        found = None
        last, verdict = vp.node_indices[-1], self.verdict
        early, self._early = self._early, []
        while self.channel.ready():
            early.append(self.channel.recv_from_peer())
        for msg in early:
            if not isinstance(msg, ConditionalProposal):
                raise RuntimeError(f"{self.ctx.label}: spec.presend: expected only conditional proposals while "
                                   f"verifying iteration {vp.iteration}, got {msg}")
            if (found is None and (msg.request_id, msg.iteration) == (vp.request_id, vp.iteration + 1)
                    and msg.after_node == last
                    and (msg.bonus_rank == verdict.bonus_rank if verdict.bonus_rank is not None
                         else msg.proposal.token_ids[0] == verdict.bonus)):
                found = msg.proposal
        return found

    def next_proposal(self, taken: DraftProposal | None) -> DraftProposal:
        """Target group: the proposal to verify: the leader's taken one, else the next proposal from the draft
        (conditional ones that arrived after the verdict are skipped), handed to the group by broadcast."""
        prop = None
        if self.ctx.is_leader:
            prop = taken
            while prop is None:
                msg = self.channel.recv_from_peer()
                if not isinstance(msg, ConditionalProposal):  # else too late: the draft sends the proposal next
                    prop = msg
        if self.ctx.group_size > 1:
            prop = self.channel.broadcast_in_group(prop)
        return prop

    # ---- both leaders -------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Before the channel closes: the draft leader sends a Stop, the target leader reads up to it."""
        if self.ctx.role == "draft":
            self.channel.send(Stop(-1, -1))
        else:
            while not isinstance(self.channel.recv_from_peer(), Stop):
                pass
