"""Where a CUDA-graph replay's time goes, kernel by kernel, as the runtime runs it (PDL and all).

`calibration/profile_step.py` profiles an *eager* step: every kernel alone, launch gaps included. The runtime replays
graphs whose kernels overlap under programmatic dependent launch (a kernel starts while its predecessor drains
and waits in `griddepcontrol.wait`), so a kernel's own duration there includes waiting. This module profiles
replays of a captured graph with torch.profiler (CUPTI records each kernel node of a replay) and charges every
kernel its **exposed time**: how far it moves the end of the replay, ``end_i - max(end_j, j < i)`` (the first
kernel: its duration). The exposed times of one replay sum to its span from the first kernel's start to the last
kernel's end, so the table partitions the step.

Kernels are grouped by (name, grid): the skinny GEMM serves QKV, o, down and the LM head, told apart by their
grids. Pure functions (`kernel_spans`, `split_replays`, `exposed_times`, `attribute`) take the Chrome trace's
events, so they are tested on CPU with synthetic traces; `profile_graph` needs a CUDA graph.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

REPLAY_GAP_US = 200.0
"""A pause of at least this long between two kernels separates replays (`profile_graph` sleeps 2 ms between them;
inside a decode step no kernel waits that long for its predecessor)."""


def kernel_spans(trace: dict) -> list[tuple[str, float, float]]:
    """(key, start us, duration us) of every device kernel in a Chrome trace (torch.profiler's export), by start.

    key = the kernel name (first 80 characters) + its grid, e.g. ``_skinny_kernel [48, 1, 4]``."""
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise ValueError("trace: expected a Chrome trace dict with a 'traceEvents' list")
    spans = []
    for i, e in enumerate(events):
        if not isinstance(e, dict) or e.get("cat") != "kernel" or e.get("ph") != "X":
            continue
        grid = (e.get("args") or {}).get("grid")
        key = str(e.get("name", "?"))[:80] + (f" {list(grid)}" if isinstance(grid, (list, tuple)) else "")
        try:
            spans.append((key, float(e["ts"]), float(e.get("dur", 0.0))))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"trace: kernel event {i} ({e.get('name')!r}) needs numeric 'ts' and 'dur' (us), got "
                             f"ts={e.get('ts')!r} dur={e.get('dur')!r}") from None
    spans.sort(key=lambda s: s[1])
    return spans


def split_replays(spans: list[tuple[str, float, float]], gap_us: float = REPLAY_GAP_US) -> list[list]:
    """The spans cut into replays wherever the device idled at least `gap_us` between kernels."""
    replays: list[list] = []
    last_end = None
    for span in spans:
        if last_end is None or span[1] - last_end >= gap_us:
            replays.append([])
        replays[-1].append(span)
        last_end = span[1] + span[2] if last_end is None else max(last_end, span[1] + span[2])
    return replays


def exposed_times(replay: list[tuple[str, float, float]]) -> list[float]:
    """Per kernel (in start order): how far it moved the replay's end, ``max(0, end_i - max(end_j, j < i))``; the
    first kernel's is its duration. They sum to the replay's span (last end - first start)."""
    out, frontier = [], None
    for _, start, dur in replay:
        end = start + dur
        out.append(dur if frontier is None else max(0.0, end - frontier))
        frontier = end if frontier is None else max(frontier, end)
    return out


def attribute(replays: list[list[tuple[str, float, float]]]) -> dict:
    """Per kernel key over replays with the same kernel sequence: calls per replay and the medians (over replays)
    of its summed exposed and summed own durations, in us; plus the replays' span (median) and how many agreed.

    Replays whose kernel sequence differs from the most common one (a stray warm-up kernel) are left out."""
    if not replays:
        raise ValueError("replays: no kernels were recorded (did the profiler see the graph's kernels?)")
    shapes = [tuple(k for k, _, _ in r) for r in replays]
    common = max(set(shapes), key=shapes.count)
    kept = [r for r, s in zip(replays, shapes) if s == common]
    per_key: dict[str, dict[str, list[float]]] = {}
    spans = []
    for r in kept:
        exposed = exposed_times(r)
        spans.append(max(s + d for _, s, d in r) - r[0][1])
        sums: dict[str, list[float]] = {}
        for (key, _, dur), ex in zip(r, exposed):
            acc = sums.setdefault(key, [0.0, 0.0])
            acc[0] += ex
            acc[1] += dur
        for key, (ex, dur) in sums.items():
            slot = per_key.setdefault(key, {"exposed": [], "dur": []})
            slot["exposed"].append(ex)
            slot["dur"].append(dur)
    calls = {key: common.count(key) for key in per_key}
    rows = [{"kernel": key, "calls": calls[key], "exposed_us": statistics.median(v["exposed"]),
             "duration_us": statistics.median(v["dur"])} for key, v in per_key.items()]
    rows.sort(key=lambda row: row["exposed_us"], reverse=True)
    return {"replays": len(kept), "replays_dropped": len(replays) - len(kept), "kernels_per_replay": len(common),
            "span_us": statistics.median(spans), "kernels": rows}


def profile_graph(replay: Callable[[], None], reps: int = 5, trace_out: Path | None = None) -> dict:
    """Profile `reps` calls of `replay` (a CUDA graph's replay), each after a synchronise and a 2 ms pause, and
    attribute their kernels (`attribute`). `trace_out`: also keep the Chrome trace there."""
    import torch

    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            replay()
            torch.cuda.synchronize()
            time.sleep(0.002)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        text = path.read_text()
        trace = json.loads(text)
        if trace_out is not None:
            trace_out.parent.mkdir(parents=True, exist_ok=True)
            trace_out.write_text(text)
    return attribute(split_replays(kernel_spans(trace)))


def table(profile: dict, top: int = 14, floors_us: Iterable[tuple[str, float]] = ()) -> str:
    """Markdown: the `top` kernel keys by exposed time (us per step), the rest summed; `floors_us` adds lines."""
    lines = ["| kernel [grid] | calls | exposed us | own us |", "|---|---|---|---|"]
    rows = profile["kernels"]
    for row in rows[:top]:
        lines.append(f"| {row['kernel']} | {row['calls']} | {row['exposed_us']:.1f} | {row['duration_us']:.1f} |")
    rest = rows[top:]
    if rest:
        lines.append(f"| ({len(rest)} other keys) | {sum(r['calls'] for r in rest)} | "
                     f"{sum(r['exposed_us'] for r in rest):.1f} | {sum(r['duration_us'] for r in rest):.1f} |")
    lines.append(f"| span (first start to last end) | {profile['kernels_per_replay']} | {profile['span_us']:.1f} | |")
    for name, us in floors_us:
        lines.append(f"| {name} | | {us:.1f} | |")
    return "\n".join(lines)


KERNEL_CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # the runtime's weight GEMMs, fused prologues and epilogues included (QKV + RoPE + KV write; gate/up + SwiGLU;
    # the residual-fused skinny GEMMs; the split-K reduction; TP's GEMM + all-reduce), and cuBLAS's
    ("gemm", ("_skinny_kernel", "_skinny_residual_kernel", "_reduce_partials_kernel",
              "_swiglu_kernel", "_qkv_rope_kv_write_kernel", "_gemm_allreduce",
              "gemm", "cutlass", "nvjet", "sm90_xmma")),
    ("attention", ("_tree_attention_kernel", "flash", "attention")),
)
"""Kernel name (the key's part before its grid) -> the simulator's operator class, by prefix or substring: the
first class with a pattern the name starts with, else the first with a pattern it contains; everything else (norms,
the embedding, RoPE alone, top-k, argmax, KV compaction, copies and fills) is `other`."""


def kernel_class(key: str) -> str:
    """`gemm`, `attention` or `other` for a kernel key of `attribute` (``name [grid]``)."""
    name = key.split(" [", 1)[0].strip()
    for cls, patterns in KERNEL_CLASSES:
        if name.startswith(patterns):
            return cls
    low = name.lower()
    for cls, patterns in KERNEL_CLASSES:
        if any(p in low for p in patterns if not p.startswith("_")):
            return cls
    return "other"


def class_totals(profile: dict) -> dict[str, dict[str, float]]:
    """Per operator class (`kernel_class`) of an `attribute` result: summed exposed and own time (us) and calls per
    replay. The classes' exposed times sum to the replay's span."""
    out = {cls: {"exposed_us": 0.0, "duration_us": 0.0, "calls": 0} for cls in ("gemm", "attention", "other")}
    for row in profile["kernels"]:
        slot = out[kernel_class(row["kernel"])]
        slot["exposed_us"] += row["exposed_us"]
        slot["duration_us"] += row["duration_us"]
        slot["calls"] += row["calls"]
    return out
