"""Auto-configuration: search GPU split, bs, w and d with the simulator and rank by tokens/s.

`search(config)` keeps everything of `config` except the searched knobs: target_gpus in 1..N-1 (N = the
config's target_gpus + draft_gpus, the rest go to the draft), bs in {4, 8, 16}, w in {4, 8, 16}, d in
{auto, 1..8}; mode async_tree. Splits the model or the node layout cannot hold are skipped with the
reason (`Candidate.error`). Every candidate runs the same workload and seed (common random numbers), so the
ranking compares system configurations on the same token sequence. Ties keep search order.

CLI (an entry point; prints a table and ends with one JSON line):

    python -m simulator.autoconfig [hydra overrides of conf/simulate.yaml] [--top 10] [--bs 4,8,16] [--w 4,8,16]

`--bs` / `--w` replace the searched values (e.g. `--w 8,16,24,32`: wider expansions than the default's).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from conf.schema import ExperimentConfig, freeze
from simulator.simulation import simulate

BS_VALUES = (4, 8, 16)
W_VALUES = (4, 8, 16)
D_VALUES: tuple[str, ...] = ("auto", *(str(d) for d in range(1, 9)))


@dataclass(frozen=True)
class Candidate:
    """One searched configuration and its simulated result."""

    target_gpus: int
    draft_gpus: int
    bs: int
    w: int
    d: str
    d_used: int = 0
    tokens_per_s: float = 0.0
    mean_accept_len: float = 0.0
    hit_rate: float | None = None
    error: str = ""


def variant(config: ExperimentConfig, target_gpus: int, draft_gpus: int, bs: int, w: int, d: str,
            **workload: int) -> ExperimentConfig:
    """A validated, frozen copy of `config` with the searched knobs replaced (config itself is untouched)."""
    spec = dataclasses.replace(config.spec, mode="async_tree", bs=bs, w=w, d=d,
                               max_tree_nodes=max(config.spec.max_tree_nodes, bs, w + 1))
    par = dataclasses.replace(config.parallel, target_gpus=target_gpus, draft_gpus=draft_gpus)
    wl = dataclasses.replace(config.workload, **workload) if workload else config.workload
    out = dataclasses.replace(config, spec=spec, parallel=par, workload=wl)
    out.validate()
    return freeze(out)


def search(config: ExperimentConfig, splits: Iterable[int] | None = None, bs_values: Sequence[int] = BS_VALUES,
           w_values: Sequence[int] = W_VALUES, d_values: Sequence[str] = D_VALUES,
           **workload: int) -> list[Candidate]:
    """Simulate every combination and return them ranked by tokens/s (failed ones last, with the reason).

    `workload` overrides workload fields for the search (e.g. num_requests=1 for a quick pass).
    """
    total = config.parallel.target_gpus + config.parallel.draft_gpus
    split_list = list(splits) if splits is not None else list(range(1, total))
    results: list[Candidate] = []
    for t, bs, w, d in itertools.product(split_list, bs_values, w_values, d_values):
        base = Candidate(t, total - t, bs, w, str(d))
        try:
            cfg = variant(config, t, total - t, bs, w, str(d), **workload)
            sim = simulate(cfg, record_events=False)
        except ValueError as e:
            results.append(dataclasses.replace(base, error=str(e)))
            continue
        tally = sim.tally
        results.append(dataclasses.replace(
            base, d_used=sim.d_used, tokens_per_s=tally.generated_tokens / tally.wall_s,
            mean_accept_len=sum(k * n for k, n in tally.accept_hist.items()) / tally.verifies,
            hit_rate=tally.hits / tally.reroots if tally.reroots else None))
    return sorted(results, key=lambda c: (c.error != "", -c.tokens_per_s))


def format_table(ranked: Sequence[Candidate], top: int) -> str:
    """The `top` best candidates as a text table."""
    lines = [f"{'rank':>4} {'split':>6} {'bs':>3} {'w':>3} {'d':>5} {'tok/s':>9} {'accept':>7} {'hit':>6}"]
    for i, c in enumerate([c for c in ranked if not c.error][:top], start=1):
        hit = "-" if c.hit_rate is None else f"{c.hit_rate:.3f}"
        d = f"{c.d}={c.d_used}" if c.d == "auto" else c.d
        lines.append(f"{i:>4} {c.target_gpus:>3}x{c.draft_gpus:<2} {c.bs:>3} {c.w:>3} {d:>5} "
                     f"{c.tokens_per_s:>9.1f} {c.mean_accept_len:>7.3f} {hit:>6}")
    failed = {c.error for c in ranked if c.error}
    lines += [f"skipped: {e}" for e in sorted(failed)]
    return "\n".join(lines)


def _ints(flag: str, text: str) -> list[int]:
    """A comma-separated list of positive ints, else SystemExit naming the flag."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise SystemExit(f"autoconfig: {flag} expects positive integers separated by commas, got {text!r}")
    return values


def main(argv: list[str]) -> list[Candidate]:
    """CLI: compose conf/simulate.yaml with the overrides in `argv`, search, print, end with a JSON line."""
    from conf import compose_config

    if "-h" in argv or "--help" in argv:
        print(__doc__)
        raise SystemExit(0)
    opts = {"--top": "10", "--bs": ",".join(map(str, BS_VALUES)), "--w": ",".join(map(str, W_VALUES))}
    for flag in opts:
        if flag in argv:
            i = argv.index(flag)
            if i + 1 >= len(argv):
                raise SystemExit(f"autoconfig: {flag} needs a value")
            opts[flag] = argv[i + 1]
            argv = argv[:i] + argv[i + 2:]
    unknown = [a for a in argv if a.startswith("-")]
    if unknown:
        raise SystemExit(f"autoconfig: unknown option {unknown[0]!r}: the options are --top, --bs, --w and -h; "
                         "everything else is a Hydra override of conf/simulate.yaml (key=value)")
    tops = _ints("--top", opts["--top"])
    if len(tops) != 1:
        raise SystemExit(f"autoconfig: --top expects one positive integer, got {opts['--top']!r}")
    top = tops[0]
    bs_values, w_values = _ints("--bs", opts["--bs"]), _ints("--w", opts["--w"])
    config = compose_config("simulate", argv)
    t0 = time.perf_counter()
    ranked = search(config, bs_values=bs_values, w_values=w_values)
    print(format_table(ranked, top))
    print(f"{len(ranked)} candidates in {time.perf_counter() - t0:.1f} s")
    best: dict[str, Any] = dataclasses.asdict(ranked[0]) if ranked else {}
    print(json.dumps({"best": best, "ranked": [dataclasses.asdict(c) for c in ranked[:top]]}))
    return ranked


if __name__ == "__main__":
    main(sys.argv[1:])
