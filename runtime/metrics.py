"""Timing and results of a runtime run: timed spans, the metrics dict, the run directory, live progress.

- `Timeline`: spans (name, group, rank, iteration, start_s, duration_s) of one rank, in the shared trace
  schema (`conf.trace.TraceRecord`). `start_s` is relative to the run start (`time.perf_counter` based).
  `Timeline.start(ctx, run_id)` is collective: every rank calls it at the same point, after a bounded
  barrier; the ranks on rank 0's host take rank 0's clock reading as their origin (`perf_counter` is the
  system-wide monotonic clock: their spans compare exactly), other hosts' ranks their own (within one barrier
  exit of it). On GPU, `span(..., cuda_events=True)` records CUDA
  events instead of synchronising; they are resolved lazily by `records()` (which synchronises once).
- Merging: at the end of a run every rank calls `Timeline.gather(ctx)`, which sends its records to rank 0
  over the world group (`gather_object`); rank 0 writes one `traces.jsonl` with every rank's spans (the
  `rank` and `group` fields tell them apart). One file keeps the run dir simple for the calibration and
  analysis readers; the cost is one object gather at the end, outside the timed region.
- `summarize(...)`: the metrics dict of the "Metrics contract" (docs/CONTRACTS.md) from the per-iteration
  rows (`ITERATION_COLUMNS`, the columns of iterations.csv), generated token counts and wall time.
- `write_run_dir(...)`: config.json (+ git SHA, seed), metrics.json/.csv, iterations.csv, outputs.jsonl
  (`output_records`), traces.jsonl, chrome_trace.json, each written atomically (conf/rundir.py).
- `Progress`: a throttled "tokens generated, tok/s" line on stderr for long runs; the engine enables it on
  rank 0 only.

It does not time anything by itself (callers open spans), and never reads env vars or argv.
"""

from __future__ import annotations

import json
import socket
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.distributed as dist

from conf.rundir import (
    ITERATION_COLUMNS,
    ITERATIONS_FILE,
    OUTPUTS_FILE,
    atomic_write_json,
    atomic_write_text,
    write_run,
)
from conf.schema import ExperimentConfig
from conf.trace import CHROME_FILE, TRACE_FILE, TraceRecord, to_chrome_trace, write_traces

METRIC_KEYS = (
    "source", "mode", "model", "target_gpus", "draft_gpus", "bs", "w", "d", "gamma", "interconnect", "gpu",
    "acceptance_scale", "oracle", "num_requests", "generated_tokens", "wall_s", "tokens_per_s",
    "time_per_output_token_s", "iterations", "iteration_time_s", "verify_time_s", "expand_time_s",
    "mean_accept_len", "accept_len_hist", "hit_rate", "busy_fraction",
)
"""Keys of metrics.json shared by the runtime and the simulator."""


def device_name(device: torch.device) -> str:
    """Human-readable device for traces and metrics: "cpu" or the GPU's name (e.g. "NVIDIA H200")."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


class Timeline:
    """Timed spans of one rank, convertible to `TraceRecord`s.

    Example:
        tl = Timeline.start(ctx, run_id="abc")
        with tl.span("step.verify", iteration=3, tokens=8):
            ...
        records = tl.gather(ctx)  # every rank's records on rank 0, None elsewhere
    """

    def __init__(self, run_id: str = "", *, rank: int = 0, group: str = "", tp: int = 1,
                 device: torch.device | None = None, enabled: bool = True, origin: float | None = None) -> None:
        """Start an empty timeline whose time origin is now (`perf_counter`), or `origin` (a perf_counter value)."""
        self.run_id = run_id
        self.rank = rank
        self.group = group
        self.tp = tp
        self.enabled = enabled
        self.device = torch.device("cpu") if device is None else device
        self._device_name = device_name(self.device)
        self._t0 = time.perf_counter() if origin is None else origin
        # Raw span fields, turned into TraceRecords (JSON-encoded extras) only by records(): recording a span
        # stays a tuple append on the decode loop's critical path.
        self._raw: list[tuple[Any, ...]] = []
        # Spans timed with CUDA events, resolved by records(): (fields, start_event, end_event).
        self._pending: list[tuple[dict[str, Any], Any, Any]] = []
        self._ref_event: Any = None
        self._ref_s = 0.0
        if self.device.type == "cuda":
            self._ref_event = torch.cuda.Event(enable_timing=True)
            self._ref_event.record()
            self._ref_s = self.now()

    @classmethod
    def start(cls, ctx: Any, run_id: str = "", *, enabled: bool = True) -> Timeline:
        """Collective: a bounded barrier over the world group, then a timeline whose origin is rank 0's clock
        reading right after it on every rank of rank 0's host (one system-wide clock there: their spans compare
        exactly), and the rank's own reading elsewhere (within one barrier exit of rank 0's). Ranks leave a barrier
        at different times: with per-rank readings the two leaders' spans were offset by tens of microseconds,
        which skewed cross-rank gaps such as a message's delivery (calibration/message_latency.py).

        Args:
            ctx: the rank's `runtime.parallel.ParallelContext`.
            run_id: id written into every record.
            enabled: False makes `span`/`add` no-ops (trace.enabled = false).
        """
        from runtime.parallel import barrier

        barrier(ctx, "timeline start")
        origin = time.perf_counter()
        if ctx.world_size > 1:  # over the world group's CPU backend (gloo), bounded by the group's timeout
            marks: list[Any] = [None] * ctx.world_size
            host = socket.gethostname()
            dist.all_gather_object(marks, (host, origin), group=ctx.world_group)
            if marks[0][0] == host:
                origin = marks[0][1]
        return cls(run_id, rank=ctx.rank, group=ctx.role, tp=ctx.group_size, device=ctx.device, enabled=enabled,
                   origin=origin)

    def now(self) -> float:
        """Seconds since this timeline's origin."""
        return time.perf_counter() - self._t0

    def add(self, name: str, start_s: float, duration_s: float, *, iteration: int = -1, tokens: int = 0,
            ctx_len: int = 0, shapes: str = "", extra: Mapping[str, Any] | None = None) -> None:
        """Record a span measured by the caller (`start_s` from `now()`)."""
        if self.enabled:
            self._raw.append((name, start_s, duration_s, iteration, tokens, ctx_len, shapes, extra))

    @contextmanager
    def span(self, name: str, *, iteration: int = -1, tokens: int = 0, ctx_len: int = 0, shapes: str = "",
             extra: Mapping[str, Any] | None = None, cuda_events: bool = False) -> Iterator[None]:
        """Time the body of a `with` block.

        Host timing by default: on GPU the caller synchronises inside the block if it wants device time.
        `cuda_events=True` (GPU only) records events on the current stream instead and resolves them lazily.
        """
        if not self.enabled:
            yield
            return
        if cuda_events and self._ref_event is not None:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            try:
                yield
            finally:
                end.record()
                fields = {"name": name, "iteration": iteration, "tokens": tokens, "ctx_len": ctx_len,
                          "shapes": shapes, "extra": extra}
                self._pending.append((fields, begin, end))
            return
        start = self.now()
        try:
            yield
        finally:
            self._raw.append((name, start, self.now() - start, iteration, tokens, ctx_len, shapes, extra))

    def records(self) -> list[TraceRecord]:
        """All spans of this rank, sorted by start (synchronises the device once if CUDA spans are pending)."""
        if self._pending:
            torch.cuda.synchronize(self.device)
            for f, begin, end in self._pending:
                start = self._ref_s + self._ref_event.elapsed_time(begin) / 1e3
                self._raw.append((f["name"], start, begin.elapsed_time(end) / 1e3, f["iteration"], f["tokens"],
                                  f["ctx_len"], f["shapes"], f["extra"]))
            self._pending.clear()
        return sorted((self._record(*raw) for raw in self._raw), key=lambda r: (r.start_s, r.rank))

    def gather(self, ctx: Any) -> list[TraceRecord] | None:
        """Collective: every rank's records on world rank 0 (sorted by start), None on the other ranks."""
        mine = [r.to_dict() for r in self.records()]
        if ctx.world_size == 1:
            return [TraceRecord.from_dict(d) for d in mine]
        out: list[Any] | None = [None] * ctx.world_size if ctx.rank == 0 else None
        dist.gather_object(mine, out, dst=0, group=ctx.world_group)
        if out is None:
            return None
        merged = [TraceRecord.from_dict(d) for part in out for d in part]
        return sorted(merged, key=lambda r: (r.start_s, r.rank))

    def _record(self, name: str, start_s: float, duration_s: float, iteration: int, tokens: int, ctx_len: int,
                shapes: str, extra: Mapping[str, Any] | None) -> TraceRecord:
        return TraceRecord(
            name=name, shapes=shapes, tp=self.tp, ctx=ctx_len, device=self._device_name, start_s=start_s,
            duration_s=max(0.0, duration_s), run_id=self.run_id, group=self.group, rank=self.rank,
            iteration=iteration, tokens=tokens, extra=json.dumps(dict(extra), sort_keys=True) if extra else "",
        )


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _hit(value: Any) -> bool | None:
    """A row's `hit` cell: True/False, or None where the mode does no re-rooting ("" or None)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


def summarize(cfg: ExperimentConfig, iterations: Sequence[Mapping[str, Any]], generated_tokens: int,
              wall_s: float, *, gpu: str = "cpu", num_requests: int | None = None,
              **extra: Any) -> dict[str, Any]:
    """The metrics dict of a runtime run (keys `METRIC_KEYS`, then `extra`).

    Args:
        cfg: the run's configuration (mode, split, speculation shape, scenario labels).
        iterations: one row per verify step with the `ITERATION_COLUMNS` (times in seconds).
        generated_tokens: output tokens over all requests.
        wall_s: decoding wall time over all requests (the denominator of tokens_per_s).
        gpu: device that ran it ("cpu", "NVIDIA H200", ...).
        num_requests: requests decoded; defaults to `cfg.workload.num_requests`.
        **extra: further keys appended after the contract keys (e.g. prefill_s).

    Returns:
        A JSON-serialisable dict. Means over no rows are None; `hit_rate` is None when no row has a hit
        value; `busy_fraction` is summed step time over wall time per group.
    """
    rows = list(iterations)
    emitted = [int(r["emitted"]) for r in rows]
    hits = [h for h in (_hit(r.get("hit")) for r in rows) if h is not None]
    verify = [float(r.get("verify_s") or 0.0) for r in rows]
    expand = [float(r.get("expand_s") or 0.0) for r in rows]
    reroot = [float(r.get("reroot_s") or 0.0) for r in rows]
    spec = cfg.spec
    metrics: dict[str, Any] = {
        "source": "runtime",
        "mode": spec.mode,
        "model": cfg.model.name,
        "target_gpus": cfg.parallel.target_gpus,
        "draft_gpus": cfg.parallel.draft_gpus,
        "bs": spec.bs,
        "w": spec.w,
        "d": spec.d_fixed if spec.d_fixed is not None else str(spec.d),
        "gamma": spec.gamma,
        "interconnect": cfg.interconnect.name,
        "gpu": gpu,
        "acceptance_scale": cfg.acceptance.scale,
        "oracle": spec.oracle,
        "num_requests": cfg.workload.num_requests if num_requests is None else num_requests,
        "generated_tokens": generated_tokens,
        "wall_s": wall_s,
        "tokens_per_s": generated_tokens / wall_s if wall_s > 0 else None,
        "time_per_output_token_s": wall_s / generated_tokens if generated_tokens > 0 else None,
        "iterations": len(rows),
        "iteration_time_s": _mean([float(r["end_s"]) - float(r["start_s"]) for r in rows]),
        "verify_time_s": _mean(verify),
        "expand_time_s": _mean(expand),
        "mean_accept_len": _mean(emitted),
        "accept_len_hist": {str(k): n for k, n in sorted(Counter(emitted).items())},
        "hit_rate": _mean([float(h) for h in hits]),
        "busy_fraction": {"target": sum(verify) / wall_s if wall_s > 0 else None,
                          "draft": (sum(expand) + sum(reroot)) / wall_s if wall_s > 0 else None},
    }
    metrics.update(extra)
    return metrics


def write_run_dir(run_dir: str | Path, cfg: ExperimentConfig, meta: Mapping[str, Any], metrics: Mapping[str, Any],
                  iterations: Iterable[Mapping[str, Any]] = (),
                  timeline: Timeline | Iterable[TraceRecord] | None = None,
                  outputs: Iterable[Mapping[str, Any]] | None = None) -> Path:
    """Write a complete run dir atomically, file by file; returns its path.

    config.json (config + meta: git SHA, seed, ...), metrics.json, metrics.csv, iterations.csv (header only when
    there are no rows), outputs.jsonl when `outputs` is given (conf/rundir.py OUTPUTS_FILE: one record per request),
    and, per `cfg.trace`, traces.jsonl and chrome_trace.json.
    """
    run_dir = Path(run_dir)
    write_run(run_dir, cfg, dict(meta), dict(metrics))
    atomic_write_text(run_dir / ITERATIONS_FILE, iterations_csv(iterations))
    if outputs is not None:
        atomic_write_text(run_dir / OUTPUTS_FILE, "".join(json.dumps(dict(o)) + "\n" for o in outputs))
    records = timeline.records() if isinstance(timeline, Timeline) else list(timeline or [])
    if cfg.trace.enabled:
        write_traces(run_dir / TRACE_FILE, records)
        if cfg.trace.chrome:
            atomic_write_json(run_dir / CHROME_FILE, to_chrome_trace(records))
    return run_dir


def output_records(cfg: ExperimentConfig, result: Mapping[str, Any],
                   texts: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """outputs.jsonl's records (conf/rundir.py OUTPUTS_FILE) from `runtime.engine.run_rank`'s result: per request its
    prompt size, generated ids, decoded text (`texts`; None without a tokenizer) and the stop rule that ended it
    (metrics `stop_reasons`, runtime.controller.stop_reason)."""
    stops = result["metrics"]["stop_reasons"]
    return [{"request": rid, "prompt_tokens": len(prompt), "tokens": [int(t) for t in ids],
             "text": None if texts is None else texts[rid], "stop": stops[rid]}
            for rid, (prompt, ids) in enumerate(zip(result["prompts"], result["outputs"]))]


def iterations_csv(iterations: Iterable[Mapping[str, Any]]) -> str:
    """iterations.csv's text: the ITERATION_COLUMNS header, then one line per row (missing or None cells empty)."""
    rows = [{k: r.get(k, "") for k in ITERATION_COLUMNS} for r in iterations]
    lines = [",".join(ITERATION_COLUMNS)] + [",".join(_csv_cell(r[k]) for k in ITERATION_COLUMNS) for r in rows]
    return "\n".join(lines) + "\n"


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float):
        return repr(value)
    return str(value)


class Progress:
    """Throttled progress on a text stream: tokens generated, tokens/s (rank 0 only: pass `enabled`).

    On a terminal it rewrites one line at most every `min_interval_s`; on a file or pipe it prints a full
    line at most every `pipe_interval_s`, so logs stay short.
    """

    def __init__(self, total_tokens: int, *, enabled: bool = True, stream: TextIO | None = None,
                 min_interval_s: float = 0.25, pipe_interval_s: float = 10.0, label: str = "generate") -> None:
        """Start the clock; nothing is printed until the first `update` after the interval."""
        self.total_tokens = total_tokens
        self.enabled = enabled
        self.stream = sys.stderr if stream is None else stream
        self.is_tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = min_interval_s if self.is_tty else pipe_interval_s
        self.label = label
        self._start = time.perf_counter()
        self._last = self._start
        self._tokens = 0
        self._printed = False

    def update(self, generated_tokens: int) -> None:
        """Report the total tokens generated so far (absolute, not an increment)."""
        self._tokens = generated_tokens
        now = time.perf_counter()
        if self.enabled and now - self._last >= self.interval_s:
            self._last = now
            self._write(now)

    def close(self) -> None:
        """Print the final state (only if something was printed before) and end the line."""
        if self.enabled and self._printed:
            self._write(time.perf_counter())
            if self.is_tty:
                self.stream.write("\n")
            self.stream.flush()

    def line(self, now: float | None = None) -> str:
        """The progress text, e.g. "[generate] 120/512 tokens, 35.2 tok/s, 3.4 s"."""
        elapsed = (time.perf_counter() if now is None else now) - self._start
        rate = self._tokens / elapsed if elapsed > 0 else 0.0
        return f"[{self.label}] {self._tokens}/{self.total_tokens} tokens, {rate:.1f} tok/s, {elapsed:.1f} s"

    def _write(self, now: float) -> None:
        self._printed = True
        self.stream.write(("\r" + self.line(now) + "\x1b[K") if self.is_tty else self.line(now) + "\n")
        self.stream.flush()
