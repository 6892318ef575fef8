"""SimPy processes: one per GPU group, one per link direction; stores (stores.py) carry conf.messages.

    draft group --DraftProposal--> [link: draft->target] --> target group
    target group --VerifiedPath--> [link: target->draft] --> draft group

Process functions (verbs) take the `Simulation` (simulation.py) that owns the environment, the stores, the
costs, the acceptance model, the tree states and the records. Requests are decoded one after another
(batch of one request, as in the paper); within a request:

- `decode_autoregressive` (target only): prefill, then one forward per token;
- `verify_proposals` (target): prefill; loop: receive a proposal, verify it (one forward of its nodes),
  walk the truth (acceptance model), send the verified path (stop=True once max_new_tokens are out), then
  keep the accepted KV (the runtime's step.keep, after its send);
- `grow_tree_async` (draft, async_tree): prefill, refill, select, send; loop: expand d times (overlapping
  the verify), receive the verified path, re-root, refill if the tree has < bs nodes, select, send; the
  KV compaction of the re-root runs before a refill's first forward, or after the send when no refill is
  needed (as the runtime's DraftWorker defers it);
- `grow_tree_serial` (draft, serial_tree and chain): after each verified path, re-root, refill to bs nodes,
  then d more expansions, select, send, as the runtime's Engine._propose (chain = a tree of topk 1, w 1,
  bs = gamma + 1, which always re-roots as a miss: its refill is its gamma forwards);
- `carry_messages` (link): receive, wait the message delay, deliver.

Each step is one timeout: an iteration is about a dozen SimPy events. Prompt convention: prefill writes the
KV of the first prompt_tokens - 1 tokens; every verify's root is the last known token, whose KV the verify
writes (DraftProposal node 0), so a verify of n nodes attends prefix + n keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conf.messages import DraftProposal, VerifiedPath
from simulator.records import Event, IterationRow

if TYPE_CHECKING:
    from collections.abc import Generator

    from simulator.simulation import Simulation
    from simulator.stores import MessageStore


MAX_ITERATIONS = 1_000_000
"""Safety bound on the iterations of one simulated request: every verify emits at least one token, so a request that
needs more has an acceptance model or a stop rule that never ends it."""


def _too_many(request: int) -> RuntimeError:
    return RuntimeError(f"simulator: request {request} needed more than {MAX_ITERATIONS} iterations "
                        f"(simulator/processes.py MAX_ITERATIONS); check the acceptance model")


def decode_autoregressive(sim: Simulation) -> Generator[Any, Any, None]:
    """Target group without a draft: prefill, then one forward (one token) per iteration."""
    env, tally, rows, events, cost = sim.env, sim.tally, sim.rows, sim.events, sim.target_cost
    record = sim.record_events
    for req in range(sim.num_requests):
        pf = cost.prefill_s(sim.prompt_tokens - 1)
        if record:
            events.append(Event("step.prefill", "target", env.now, pf, req, -1, sim.prompt_tokens - 1, 0))
        yield env.timeout(pf)
        tally.prefill_s += pf
        tally.target_busy_s += pf
        ctx = sim.prompt_tokens - 1
        for it in range(sim.max_new_tokens):
            t0 = env.now
            dt = cost.forward_s(1, ctx + 1)
            if record:
                events.append(Event("step.verify", "target", t0, dt, req, it, 1, ctx))
            yield env.timeout(dt)
            rows.append(IterationRow(req, it, t0, t0 + dt, dt, 0.0, 0.0, 0, 1))  # no messages, no wait; 1 token
            ctx += 1
            tally.verify_s += dt
            tally.target_busy_s += dt
        tally.verifies += sim.max_new_tokens
        tally.generated_tokens += sim.max_new_tokens
        tally.accept_hist[1] = tally.accept_hist.get(1, 0) + sim.max_new_tokens
    tally.wall_s = env.now


def verify_proposals(sim: Simulation) -> Generator[Any, Any, None]:
    """Target group: verify each proposal, send back the verified path (with stop at the end)."""
    env, tally, rows, events, cost = sim.env, sim.tally, sim.rows, sim.events, sim.target_cost
    get, put, walk = sim.target_inbox.get, sim.target_outbox.put, sim.acceptance.walk
    record, max_new, children_of = sim.record_events, sim.max_new_tokens, sim.children_of
    message_s = sim.proposal_s + sim.verified_s
    host = sim.verify_host_s  # fitted host time per verify for the messages (profile `runtime`), else 0
    hist = tally.accept_hist
    for req in range(sim.num_requests):
        sim.row_base.append(len(rows))
        uniforms = sim.uniforms(req)
        pf = cost.prefill_s(sim.prompt_tokens - 1)
        if record:
            events.append(Event("step.prefill", "target", env.now, pf, req, -1, sim.prompt_tokens - 1, 0))
        yield env.timeout(pf)
        tally.prefill_s += pf
        tally.target_busy_s += pf
        ctx, emitted, it = sim.prompt_tokens - 1, 0, 0
        while True:
            t0 = env.now
            proposal = yield get()
            t1 = env.now
            n = proposal.num_nodes
            ranks, nodes = walk(children_of(proposal), uniforms, emitted)
            accepted = len(nodes) - 1
            tf = cost.forward_s(n, ctx + n)
            tk = sim.keep_s if sim.keep_s is not None else cost.compaction_s(accepted + 1)  # the KV keep
            tv = tf + tk
            before = tk if sim.colocated else 0.0  # a separate draft group takes the path before the keep
            if record:
                events.append(Event("step.verify", "target", t1, tv, req, it, n, ctx))
            yield env.timeout(tf + host + before)  # the verify, then taking the proposal + sending the path (host)
            emit = min(accepted + 1, max_new - emitted)
            emitted += emit
            ctx += accepted + 1
            stop = emitted >= max_new
            rows.append(IterationRow(req, it, t0, t1 + tv + host, tv, message_s, t1 - t0, accepted, accepted + 1))
            put(VerifiedPath(req, it, (proposal.token_ids[0], *ranks), nodes, stop))
            if tk - before:
                yield env.timeout(tk - before)
            tally.verify_s += tv
            tally.target_busy_s += tv + host
            hist[accepted + 1] = hist.get(accepted + 1, 0) + 1
            if stop:
                break
            it += 1
            if it >= MAX_ITERATIONS:
                raise _too_many(req)
        tally.verifies += it + 1
        tally.generated_tokens += emitted
    tally.wall_s = env.now


def _send(sim: Simulation, sid: int, req: int, it: int) -> None:
    tokens, parents = sim.trees.select(sid, sim.bs)
    expected = sim.trees.expected_tokens(sid, sim.bs)  # memoised by select
    sim.tally.expected_tokens += expected
    if sim.tuner is not None:
        sim.tuner.sent(new_request=it == 0, expected_tokens=expected)
    sim.draft_outbox.put(DraftProposal(req, it, tokens, parents))


def _compaction_s(sim: Simulation, kept_tokens: int, deferred: bool) -> float:
    """A re-root's KV compaction on the draft. With CUDA graphs (`kernels.cuda_graphs`) the runtime applies it as
    the first kernel of the next expansion's graph: its bytes, no launch, no host time. Otherwise the fitted
    host cost of a deferred one (after the proposal's send, the runtime's `step.compact`) where the profile has
    it, else the compaction operator."""
    if sim.graphs:
        return sim.draft_cost.compaction_s(kept_tokens, launch=False)
    if deferred and sim.compact_s is not None:
        return sim.compact_s
    return sim.draft_cost.compaction_s(kept_tokens)


def _expand_s(sim: Simulation, n: int, ctx: int, expanded: int, grown: int, lone: bool = False,
              pending: bool = False) -> float:
    """n draft forwards of w rows, attending prefix + tree region (its mean size over the n forwards), `grown`
    real rows in all (the nodes they expanded): a forward's host part grows with its real rows (a refill after a
    miss expands the root alone). `lone`: the first forward expands a lone root, a one-row forward under
    kernels.refill_graph (the runtime's one-row graph). `pending`: one verified token without draft KV rides in
    front of the first forward (`TreeStates.pending`): one more row, real, as the runtime's two-row graph for a
    lone root (w + 1 rows otherwise). Each forward is reported to the DepthTuner under sim.d_rule=runtime, as the
    runtime's expansions are."""
    if n == 0:
        return 0.0
    w, times = sim.w, []
    if lone and sim.refill_graph:
        rows = 1 + pending
        times.append(sim.draft_cost.forward_s(rows, ctx + expanded + 1, float(rows)))
        n, expanded, grown, pending = n - 1, expanded + 1, grown - 1, False
    if n:
        kv = ctx + expanded + w * (n + 1) // 2
        times += [sim.draft_cost.forward_s(w, kv, grown / n)] * n
        if pending:
            times[-n] = sim.draft_cost.forward_s(w + 1, kv, grown / n + 1.0)
    if sim.tuner is not None:
        for t in times:
            sim.tuner.expanded(t)
    return sum(times)


def _first_proposal(sim: Simulation, req: int) -> Generator[Any, Any, int]:
    """A request's start on the async draft: prefill, grow a fresh tree to bs nodes (its root expanded alone),
    send the first proposal. Returns the tree."""
    env, tally, trees = sim.env, sim.tally, sim.trees
    trees.maybe_trim()
    ctx = sim.prompt_tokens - 1
    pf = sim.draft_cost.prefill_s(ctx)
    sid, n = trees.refill(0, sim.bs)
    tx = _expand_s(sim, n, ctx, 0, trees.num_expanded(sid), lone=True)
    busy = pf + tx + sim.tree_op_s
    if sim.record_events:
        sim.events.append(Event("step.prefill", "draft", env.now, pf, req, -1, ctx, 0))
        sim.events.append(Event("step.expand", "draft", env.now + pf, tx, req, -1, n * sim.w, ctx))
    yield env.timeout(busy)
    tally.draft_busy_s += busy
    tally.draft_forwards += n
    tally.expand_s += tx
    _send(sim, sid, req, 0)
    return sid


def _expand_d(sim: Simulation, sid: int, ctx: int) -> tuple[int, int, float]:
    """A round's d expansions while the verify runs (d from the DepthTuner under sim.d_rule=runtime):
    (the tree, its forwards, their seconds)."""
    e0 = sim.trees.num_expanded(sid)
    sid, n = sim.trees.expand(sid, sim.d if sim.tuner is None else sim.tuner.shared_d())
    return sid, n, _expand_s(sim, n, ctx, e0, sim.trees.num_expanded(sid) - e0)


def _expand_until_verified(sim: Simulation, sid: int, req: int, it: int,
                           ctx: int) -> Generator[Any, Any, tuple[int, int, float]]:
    """spec.d=poll: one expansion at a time while no verified path is in the inbox and the tree has room:
    (the tree, its forwards, their seconds)."""
    env, tally, trees, inbox = sim.env, sim.tally, sim.trees, sim.draft_inbox
    te, n = 0.0, 0
    while not inbox.items:
        e0 = trees.num_expanded(sid)
        sid, k = trees.expand(sid, 1)
        if not k:
            break
        t1 = _expand_s(sim, 1, ctx, e0, trees.num_expanded(sid) - e0)
        if sim.record_events:
            sim.events.append(Event("step.expand", "draft", env.now, t1, req, it, sim.w, ctx))
        yield env.timeout(t1)
        tally.draft_busy_end_s = env.now
        te, n = te + t1, n + 1
    tally.polled_expansions += n
    tally.polled_rounds += 1
    return sid, n, te


def _reroot_and_refill(sim: Simulation, sid: int, ranks: tuple[int, ...], ctx: int,
                       row: IterationRow) -> tuple[int, float, float]:
    """The async draft on a verified path (its draft `ranks`, `row` its verify's): re-root, refill to bs nodes,
    and price both: tree bookkeeping + the KV compaction, then the refill's forwards (the compaction runs before
    the refill's first forward, or after the send when no refill is needed, as the runtime's DraftWorker defers
    it). Fills the row's draft fields and the tally, records the events. Returns (the tree, seconds until the
    next proposal leaves, seconds after it: the deferred compaction)."""
    trees, tally = sim.trees, sim.tally
    old, (sid, hit, kept) = sid, trees.reroot(sid, ranks)
    pending = not hit and trees.pending(old, ranks)  # a hit never leaves one
    e0, lone = trees.num_expanded(sid), trees.size(sid) == 1
    sid, n = trees.refill(sid, sim.bs)
    deferred = n == 0 and not sim.colocated  # no refill: the proposal leaves before the compaction
    tc = _compaction_s(sim, kept + len(ranks), deferred)
    tr = sim.tree_op_s + tc
    tx = _expand_s(sim, n, ctx, e0, trees.num_expanded(sid) - e0, lone, pending)
    if sim.record_events:
        now, req, it = sim.env.now, row.request, row.iteration
        sim.events.append(Event("step.reroot", "draft", now, tr, req, it, kept, ctx))
        if n:
            sim.events.append(Event("step.expand", "draft", now + tr, tx, req, it, n * sim.w, ctx))
    row.expand_s += tx
    row.reroot_s, row.hit, row.refills = tr, hit, n
    tally.reroots += 1
    tally.hits += hit
    tally.draft_forwards += n
    tally.expand_s += tx
    tally.draft_busy_s += tr + tx
    late = tc if deferred else 0.0
    return sid, tr - late + tx, late


def grow_tree_async(sim: Simulation) -> Generator[Any, Any, None]:
    """Draft group of async_tree: keep expanding while the target verifies; re-root on each result."""
    env, tally, rows, events, get, w = sim.env, sim.tally, sim.rows, sim.events, sim.draft_inbox.get, sim.w
    for req in range(sim.num_requests):
        sid = yield from _first_proposal(sim, req)
        ctx, it = sim.prompt_tokens - 1, 0
        while True:
            if sim.poll:
                sid, n, te = yield from _expand_until_verified(sim, sid, req, it, ctx)
            else:
                sid, n, te = _expand_d(sim, sid, ctx)
                if te:
                    if sim.record_events:
                        events.append(Event("step.expand", "draft", env.now, te, req, it, n * w, ctx))
                    yield env.timeout(te)
                    tally.draft_busy_end_s = env.now
            t0 = env.now
            msg = yield get()
            if sim.tuner is not None:
                sim.tuner.received(len(msg.node_indices))  # accepted + bonus, as the runtime's
            row = rows[sim.row_base[req] + it]
            row.expand_s, row.draft_idle_s = te, env.now - t0
            tally.draft_forwards += n
            tally.expand_s += te
            tally.draft_busy_s += te
            if msg.stop:
                break
            ranks = msg.token_ids[1:]
            ctx += len(ranks)
            sid, busy, late = _reroot_and_refill(sim, sid, ranks, ctx, row)
            yield env.timeout(busy)
            it += 1
            _send(sim, sid, req, it)
            if late:
                yield env.timeout(late)
            tally.draft_busy_end_s = env.now


def grow_tree_serial(sim: Simulation) -> Generator[Any, Any, None]:
    """Draft of serial_tree / chain: after each verified path, re-root, refill to bs, expand d more, send."""
    env, tally, rows, events, trees = sim.env, sim.tally, sim.rows, sim.events, sim.trees
    get, record, d, bs, w, tuner = sim.draft_inbox.get, sim.record_events, sim.d, sim.bs, sim.w, sim.tuner
    count_hits = sim.mode == "serial_tree"
    extra = 0 if sim.mode == "chain" else d  # a chain's refill to gamma + 1 nodes is its gamma forwards
    for req in range(sim.num_requests):
        trees.maybe_trim()
        ctx = sim.prompt_tokens - 1
        pf = sim.draft_cost.prefill_s(ctx)
        if record:
            events.append(Event("step.prefill", "draft", env.now, pf, req, -1, ctx, 0))
        yield env.timeout(pf)
        tally.draft_busy_s += pf
        sid, it, tr, tc, deferred, pending = 0, 0, sim.tree_op_s, 0.0, False, False  # first round: a fresh tree
        while True:  # as the runtime's Engine._propose: refill to bs nodes, then d more (chain: none more)
            if tuner is not None:  # sim.d_rule=runtime: the runtime's SerialDepthTuner picks this round's d
                extra = tuner.shared_d()
            e0, lone = trees.num_expanded(sid), trees.size(sid) == 1
            sid, n2 = trees.refill(sid, bs)
            sid, n = trees.expand(sid, extra)
            tx = _expand_s(sim, n + n2, ctx, e0, trees.num_expanded(sid) - e0, lone, pending)
            if record:
                if it > 0:
                    events.append(Event("step.reroot", "draft", env.now, tr, req, it - 1, 0, ctx))
                events.append(Event("step.expand", "draft", env.now + tr, tx, req, it, (n + n2) * w, ctx))
            late = tc if deferred else 0.0  # no forward this round: the proposal leaves before the compaction
            yield env.timeout(tr - late + tx)
            tally.draft_busy_s += tr + tx
            tally.draft_forwards += n + n2
            tally.expand_s += tx
            if it > 0:  # this round re-rooted on verify it - 1 and built the proposal of verify it
                row = rows[sim.row_base[req] + it - 1]
                row.expand_s, row.reroot_s, row.refills = tx, tr, n2
            _send(sim, sid, req, it)
            if late:
                yield env.timeout(late)
            tally.draft_busy_end_s = env.now
            t0 = env.now
            msg = yield get()
            row = rows[sim.row_base[req] + it]
            row.draft_idle_s = env.now - t0
            if tuner is not None:
                tuner.received(len(msg.node_indices))  # accepted + bonus, as the runtime's
            if msg.stop:
                break
            ranks = msg.token_ids[1:]
            ctx += len(ranks)
            old, (sid, hit, kept) = sid, trees.reroot(sid, ranks)
            pending = not hit and trees.pending(old, ranks)  # a hit never leaves one
            # deferred (after the send) only when the next proposal needs no forward: refilled trees of >= bs
            # nodes without serial expansions, and not colocated
            deferred = extra == 0 and not sim.colocated and trees.size(sid) >= bs
            tc = _compaction_s(sim, kept + len(ranks), deferred)
            tr = sim.tree_op_s + tc
            if count_hits:
                row.hit = hit
                tally.reroots += 1
                tally.hits += hit
            it += 1


def carry_messages(sim: Simulation, inbox: MessageStore, outbox: MessageStore, delay_s: float,
                   name: str) -> Generator[Any, Any, None]:
    """One link direction: deliver each message `delay_s` after it was sent (one in flight at a time)."""
    env, events, record = sim.env, sim.events, sim.record_events
    while True:
        msg = yield inbox.get()
        if delay_s > 0.0:
            if record:
                events.append(Event(name, "link", env.now, delay_s, msg.request_id, msg.iteration, 0, 0))
            yield env.timeout(delay_s)
        outbox.put(msg)
