"""The runtime's decode steps as CUDA-graph replays, against their byte floor (one GPU).

    python bench/step_replay.py [--cases llama3-8b:target:1,llama3-8b:target:8,llama3.2-1b:draft:1]
                                [--ctx 1024] [--rounds 12] [--inner 10] [--out FILE]

A case is `preset:role:rows[:tree_len]` (tree_len defaults to rows, as a verify graph's). Per case the model is built
with random weights (seed 0) and set to the kernels the runtime gives that role under conf/kernels/graphs.yaml
(`calibration.runtime_kernels.graphs_kernels` and `runtime.fused_decode.KernelPlan.for_role`, as
calibration.profile_steps builds its graph-mode steps; PDL launches on when the config has them), its step captured once
as a `runtime.graphs.StepGraph` of `rows` tree nodes (a binary tree) over a KV cache of `--cap` slots, then the cache
filled with `--ctx` tokens of a random prompt. The step is the model's forward alone (no draft head, verdict or
read-back).

Timing: `--rounds` rounds of one untimed replay then `--inner` replays between two CUDA events; the median per
replay. The floor: every weight byte once + the K/V of ctx + rows tokens over the H200's HBM bandwidth
(calibration/profile_step.py `byte_floor_s`). Plain argparse, no Hydra: it runs on a bare GPU machine. Writes the record
(git SHA, device, date, config, one row per case) to `--out` and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from conf.presets import model_preset  # noqa: E402
from conf.rundir import atomic_write_json, git_sha  # noqa: E402

ROLES = ("target", "draft")
DEFAULT_CASES = "llama3-8b:target:1,llama3-8b:target:8,llama3.2-1b:draft:1"
"""Workload a's steps: the 8B target's autoregressive (1 row) and bs-8 verify steps, the 1B draft's one-row step."""
MAX_ROWS = 64
"""The most rows a decode step takes (runtime/fused_decode.py SKINNY_MAX_ROWS: the graph-mode kernels' limit)."""


def parse_cases(spec: str, ctx: int, cap: int) -> list[tuple[str, str, int, int]]:
    """`preset:role:rows[:tree_len],...` -> [(preset, role, rows, tree_len)]; SystemExit naming the bad case."""
    cases = []
    for item in spec.split(","):
        parts = item.split(":")
        try:
            if len(parts) not in (3, 4):
                raise ValueError
            preset, role, rows = parts[0], parts[1], int(parts[2])
            tree_len = int(parts[3]) if len(parts) == 4 else rows
        except ValueError:
            raise SystemExit(f"--cases: {item!r} is not preset:role:rows[:tree_len]") from None
        try:
            model_preset(preset)
        except (KeyError, ValueError) as e:
            raise SystemExit(f"--cases: {item!r}: {e}") from None
        if role not in ROLES:
            raise SystemExit(f"--cases: {item!r}: role must be one of {', '.join(ROLES)}, got {role!r}")
        if not 1 <= rows <= min(tree_len, MAX_ROWS):
            raise SystemExit(f"--cases: {item!r}: needs 1 <= rows <= tree_len and rows <= {MAX_ROWS} (a decode step)")
        if ctx + tree_len > cap:
            raise SystemExit(f"--cases: {item!r}: --ctx {ctx} + tree_len {tree_len} exceeds --cap {cap} KV slots")
        if any(c[:3] == (preset, role, rows) for c in cases):
            raise SystemExit(f"--cases: {item!r}: the same preset, role and rows twice")
        cases.append((preset, role, rows, tree_len))
    return cases


def tree_inputs(rows: int, ctx: int, vocab: int, gen: torch.Generator) -> tuple:
    """A binary tree of `rows` nodes after `ctx` cached tokens: ids, positions, tree slots, mask [rows, rows]."""
    from runtime.tree import ancestor_mask

    parents = [-1] + [(i - 1) // 2 for i in range(1, rows)]
    depth = [0] * rows
    for i in range(1, rows):
        depth[i] = depth[parents[i]] + 1
    ids = torch.randint(0, vocab, (rows,), generator=gen)
    return ids, torch.tensor([ctx + d for d in depth]), torch.arange(rows), ancestor_mask(parents, rows)


def runtime_model(preset: str, role: str, dtype: str, device: torch.device) -> tuple[Any, bool]:
    """(the FusedDecoder the runtime gives `role` under kernels=graphs, whether PDL launches are on)."""
    from calibration.runtime_kernels import graphs_kernels
    from runtime.fused_decode import FusedDecoder, KernelPlan
    from runtime.loader import build_model

    kernels = graphs_kernels()
    model = build_model(model_preset(preset), dtype, device, seed=0)
    model = FusedDecoder(model, KernelPlan.for_role(
        model.shape, skinny=kernels["skinny"], rope_attention=kernels["rope_attention"],
        target_qkv_rope=kernels["target_qkv_rope"], target=role == "target"))
    return model, kernels["pdl"]


def time_replays(replay: Any, rounds: int, inner: int) -> list[float]:
    """Seconds per replay of each round: one untimed replay (the kernels warm, as in a run of steps), then `inner`
    replays between two CUDA events."""
    times = []
    for _ in range(rounds):
        replay()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3 / inner)
    return times


@contextlib.contextmanager
def captured_step(preset: str, role: str, rows: int, tree_len: int, *, ctx: int, cap: int,
                  dtype: str) -> Iterator[tuple[Callable[[], None], dict]]:
    """One case built and captured (module docstring), its cache filled with `ctx` tokens and its inputs set once:
    yields (a replay of the captured step, {"logits_finite", "floor_s"}); frees the model, cache and graph on exit.
    Also the runtime's side of bench/compiled_peers.py's per-kernel profiles."""
    from calibration.profile_step import byte_floor_s
    from runtime.attention import AttnMeta, make_attention_backend
    from runtime.graphs import StepGraph, StepSpec
    from runtime.kv_cache import KVCache

    device = torch.device("cuda")
    model, pdl_on = runtime_model(preset, role, dtype, device)
    layers, heads, head_dim = model.cache_spec()
    cache = KVCache(layers, cap, heads, head_dim, model.dtype, device)
    attn = make_attention_backend("triton")
    if pdl_on:
        from kernels.pdl import pdl
        launches: Any = pdl(True)
    else:
        launches = contextlib.nullcontext()
    gen = torch.Generator().manual_seed(0)
    try:
        with torch.no_grad():
            with launches:  # the launch attributes are recorded in the graph
                graph = StepGraph(model, cache, attn, StepSpec(rows, tree_len))
            # after the capture (which wrote slots [0, rows)): a real context, so the attention reads non-zero K/V; a
            # replay writes K/V at ctx + its tree slots only
            prompt = torch.randint(0, model.shape.vocab_size, (ctx,), generator=gen).to(device)
            for start in range(0, ctx, 512):
                n = min(512, ctx - start)
                model(prompt[start:start + n], AttnMeta.causal(start, n, device), cache, attn)
            ids, pos, slots, mask = tree_inputs(rows, ctx, model.shape.vocab_size, gen)
            full_mask = torch.zeros(rows, tree_len, dtype=torch.bool)
            full_mask[:, :rows] = mask
            logits = graph.replay(ids, pos, slots, ctx, full_mask)
            info = {"logits_finite": bool(torch.isfinite(logits.float()).all()),
                    "floor_s": byte_floor_s(model.model, ctx, rows)}  # the plain model's weights
            yield graph.graph.replay, info
    finally:
        del model, cache
        graph = None
        torch.cuda.empty_cache()


def run_case(preset: str, role: str, rows: int, tree_len: int, *, ctx: int, cap: int, rounds: int, inner: int,
             dtype: str) -> dict:
    """Build, capture and time one case (module docstring); its result row."""
    with captured_step(preset, role, rows, tree_len, ctx=ctx, cap=cap, dtype=dtype) as (replay, info):
        times = time_replays(replay, rounds, inner)
    floor, med = info["floor_s"], statistics.median(times)
    return {"preset": preset, "role": role, "rows": rows, "tree_len": tree_len, "ctx": ctx, "replay_s": med,
            "over_floor": med / floor, "floor_s": floor, "replay_s_all": times, "logits_finite": info["logits_finite"]}


def table(results: list[dict]) -> str:
    """Markdown: one row per case."""
    lines = ["| case | replay (ms) | x floor | floor (ms) |", "|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['preset']} {r['role']} rows {r['rows']} | {r['replay_s'] * 1e3:.3f} | "
                     f"{r['over_floor']:.3f} | {r['floor_s'] * 1e3:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=DEFAULT_CASES, help="comma-separated preset:role:rows[:tree_len]")
    p.add_argument("--ctx", type=int, default=1024, help="cached tokens before the step")
    p.add_argument("--cap", type=int, default=2048, help="KV cache slots (the runtime's max_seq_len_tokens)")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--inner", type=int, default=10)
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    p.add_argument("--out", type=Path, default=None, help="results JSON")
    a = p.parse_args(argv)
    for name in ("ctx", "rounds", "inner"):
        if getattr(a, name) < 1:
            raise SystemExit(f"--{name}: expected an integer >= 1, got {getattr(a, name)}")
    cases = parse_cases(a.cases, a.ctx, a.cap)
    if not torch.cuda.is_available():
        raise SystemExit("step_replay: needs a CUDA GPU (the steps are CUDA graphs)")
    results = []
    for preset, role, rows, tree_len in cases:
        results.append(run_case(preset, role, rows, tree_len, ctx=a.ctx, cap=a.cap, rounds=a.rounds, inner=a.inner,
                                dtype=a.dtype))
        r = results[-1]
        print(f"{preset} {role} rows {rows}: {r['replay_s'] * 1e3:.3f} ms ({r['over_floor']:.3f}x floor)", flush=True)
    import triton

    record = {"benchmark": "step_replay", "git_sha": git_sha(), "device": torch.cuda.get_device_name(),
              "date": datetime.date.today().isoformat(), "torch": torch.__version__, "triton": triton.__version__,
              "config": {"cases": a.cases, "ctx": a.ctx, "cap": a.cap, "rounds": a.rounds, "inner": a.inner,
                         "dtype": a.dtype, "kernels": "conf/kernels/graphs.yaml per role (KernelPlan.for_role)"},
              "results": results}
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(a.out, record)
    print(table(results))
    return record


if __name__ == "__main__":
    main()
