"""CUDA-graph capture of decode steps: one graph per (model, rows, tree_len), persistent input buffers.

The eager runtime is host-bound on a GPU: a Llama-3-8B verify forward issues ~1,270 kernel launches, whose host time
is several times the kernels' (calibration/profile_step.py).
A `StepGraph` records one forward (plus an optional `head`, e.g. the draft's log-softmax + top-k) once and
replays it for every step:

    target verify    rows = bs (gamma + 1, or 1 for autoregressive), tree_len = rows
    draft expand     rows = w, tree_len = max_tree_nodes; with one pending verified token in front
                     (DraftWorker.expand after a miss on an unexpanded leaf): rows = w + 1, tree_len + 1

Everything that varies between steps lives in device buffers the graph reads: the prefix length (a
1-element tensor: `AttnMeta.prefix_len` as a tensor, which the Triton tree attention sizes from the cache
capacity), token ids, RoPE positions, tree slots (write slot = prefix + tree slot, computed in the graph) and
the [rows, tree_len] tree mask, written into one pinned host buffer from the host lists of `runtime.tree.StepInputs`
(`load_inputs`: no torch op on the host), which the graph's first node copies to the device. A graph with a head or
a verdict ends by copying those small outputs into pinned host memory, then the load's ticket; the host spins on
the ticket (`host_outputs`): after the launch, no CUDA call and no torch op until the outputs are read (a blocking
input copy and a read-back plus stream sync cost each step host time on the critical path).

A step may also carry a KV compaction owed by the last re-root or keep (`keep_rows` > 0): its first kernel is
`kernels.kv_compact` over source slots padded with -1 to `keep_rows`, read from the same buffer. The compaction
then costs no host time of its own, where a separate launch (a `torch.tensor` on the device and a Triton launch)
would sit on the draft's critical path between the proposal's send and its next expansion.

Chained autoregressive steps (`StepSpec.chain`, rows = 1, greedy): the captured step ends by writing its argmax
into the token-id buffer and advancing the prefix length and the position by one, so `replay_chained()` runs
the next token's step with no host input at all and the host can queue step i + 1 before it reads token i
(runtime/engine.py `_autoregressive_chained`): the GPU never waits for the host between steps. An ordinary
`replay` still copies every input first, so the chained tail does not disturb it.

Capture happens when a worker is built, before any request: the warm-up and capture forwards write K/V at
slots [0, rows), which the first prefill overwrites. The Triton backend is required (the reference
attention slices the cache by a host-side length). NCCL all-reduces of a TP group are captured too (the
warm-up forwards initialise the communicators first).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kernels import kv_compact
from runtime.attention import AttentionBackend, AttnMeta
from runtime.kv_cache import KVCache
from runtime.tree import StepInputs
from runtime.tree_cache import prefill


class StepBuffers:
    """A step's inputs in one byte buffer on the device, staged in one host buffer of the same layout: int64
    [prefix_len | token ids | positions | tree slots | parent rows | (keep_rows > 0:) keep destination | keep
    sources, -1-padded to keep_rows | ticket], then the [rows, tree_len] bool mask. A load writes the host buffer
    through numpy views (a list into a slice costs ~1 us; a torch op costs ~10-30 us of host time, before every
    replay). The host buffer is pinned on a CUDA device.

    `copy_in_graph` (a step graph's buffers): the graph copies the host buffer itself, as its first node
    (`capture_copy`): a load only writes host memory, and its caller must know the previous replay has read it
    (`StepGraph` waits for it). Else (a chained graph, whose chained replays must not copy the host buffer again) a
    load copies it at once, without blocking the host on CUDA (an event guards the buffer's reuse).
    The graph reads all but the parent rows, which a verify's verdict reads, and the ticket: the load's number
    (1, 2, ...), which a graph with a read-back hands back to the host after its outputs (`StepGraph.host_outputs`).
    """

    def __init__(self, rows: int, tree_len: int, device: torch.device | str, keep_rows: int = 0, *,
                 copy_in_graph: bool = True) -> None:
        if keep_rows < 0:
            raise ValueError(f"StepBuffers: keep_rows must be >= 0, got {keep_rows}")
        self.rows, self.tree_len, self.keep_rows, self.copy_in_graph = rows, tree_len, keep_rows, copy_in_graph
        cuda = torch.device(device).type == "cuda"
        ints = 1 + 4 * rows + (1 + keep_rows if keep_rows else 0) + 1
        self.device_bytes = torch.zeros(8 * ints + rows * tree_len, dtype=torch.uint8, device=device)
        self.packed = self.device_bytes[:8 * ints].view(torch.long)
        self.prefix, self.ids = self.packed[:1], self.packed[1:1 + rows]
        self.positions = self.packed[1 + rows:1 + 2 * rows]
        self.slots = self.packed[1 + 2 * rows:1 + 3 * rows]
        self.parents = self.packed[1 + 3 * rows:1 + 4 * rows]
        self.keep_dst = self.packed[1 + 4 * rows:2 + 4 * rows] if keep_rows else self.packed[:0]
        self.keep_src = self.packed[2 + 4 * rows:ints - 1] if keep_rows else self.packed[:0]
        self.ticket = self.packed[ints - 1:]  # [1]: the number of the load, for a readback graph's host wait
        self.keep_src.fill_(-1)
        self.mask = self.device_bytes[8 * ints:].view(torch.bool).view(rows, tree_len)
        self._host = torch.zeros(self.device_bytes.numel(), dtype=torch.uint8, pin_memory=cuda)
        host = self._host.numpy()
        self._host_ints, self._host_mask = host[:8 * ints].view(np.int64), host[8 * ints:]
        if keep_rows:
            self._host_ints[2 + 4 * rows:ints - 1] = -1
        self._copied = torch.cuda.Event() if cuda and not copy_in_graph else None  # the last copy out of _host
        self.loads = 0  # loads so far: the ticket of the last one

    def load(self, token_ids: torch.Tensor, positions: torch.Tensor, tree_slots: torch.Tensor, prefix_len: int,
             tree_mask: torch.Tensor) -> None:
        """Load host tensors (parent rows -1)."""
        rows = (self.rows,)
        if token_ids.shape != rows or positions.shape != rows or tree_slots.shape != rows or \
                tree_mask.shape != (self.rows, self.tree_len):
            raise ValueError(f"StepGraph.replay: captured for {self.rows} rows x {self.tree_len} tree slots, got "
                             f"token_ids {tuple(token_ids.shape)}, positions {tuple(positions.shape)}, tree_slots "
                             f"{tuple(tree_slots.shape)}, tree_mask {tuple(tree_mask.shape)}")
        self._stage(prefix_len, token_ids.numpy(), positions.numpy(), tree_slots.numpy(), -1,
                    tree_mask.numpy().reshape(-1).view(np.uint8), None)

    def load_inputs(self, inp: StepInputs, prefix_len: int, keep: tuple[int, list[int]] | None = None) -> None:
        """Load a `runtime.tree.StepInputs` from its host lists and mask bytes; `keep` = (destination slot, source
        slots): a KV compaction the step applies before its forward (needs keep_rows >= len(sources))."""
        if inp.rows != self.rows or inp.max_len != self.tree_len:
            raise ValueError(f"StepGraph.load_inputs: captured for {self.rows} rows x {self.tree_len} tree slots, "
                             f"got {inp.rows} rows x {inp.max_len}")
        if keep is not None and len(keep[1]) > self.keep_rows:
            raise ValueError(f"StepGraph.load_inputs: a compaction of {len(keep[1])} slots, the graph was captured "
                             f"for at most {self.keep_rows} (keep_rows)")
        self._stage(prefix_len, inp.ids, inp.pos, inp.slots, inp.parent_rows,
                    np.frombuffer(inp.mask_flat, dtype=np.uint8), keep)

    def _stage(self, prefix_len: int, ids: Any, positions: Any, slots: Any, parents: Any, mask: np.ndarray,
               keep: tuple[int, list[int]] | None) -> None:
        if self._copied is not None:
            self._copied.synchronize()  # the previous step's copy has read the host buffer
        r, ints = self.rows, self._host_ints
        ints[0] = prefix_len
        ints[1:1 + r] = ids
        ints[1 + r:1 + 2 * r] = positions
        ints[1 + 2 * r:1 + 3 * r] = slots
        ints[1 + 3 * r:1 + 4 * r] = parents
        if self.keep_rows:  # the compaction's sources, -1-padded (kv_compact skips them); none: all -1
            n = 0 if keep is None else len(keep[1])
            ints[1 + 4 * r] = 0 if keep is None else keep[0]
            ints[2 + 4 * r:2 + 4 * r + n] = [] if keep is None else keep[1]
            ints[2 + 4 * r + n:-1] = -1
        self.loads += 1
        ints[-1] = self.loads
        self._host_mask[:] = mask
        if self.copy_in_graph:  # the replay copies it (capture_copy)
            return
        self.device_bytes.copy_(self._host, non_blocking=self._copied is not None)
        if self._copied is not None:
            self._copied.record()

    def capture_defaults(self) -> None:
        """The inputs of the capture-time forwards, on the device and in the host buffer (which the step's first node
        copies): tree slots 0..rows - 1, so their K/V writes land in slots [0, rows) before any prefill,
        and an identity mask."""
        r = self.rows
        self.slots.copy_(torch.arange(r))
        self.mask[:, :r] = torch.eye(r, dtype=torch.bool)
        self._host_ints[1 + 2 * r:1 + 3 * r] = np.arange(r)
        self._host_mask.reshape(r, self.tree_len)[:, :r] = np.eye(r, dtype=np.uint8)

    def capture_copy(self) -> None:
        """`copy_in_graph`: queue the host buffer's copy to the device (called inside the step the graph captures, so
        every replay copies what the host staged last)."""
        if not self.copy_in_graph:
            raise ValueError("StepBuffers.capture_copy: these buffers copy at each load (copy_in_graph=False)")
        self.device_bytes.copy_(self._host, non_blocking=self._host.is_pinned())


class ReplayTimer:
    """`trace.graph_events`: CUDA events and host-clock marks around one graph step, shared by the target's
    verify and the draft's expansion. The step calls, in order:

        begin()      it starts: the `begin` event, the host mark `start`; the previous step is forgotten
        loading()    its inputs are built (host mark `ready`, e.g. "inputs" or "planned"), the `load` event
        loaded()     its input copies are queued: the `copied` event and host mark
        launched()   its replay is queued: the `end` event, the `launched` host mark; the step counts as timed

    After the step's outputs were read (which synchronised), `device_split()` gives device seconds: `inputs_s`
    (begin to load: the host building the inputs, or earlier work still queued), `copies_s`, `replay_s` (the
    copies' end to the graph's end, launch latency included); `relative_marks()` the host marks in seconds
    after `start`. Events cost ~2 us of host time each: only runs with trace.graph_events build a timer.
    """

    def __init__(self, ready: str) -> None:
        self.ready = ready
        self._ev = {k: torch.cuda.Event(enable_timing=True) for k in ("begin", "load", "copied", "end")}
        self.marks: dict[str, float] = {}  # host clock (time.perf_counter) of the last timed step
        self.timed = False

    def begin(self) -> None:
        self.timed = False
        self._ev["begin"].record()
        self._start = time.perf_counter()

    def loading(self) -> None:
        self._ready = time.perf_counter()
        self._ev["load"].record()

    def loaded(self) -> None:
        self._ev["copied"].record()
        self._copied = time.perf_counter()

    def launched(self) -> None:
        self._ev["end"].record()
        self.marks = {"start": self._start, self.ready: self._ready, "copied": self._copied,
                      "launched": time.perf_counter()}
        self.timed = True

    def device_split(self) -> dict[str, float] | None:
        """Device seconds of the last timed step (see the class), else None; waits for its replay."""
        if not self.timed:
            return None
        ev = self._ev
        ev["end"].synchronize()
        return {"inputs_s": ev["begin"].elapsed_time(ev["load"]) * 1e-3,
                "copies_s": ev["load"].elapsed_time(ev["copied"]) * 1e-3,
                "replay_s": ev["copied"].elapsed_time(ev["end"]) * 1e-3}

    def relative_marks(self) -> dict[str, float]:
        """`<mark>_s`: seconds after the step's start that it built its inputs, queued its copies, its replay."""
        return {f"{k}_s": self.marks[k] - self.marks["start"] for k in (self.ready, "copied", "launched")}


READBACK_CHECK_S = 0.05
"""`wait_for_ticket`: after this long spinning, also ask whether the replay's stream is done (a stream that is idle
with no ticket, or a CUDA error, then raises instead of spinning on)."""
READBACK_TIMEOUT_S = 600.0
"""`wait_for_ticket`: give up after this long (a replay that runs but never finishes)."""


def wait_for_ticket(flag: np.ndarray, ticket: int, stream_done: Callable[[], bool], what: str,
                    timeout_s: float = READBACK_TIMEOUT_S) -> None:
    """Spin until `flag[0]` (host memory a graph's last copy writes) equals `ticket`: a readback graph's outputs
    have then reached the host (`StepGraph.host_outputs`). No CUDA call while it spins; after `READBACK_CHECK_S`,
    every ~1,000 spins `stream_done()` (e.g. `torch.cuda.Stream.query`, which also raises a CUDA error) tells a
    replay still running from one that ended without the copy: the latter raises RuntimeError naming `what`, as
    does a wait beyond `timeout_s` (TimeoutError)."""
    if flag[0] == ticket:
        return
    start, spins = time.perf_counter(), 0
    while flag[0] != ticket:
        spins += 1
        if spins % 1024:
            continue
        waited = time.perf_counter() - start
        if waited > timeout_s:
            raise TimeoutError(f"{what}: waited {waited:.1f} s for the replay's read-back (ticket {ticket}, the "
                               f"host holds {int(flag[0])})")
        if waited > READBACK_CHECK_S and stream_done() and flag[0] != ticket:
            raise RuntimeError(f"{what}: the stream is idle but the read-back holds ticket {int(flag[0])}, expected "
                               f"{ticket}: the replay's copy to the host did not arrive")


VERDICTS = (None, "argmax", "greedy")
"""`StepGraph`'s `verdict` options: nothing, the rows' argmax, or the argmax and the greedy tree verdict."""


def verdict_outputs(verdict: str, logits: torch.Tensor, ids: torch.Tensor, parents: torch.Tensor) -> tuple:
    """A verify graph's outputs under `verdict` ("argmax" | "greedy", `StepGraph`): (logits, the rows' argmax) and,
    for "greedy", the verdict of `kernels.greedy_verify` over all rows (padding rows have parent -1: never accepted)
    packed as [rows + 2] int64: the path padded with -1, the accepted count, the bonus."""
    argmax = logits.argmax(dim=-1)
    if verdict == "argmax":
        return logits, argmax
    from kernels import greedy_verify

    path, count, bonus = greedy_verify(argmax, ids, parents, ids.shape[0])
    return logits, argmax, torch.cat([path, count.reshape(1), bonus.reshape(1)])


def readback_outputs(out: Any, verdict: bool) -> tuple[torch.Tensor, ...]:
    """What a `StepGraph` with a head or a verdict mirrors on the host: a head's outputs, or a verdict graph's outputs
    but the logits."""
    outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
    if not all(isinstance(t, torch.Tensor) for t in outs):
        raise ValueError(f"StepGraph readback: the step's outputs must be tensors, got {[type(t) for t in outs]}")
    return outs[1:] if verdict else outs


def require_capturable(device: torch.device, attn: AttentionBackend, field: str, why: str = "") -> None:
    """Refuse a capture the runtime cannot make: off CUDA, or without the Triton attention backend (`why` says what
    else would break); errors name `field`."""
    if device.type != "cuda":
        raise ValueError(f"{field}: CUDA graphs need a CUDA device, the model is on {device}")
    if getattr(attn, "name", "") != "triton":
        raise ValueError(f"{field}: needs the Triton backend (kernels=graphs){why}")


def warm_up(step: Callable[[], Any], device: torch.device, times: int) -> Any:
    """Run `step` `times` times on a side stream joined back to the current one, before a capture of it: JIT
    compilation, cuBLAS workspaces and NCCL communicators are made there, not inside the graph. Returns the last
    output."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    out = None
    with torch.cuda.stream(side):
        for _ in range(times):
            out = step()
    torch.cuda.current_stream(device).wait_stream(side)
    return out


@dataclass(frozen=True)
class StepSpec:
    """What one captured decode step computes: `StepGraph`'s one description of its step (checked when built).

    A replay reads, from `StepBuffers`: prefix_len [1], token ids / positions / tree slots / parent rows [rows] int64,
    the tree mask [rows, tree_len] bool, and with `keep_rows` a KV compaction's destination [1] and sources
    [keep_rows] int64 (-1-padded). It returns the logits [rows, vocab] fp32, `head(logits)`, or with a verdict the
    tuple of `verdict_outputs`.
    """

    rows: int  # tokens per step: the [rows] inputs and the logits' [rows, vocab]
    tree_len: int  # tree slots the step attends to: mask [rows, tree_len]; tree_len >= rows
    keep_rows: int = 0  # a KV compaction in front of the forward, sources [keep_rows] (`load_inputs`'s keep); 0: none
    chain: bool = False  # greedy autoregressive hand-over (rows 1, no head, no keep): argmax -> ids [1], prefix + 1
    verdict: str | None = None  # VERDICTS: + argmax [rows] int64; "greedy" + the verdict packed [rows + 2] int64
    head: Callable[[torch.Tensor], Any] | None = None  # logits [rows, vocab] -> tensors (draft: top-k [rows, k] x 2)

    def __post_init__(self) -> None:
        if self.rows < 1 or self.tree_len < self.rows or self.keep_rows < 0:
            raise ValueError(f"StepSpec: need 1 <= rows <= tree_len and keep_rows >= 0, got rows {self.rows}, "
                             f"tree_len {self.tree_len}, keep_rows {self.keep_rows}")
        if self.chain and (self.rows != 1 or self.head is not None or self.keep_rows):
            raise ValueError(f"StepSpec: chain=True needs rows 1, no head and no keep_rows (an autoregressive step), "
                             f"got rows {self.rows}, head {self.head}, keep_rows {self.keep_rows}")
        if self.verdict not in VERDICTS or (self.verdict is not None and (self.chain or self.head is not None)):
            raise ValueError(f"StepSpec: verdict must be one of {VERDICTS} and needs no chain and no head, got "
                             f"verdict {self.verdict!r}, chain {self.chain}, head {self.head}")

    @property
    def readback(self) -> bool:
        """Whether the graph copies small outputs (a head's, a verdict's) to pinned host memory after its forward."""
        return self.head is not None or self.verdict is not None


class StepGraph:
    """A model forward over `spec.rows` tokens with a [rows, tree_len] tree mask, captured once, replayed per step.

    `spec` (`StepSpec`) says what the step computes:
    - the graph's first node copies the inputs a load staged in pinned host memory (`StepBuffers`); a load first
      waits for the previous replay (its read-back, or an event). A `chain` graph's loads copy the inputs themselves
      instead (its chained replays must not copy the host buffer again);
    - `keep_rows`: a KV compaction of up to this many slots in front of the forward (`load_inputs`'s `keep`);
    - `chain`: also the greedy hand-over to the next autoregressive step (see the module docstring and
      `replay_chained`);
    - `verdict` (a tree verify's graph): also what its verdict reads, so that only a small read-back is left after
      the replay. "argmax": (logits, the rows' argmax: an oracle run's placeholder token); "greedy": (logits,
      argmax, the greedy verdict of `kernels.greedy_verify` over the loaded token ids and parent rows; padding rows
      have parent -1, so they are never accepted);
    - with a head or a verdict (`readback`) the graph ends by copying those outputs (a verdict's: all but the
      logits) into pinned host memory, then the load's ticket; `host_outputs` spins on that ticket and returns numpy
      views: no stream sync, no read-back call, no torch op on the host after the replay.
    """

    WARMUP = 2

    def __init__(self, model: torch.nn.Module, cache: KVCache, attn: AttentionBackend, spec: StepSpec, *,
                 pool: Any = None) -> None:
        """Capture the step of `spec` on `cache`'s device (`pool`: a CUDA graph memory pool to share)."""
        device = cache.device
        require_capturable(device, attn, "kernels.cuda_graphs",
                           " (the reference attention reads the prefix length on the host)")
        self.spec, self.model, self.cache, self.attn, self.device = spec, model, cache, attn, device
        self.rows, self.tree_len, self.chained, self.readback = spec.rows, spec.tree_len, spec.chain, spec.readback
        # the graph reads these; a chained graph's loads copy them at once
        self.inputs = StepBuffers(spec.rows, spec.tree_len, device, spec.keep_rows, copy_in_graph=not spec.chain)
        self.inputs.capture_defaults()
        self._host_out: tuple[torch.Tensor, ...] = ()  # readback: pinned host mirrors of the outputs
        self._host_np: tuple[np.ndarray, ...] = ()
        self._host_ticket = torch.zeros(1, dtype=torch.long, pin_memory=True) if self.readback else None
        self._flag = self._host_ticket.numpy() if self.readback else None
        self._done = torch.cuda.Event() if not spec.chain and not self.readback else None
        self._inflight = False  # a replay queued and not known to have read the host buffer (not chained)
        self._capture(pool)
        # host_outputs' liveness check: the stream the runtime replays on (the current one, as at capture)
        self._stream_done = torch.cuda.current_stream(device).query
        self._what = f"StepGraph ({spec.rows} rows x {spec.tree_len})"

    def _step(self) -> Any:
        """The step the graph captures (run eagerly by the warm-up): [input copy,] [compaction,] forward, then the
        chained hand-over, the verdict or the head."""
        spec, buf = self.spec, self.inputs
        if not spec.chain:
            buf.capture_copy()
        if spec.keep_rows:  # the owed compaction first (all sources -1: nothing moves)
            kv_compact(self.cache.kv, buf.keep_src, buf.keep_dst)
        meta = AttnMeta(positions=buf.positions, write_slots=buf.prefix + buf.slots,
                        prefix_len=buf.prefix, tree_len=spec.tree_len, tree_mask=buf.mask)
        logits = self.model(buf.ids, meta, self.cache, self.attn)
        if spec.chain:  # the next step's input: this step's greedy token, one slot and position further
            torch.argmax(logits, dim=-1, out=buf.ids)
            buf.packed[0:3:2].add_(1)  # [prefix, id, position, slot, parent]: prefix and position
        if spec.verdict is not None:
            return verdict_outputs(spec.verdict, logits, buf.ids, buf.parents)
        return spec.head(logits) if spec.head is not None else logits

    def _capture(self, pool: Any) -> None:
        """Warm the step up, then capture it (with a readback: its outputs' copies, then the ticket's, last)."""
        verdict = self.spec.verdict is not None
        with torch.no_grad():
            out = warm_up(self._step, self.device, self.WARMUP)
            if self.readback:
                mirrored = readback_outputs(out, verdict)
                self._host_out = tuple(torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in mirrored)
                self._host_np = tuple(h.numpy() for h in self._host_out)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, pool=pool):
                self.out = self._step()
                if self.readback:  # the outputs, then the ticket: stream order puts the ticket last on the host
                    for h, t in zip(self._host_out, readback_outputs(self.out, verdict)):
                        h.copy_(t, non_blocking=True)
                    self._host_ticket.copy_(self.inputs.ticket, non_blocking=True)
        torch.cuda.synchronize(self.device)

    def replay(self, token_ids: torch.Tensor, positions: torch.Tensor, tree_slots: torch.Tensor, prefix_len: int,
               tree_mask: torch.Tensor) -> Any:
        """Run the step on new inputs (CPU tensors from runtime.tree); returns the graph's static outputs.

        The outputs are overwritten by the next replay: read them (or copy) before that.
        """
        self.load(token_ids, positions, tree_slots, prefix_len, tree_mask)
        return self.launch()

    def load(self, token_ids: torch.Tensor, positions: torch.Tensor, tree_slots: torch.Tensor, prefix_len: int,
             tree_mask: torch.Tensor) -> None:
        """`replay`'s first half: copy the step's inputs (host tensors) into the graph's buffers."""
        self._finish()
        self.inputs.load(token_ids, positions, tree_slots, prefix_len, tree_mask)

    def load_inputs(self, inp: StepInputs, prefix_len: int, keep: tuple[int, list[int]] | None = None) -> None:
        """`load` of a `runtime.tree.StepInputs` from its host lists and mask bytes (no torch op on the host), with
        an optional KV compaction (destination slot, source slots) the replay applies first (`keep_rows`)."""
        self._finish()
        self.inputs.load_inputs(inp, prefix_len, keep)

    def _finish(self) -> None:
        """Wait until the last replay has copied the host buffer (before a load overwrites it)."""
        if not self._inflight:
            return
        if self._flag is not None:
            self.host_outputs()
        else:
            self._done.synchronize()
        self._inflight = False

    def host_outputs(self) -> tuple[np.ndarray, ...]:
        """A head or verdict graph: wait (spinning, `wait_for_ticket`) until the last replay's outputs reached the host
        and return them as numpy views of pinned memory, in output order (a verdict graph: all but the logits). Valid
        until the next replay."""
        if self._flag is None:
            raise ValueError("StepGraph.host_outputs: this graph has no head or verdict to read back (its logits stay "
                             "on the device)")
        wait_for_ticket(self._flag, self.inputs.loads, self._stream_done, self._what)
        self._inflight = False
        return self._host_np

    @property
    def keeps(self) -> bool:
        """Whether the graph applies a KV compaction in front of its forward (captured with keep_rows > 0)."""
        return self.inputs.keep_rows > 0

    def launch(self) -> Any:
        """`replay`'s second half: queue the graph on the inputs `load` copied; returns its static outputs."""
        self.graph.replay()
        if not self.chained:
            self._inflight = True
            if self._done is not None:
                self._done.record()
        return self.out

    def replay_chained(self) -> torch.Tensor:
        """A chained graph (`StepSpec.chain`): the next autoregressive step, fed on the device by the previous replay
        (which must have been a `replay` of this graph or a `replay_chained`). Queues it without waiting; returns
        the [1] int64 device buffer that holds this step's greedy token once it ran (overwritten by the next)."""
        if not self.chained:
            raise ValueError("StepGraph.replay_chained: this graph was captured without chain=True")
        self.graph.replay()
        return self.inputs.ids

    @property
    def parents(self) -> torch.Tensor:
        """[rows] int64 device buffer: the parent rows of the inputs last loaded by `load_inputs` (-1 after a
        tensor `load`). Valid until the next load."""
        return self.inputs.parents

    @property
    def token_ids(self) -> torch.Tensor:
        """[rows] int64 device buffer: the token ids last loaded (a chained replay overwrites them)."""
        return self.inputs.ids

    @property
    def next_ids(self) -> torch.Tensor:
        """A chained graph's [1] int64 device buffer: the greedy token of the last replay."""
        return self.inputs.ids


PREFILL_MIN_BUCKET = 16
"""The smallest prefill bucket (kernels.prefill_graph): a prefill of n tokens replays the graph of the next power of
two >= max(n, PREFILL_MIN_BUCKET)."""


def prefill_bucket(n: int, capacity: int) -> int | None:
    """The captured length a prefill of `n` tokens replays (a power of two >= n and >= PREFILL_MIN_BUCKET), or None if
    that exceeds `capacity` (the cache's slots): such a prompt is prefilled eagerly."""
    if n < 1:
        raise ValueError(f"prefill_bucket: a prefill of {n} tokens")
    bucket = max(PREFILL_MIN_BUCKET, 1 << (n - 1).bit_length())
    return bucket if bucket <= capacity else None


class PrefillGraphs:
    """Prompt prefills as CUDA-graph replays (kernels.prefill_graph), one graph per length bucket (`prefill_bucket`).

    The eager prefill is host-bound on the H200 host: ~0.1 ms of host per Triton launch, 15-25 ms per SmolLM2-135M
    prompt of 37-512 tokens against ~1 ms of kernels (bench/prefill_probe.py). A bucket's graph is captured on its
    first prompt (warm-up forwards on a side stream, then the capture; both write K/V at slots [0, bucket), which the
    replay then overwrites) and replayed for every later prompt of that bucket: one host -> device copy of the
    token ids, then the replay.

    Padding: the prompt's n tokens take rows [0, n) (slots and positions 0..n-1, causal), the padding rows (token 0)
    the rows after them. Causal masking keeps every real row from seeing a padding row, so the real rows' K/V are
    those of an n-token prefill up to the kernels' numerics at the bucket's row count. The padding rows write K/V at
    slots [n, bucket), beyond the prefix: every later step writes its own tree slots there before it attends to them,
    and nothing reads a slot past the prefix that its own step did not write. The graph stops after the last layer's
    attention (`Transformer.forward(logits=False)`).

    After the first capture one eager prefill runs (`eager_warmup`), and every replay is waited for (`drain`): the
    decode steps after replayed prefills ran ~5% slower without either (docs/LOG.md).

    `eager=True` (tests, any device): the same padded forward per bucket, run eagerly instead of captured.
    """

    WARMUP = 2
    drain = True
    """Wait for the replay before `run` returns: chained autoregressive steps queued straight behind the prefill's
    replay each ran ~5% slower until the stream next drained (`bench/prefill_probe.py --decode-check`; its cause
    below the runtime is not known). Draining costs about one step launch per request. The probe sets it False to
    reproduce."""
    warm_up = True
    """Run `eager_warmup` right after the first capture (the probe sets it False to reproduce what it avoids)."""

    def __init__(self, model: torch.nn.Module, cache: KVCache, attn: AttentionBackend, *, eager: bool = False) -> None:
        """Graphs of `model` over `cache` (captured lazily, per bucket)."""
        device = cache.device
        if not eager:
            require_capturable(device, attn, "kernels.prefill_graph")
        self.model, self.cache, self.attn, self.device, self.eager = model, cache, attn, device, eager
        self.capacity = cache.capacity
        # the last copy out of a pinned buffer (its next write waits for it)
        self._copied = torch.cuda.Event() if not eager else None
        # bucket -> (replay, device ids, host ids, the step's AttnMeta): the graph reads the ids' and the meta's device
        # memory, so both live as long as the graph
        self._buckets: dict[int, tuple[Callable[[], None], torch.Tensor, torch.Tensor, AttnMeta]] = {}
        self.captures = 0  # buckets captured so far
        self.replays = 0  # prefills run by a bucket's graph

    def _bucket(self, bucket: int) -> tuple[Callable[[], None], torch.Tensor, torch.Tensor, AttnMeta]:
        """(replay, device ids [bucket], host ids [bucket], meta) of a bucket: its padded forward, captured (or eager).
        The caller keeps all four: a replay reads `ids` and the meta's positions, slots and mask where they were."""
        ids = torch.zeros(bucket, dtype=torch.long, device=self.device)
        host = torch.zeros(bucket, dtype=torch.long, pin_memory=not self.eager)
        meta = AttnMeta.causal(0, bucket, self.device)

        def step() -> None:
            with torch.no_grad():
                self.model(ids, meta, self.cache, self.attn, logits=False)

        if self.eager:
            return step, ids, host, meta
        warm_up(step, self.device, self.WARMUP)  # JIT compilation at this row count
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        torch.cuda.synchronize(self.device)
        self.captures += 1
        return graph.replay, ids, host, meta

    def prepare(self, lengths: list[int]) -> None:
        """Capture now the buckets of prefills of these token counts (the runtime passes its workload's prompts before
        the timed region, as it captures its decode steps when it builds its workers); others still capture on first
        use."""
        for n in lengths:
            bucket = prefill_bucket(n, self.capacity) if n >= 1 else None
            if bucket is not None:
                self._entry(bucket)

    def eager_warmup(self, tokens: int = PREFILL_MIN_BUCKET) -> None:
        """One eager prefill (`runtime.tree_cache.prefill`) of `tokens` zeros on the current stream (its K/V at slots
        [0, tokens), overwritten by the next prompt's prefill), run once, after the first capture (`warm_up`): in a
        worker whose prefills had only ever been replayed, every later chained autoregressive step ran ~5% slower;
        after one eager prefill they run at full speed (`bench/prefill_probe.py --decode-check --replay-first`; which
        lazily made state the eager forward sets up is not known)."""
        with torch.no_grad():
            prefill(self.model, self.cache, self.attn, [0] * (tokens + 1), self.device)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _entry(self, bucket: int) -> tuple[Callable[[], None], torch.Tensor, torch.Tensor, AttnMeta]:
        """The bucket's (replay, ids, host ids, meta), captured on first use."""
        entry = self._buckets.get(bucket)
        if entry is None:
            entry = self._buckets[bucket] = self._bucket(bucket)
            if self.warm_up and not self.eager and self.captures == 1:  # the first capture
                self.eager_warmup()
        return entry

    def run(self, tokens: list[int]) -> bool:
        """Prefill `tokens` (slots and positions 0..n-1) by a replay; False (nothing done) if no bucket fits the
        cache, and the caller prefills eagerly."""
        bucket = prefill_bucket(len(tokens), self.capacity)
        if bucket is None:
            return False
        replay, ids, host, _ = self._entry(bucket)
        if self._copied is not None:
            self._copied.synchronize()  # long done in practice: a request's steps synchronise before the next prefill
        view = host.numpy()
        view[: len(tokens)] = tokens
        view[len(tokens):] = 0
        ids.copy_(host, non_blocking=True)
        if self._copied is not None:
            self._copied.record()
        replay()
        if self.drain and not self.eager:
            torch.cuda.current_stream(self.device).synchronize()
        self.replays += 1
        return True
