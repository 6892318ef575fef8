"""Host time of the runtime's per-step bookkeeping, on any machine (no GPU): what runs on the host between replays.

    python bench/bench_host_path.py [--reps 2000] [--out bench/results]

On the H200 host a torch op on a tiny CPU tensor costs ~10-30 us, and a verify once spent 0.2 ms building its
inputs before the graph could start (docs/BENCHMARKS_RUNTIME.md, fifth session). This benchmark times the host
pieces of one verify and one draft expansion at workload a's shapes (bs 8; w 16, top-k 8, a 64-slot tree),
side by side with the torch-tensor way of building the same inputs (`StepInputs`' lazy tensors, as the eager path
and the graph steps before b594258 read them), so a regression shows on a CPU machine before a GPU session:

    verify: proposal_inputs, + StepBuffers.load_inputs (the staging write; a CPU "device" buffer here, so the
            copy is a memcpy), tensors (the five tensors the old path built)
    channel: the unix channel's unpack + decode of a received bs 8 proposal (2026-11-30: 2.44 -> 1.59 us here
            with a decode that does not re-convert every slot and checks the parents at C speed)
    draft:  plan_expansion (w 16 over a grown tree), + StepBuffers.load_inputs, grow_topk (w x k children from
            top-k tensors; and from numpy arrays, as kernels.readback=spin hands them over), plan_expansion +
            grow_topk (one expansion's host part), select (top-bs subtree), reroot (hit)

Medians over `reps` calls after a warm-up, host clock; `<out>/host_path_<date>.json` (git SHA, machine, date,
config, medians in us) and a table. Ratios between rows carry over to other hosts; absolute numbers do not.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import platform
import statistics
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from conf.messages import DraftProposal, decode, encode  # noqa: E402
from conf.rundir import atomic_write_json, git_sha  # noqa: E402
from runtime.graphs import StepBuffers  # noqa: E402
from runtime.tree import DraftTree, proposal_inputs  # noqa: E402

BS, W, TOPK, MAX_LEN, PREFIX = 8, 16, 8, 64, 1024
WARMUP = 50


def _time(fn: Callable[[], object], reps: int) -> float:
    """Median seconds of one call."""
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _grown_tree(gen: torch.Generator, expansions: int = 2) -> DraftTree:
    """A tree after `expansions` expansions of W nodes with TOPK random children each (seeded, never zeros)."""
    tree = DraftTree(5)
    for _ in range(expansions):
        nodes, _ = tree.plan_expansion(W, PREFIX, MAX_LEN)
        lp = torch.log_softmax(torch.randn(W, TOPK, generator=gen), dim=-1).sort(dim=-1, descending=True).values
        tree.grow_topk(nodes, lp, torch.randint(1, 50000, (W, TOPK), generator=gen))
    return tree


def measure(reps: int) -> dict[str, float]:
    """Median microseconds per host piece (see the module docstring)."""
    gen = torch.Generator().manual_seed(0)
    tokens, parents = [11, 12, 13, 14, 15, 16, 17, 18], [-1, 0, 0, 1, 1, 2, 3, 4]
    verify_buf = StepBuffers(BS, BS, "cpu")
    out: dict[str, float] = {}
    out["verify.proposal_inputs"] = _time(lambda: proposal_inputs(tokens, parents, PREFIX, BS), reps)

    def staged() -> None:
        verify_buf.load_inputs(proposal_inputs(tokens, parents, PREFIX, BS), PREFIX)

    def tensors() -> tuple:
        inp = proposal_inputs(tokens, parents, PREFIX, BS)
        return inp.token_ids, inp.positions, inp.tree_slots, inp.tree_mask, inp.parents

    out["verify.inputs+load_inputs"] = _time(staged, reps)
    out["verify.inputs+tensors (before b594258)"] = _time(tensors, reps)
    # a leader's receive: the unix channel's unpack + decode of a bs 8 proposal (comm.recv's decoded_s - arrive_s)
    wire = array("q", encode(DraftProposal(0, 1, tuple(t + 100 for t in tokens), tuple(parents)))).tobytes()
    out["channel.unpack+decode (bs 8 proposal)"] = _time(lambda: decode(array("q", wire).tolist()), reps)

    base = _grown_tree(gen)
    lp = torch.log_softmax(torch.randn(W, TOPK, generator=gen), dim=-1).sort(dim=-1, descending=True).values
    tok = torch.randint(1, 50000, (W, TOPK), generator=gen)
    expand_buf = StepBuffers(W, MAX_LEN, "cpu")

    def fresh() -> DraftTree:  # a copy of the grown tree (planning and growing mutate it)
        return copy.deepcopy(base)

    trees = [fresh() for _ in range(WARMUP + reps)]
    it = iter(trees)
    out["draft.plan_expansion"] = _time(lambda: next(it).plan_expansion(W, PREFIX, MAX_LEN), reps)
    it = iter([fresh() for _ in range(WARMUP + reps)])
    out["draft.plan_expansion+load_inputs"] = _time(
        lambda: expand_buf.load_inputs(next(it).plan_expansion(W, PREFIX, MAX_LEN)[1], PREFIX), reps)
    planned = []
    for _ in range(WARMUP + reps):
        tree = fresh()
        planned.append((tree, tree.plan_expansion(W, PREFIX, MAX_LEN)[0]))
    it = iter(planned)

    def grow() -> None:
        tree, nodes = next(it)
        tree.grow_topk(nodes, lp, tok)

    out["draft.grow_topk"] = _time(grow, reps)
    lp_np, tok_np = lp.numpy(), tok.numpy()
    it = iter([(tree, tree.plan_expansion(W, PREFIX, MAX_LEN)[0]) for tree in (fresh() for _ in range(WARMUP + reps))])

    def grow_host() -> None:
        tree, nodes = next(it)
        tree.grow_topk(nodes, lp_np, tok_np)

    out["draft.grow_topk (numpy: readback=spin)"] = _time(grow_host, reps)
    it = iter([fresh() for _ in range(WARMUP + reps)])

    def expansion() -> None:  # one expansion's host part: take w nodes, then add their children
        tree = next(it)
        tree.grow_topk(tree.plan_expansion(W, PREFIX, MAX_LEN)[0], lp, tok)

    out["draft.plan_expansion+grow_topk"] = _time(expansion, reps)
    def select() -> list[int]:  # a fresh walk each time: the tree memoises its last select
        base._selected = None
        return base.select(BS)

    out["draft.select"] = _time(select, reps)
    child = next(c for c in base.children(0) if base.children(c))  # an expanded child of the root
    path, bonus = [0, child], base.tokens[base.children(child)[0]]  # a hit one level down
    out["draft.reroot (hit)"] = _time(lambda: base.reroot(path, bonus), reps)
    return {k: v * 1e6 for k, v in out.items()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000, help=f"timed calls per piece (after {WARMUP} warm-up)")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results", help="results folder")
    args = ap.parse_args(argv)
    if args.reps < 1:
        raise SystemExit(f"--reps: need at least 1 timed call, got {args.reps}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the runtime's host work runs on one thread
    try:
        medians = measure(args.reps)
    finally:
        torch.set_num_threads(threads)
    record = {"benchmark": "host_path", "git_sha": git_sha(), "date": datetime.date.today().isoformat(),
              "device": f"host CPU ({platform.processor() or platform.machine()}), torch {torch.__version__}",
              "config": {"bs": BS, "w": W, "topk": TOPK, "max_tree_nodes": MAX_LEN, "prefix_len": PREFIX,
                         "reps": args.reps, "warmup": WARMUP, "threads": 1},
              "median_us": medians}
    path = args.out / f"host_path_{record['date']}.json"
    atomic_write_json(path, record)
    print("| host piece | median (us) |\n|---|---|")
    for name, us in medians.items():
        print(f"| {name} | {us:.1f} |")
    print(f"-> {path}")
    return record


if __name__ == "__main__":
    main(sys.argv[1:])
