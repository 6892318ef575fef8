"""Leader-to-leader message round trips: `parallel.leader_channel` dist vs unix, side by side in one launch.

    python bench/bench_channel.py [--device cpu|cuda] [--rounds 400] [--nodes 8,64] [--out bench/results]

One 1 + 1 launch (gloo on CPU, NCCL on two GPUs); per channel kind and message size (a DraftProposal of
`nodes` nodes, the largest message of a verify of that width): warm-up round trips, then `rounds` timed ones
(the target leader sends, the draft leader echoes; host clock around send + receive). Writes
`<out>/channel_<device>_<date>.json` (git SHA, device, date, config, medians and percentiles) and prints a
table. The floor of a round trip is two host-to-host hops of a few hundred bytes: microseconds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from conf.messages import DraftProposal  # noqa: E402
from conf.rundir import atomic_write_json, git_sha  # noqa: E402

KINDS = ("dist", "unix")
SPIN_S = 50e-3
"""The receive spin of the unix kinds: the GPU ranks' default (`parallel.recv_spin_ms` auto)."""
WARMUP = 20


def _rank(ctx, cfg, rounds: int, nodes: list[int]) -> dict | None:
    """Both leaders: per kind and size, round trips timed on the target leader."""
    from runtime.unix_channel import make_channel

    out: dict[str, dict[str, list[float]]] = {}
    for kind in KINDS:
        for n in nodes:
            ch = make_channel(ctx, kind, max(nodes), spin_s=SPIN_S)
            msg = DraftProposal.make_dummy(n)
            times = []
            for i in range(WARMUP + rounds):
                if ctx.role == "target":
                    t0 = time.perf_counter()
                    ch.send(msg)
                    ch.recv()
                    if i >= WARMUP:
                        times.append(time.perf_counter() - t0)
                else:
                    ch.send(ch.recv())
            ch.close()
            out.setdefault(kind, {})[str(n)] = times
    return out if ctx.role == "target" else None


def summarize(times: list[float]) -> dict[str, float]:
    """Median and spread of round-trip times, in microseconds."""
    q = statistics.quantiles(times, n=20)
    return {"median_us": statistics.median(times) * 1e6, "p5_us": q[0] * 1e6, "p95_us": q[-1] * 1e6,
            "rounds": len(times)}


def main(argv: list[str] | None = None) -> dict:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--nodes", default="8,64", help="proposal sizes (nodes), comma-separated")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results")
    a = ap.parse_args(argv)
    import functools

    import torch

    from conf.schema import ExperimentConfig, ParallelConfig, SpecConfig, freeze
    from runtime.launch import launch

    device = "cuda" if a.device == "cuda" or (a.device == "auto" and torch.cuda.device_count() >= 2) else "cpu"
    nodes = [int(x) for x in a.nodes.split(",")]
    cfg = freeze(ExperimentConfig(parallel=ParallelConfig(1, 1, device, 60.0), spec=SpecConfig(mode="async_tree")))
    raw = launch(functools.partial(_rank, rounds=a.rounds, nodes=nodes), cfg)
    label = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    today = datetime.date.today().isoformat()
    result = {"benchmark": "leader_channel_round_trip", "date": today, "git_sha": git_sha(), "device": label,
              "backend": "nccl" if device == "cuda" else "gloo", "config": {"rounds": a.rounds, "warmup": WARMUP,
                                                                              "nodes": nodes},
              "results": {k: {n: summarize(t) for n, t in v.items()} for k, v in raw.items()}}
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"channel_{'gpu' if device == 'cuda' else 'cpu'}_{today}.json"
    atomic_write_json(path, result)
    print("| channel | nodes | median RTT (us) | p5 | p95 |")
    print("|---|---|---|---|---|")
    for kind, by_n in result["results"].items():
        for n, s in by_n.items():
            print(f"| {kind} | {n} | {s['median_us']:.1f} | {s['p5_us']:.1f} | {s['p95_us']:.1f} |")
    print(json.dumps({"json": str(path), "device": label}))
    return result


if __name__ == "__main__":
    main()
