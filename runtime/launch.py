"""Start the ranks of a run and run `fn(ctx, cfg)` on each: under torchrun / deepspeed, or by spawning them.

The only runtime module that reads the environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE /
LOCAL_SIZE, and MASTER_ADDR / MASTER_PORT through the `env://` rendezvous); everything below it receives a
`ParallelContext` (runtime/parallel.py) and the frozen `ExperimentConfig`.

Two ways in:
- **Under a launcher** (`torchrun --nproc_per_node N script.py`, or `deepspeed --num_gpus N script.py`, which
  also sets LOCAL_SIZE): RANK and WORLD_SIZE are in the environment; this process is one rank. `launch`
  returns `fn`'s result on world rank 0 and None on the others. A rank whose `fn` raises logs the traceback
  and leaves with `os._exit(1)` at once (a normal interpreter exit can block in process-group destructors
  while peers still wait); the launcher's agent then stops the sibling ranks.
- **Spawning** (plain `python script.py`): `launch` starts `cfg.parallel.world_size` processes (start method
  spawn; rendezvous through a TCP store that this parent hosts on a free port of 127.0.0.1), gloo on CPU
  and NCCL on GPU, and watches them. A single-rank run executes in this process instead (no spawn).

Faults: in spawn mode the parent polls the children and a result queue. On the first failure (an exception
reported by a rank, or a rank that died without reporting, e.g. SIGKILL or `os._exit`), it waits up to
`_GRACE_S` for the other ranks' reports, so it can blame the root cause rather than a peer that only saw a
closed connection, terminates every remaining child, and raises `RuntimeError("rank R (role) failed: ...")`.
Every wait inside the ranks is bounded (`parallel.timeout_s`), and each child exits if its parent dies.

Communication defaults set here (not in library code; existing values win): NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 (NVLink multicast off), and
TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING=false (see `COMM_ENV_DEFAULTS`).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import pickle
import queue as queue_mod
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conf.schema import ExperimentConfig, ParallelConfig
from runtime.parallel import (
    ParallelContext,
    check_world_size,
    close_parallel,
    group_size_bound,
    init_parallel,
    resolve_device,
    role_of,
)

log = logging.getLogger(__name__)

RankFn = Callable[[ParallelContext, ExperimentConfig], Any]

COMM_ENV_DEFAULTS = {
    # NVLink multicast off: on the shared H200 hosts it can take the GPUs out of service.
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    # The leader group carries only the leaders' messages, so that its point-to-point operations are
    # serialised on one stream (eager NCCL init) is intended; silence the per-op warning.
    "TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING": "false",
}
_POLL_S = 0.05  # how often the spawn parent checks its children
_REPORT_WAIT_S = 0.2  # how long a rank may be gone before its report arrives, before it counts as silent
_GRACE_S = 1.0  # after a first failure, how long to collect other ranks' reports before choosing the cause
_TERM_WAIT_S = 3.0  # SIGTERM -> SIGKILL escalation delay
_PARENT_CHECK_S = 1.0  # how often a spawned child checks that its parent is alive
# Error texts of ranks that failed only because a peer died or hung (used to find the root cause).
_PEER_FAILURE_TEXTS = ("connection closed", "connection reset", "pair closure", "broken pipe", "nothing arrived",
                       "timed out", "failed after", "socket", "nccl communicator was aborted")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during `launch`: every rank is stopped; `partial` holds what rank 0 reported so far (`report_partial`),
    in order."""

    def __init__(self, partial: list[Any]) -> None:
        super().__init__("interrupted")
        self.partial = partial


_PARTIAL: dict[str, Any] = {"queue": None, "local": []}


def report_partial(item: Any) -> None:
    """On rank 0: hand `item` (e.g. a finished request's output) to the launching process at once, so a Ctrl-C
    later still has it (`Interrupted.partial`). Other ranks: nothing."""
    if _PARTIAL["queue"] is not None:
        _PARTIAL["queue"].put(("partial", 0, pickle.dumps(item)))
    else:
        _PARTIAL["local"].append(item)


def launch(fn: RankFn, cfg: ExperimentConfig, world_size: int | None = None) -> Any:
    """Run `fn(ctx, cfg)` on every rank of the split `cfg.parallel`; return world rank 0's result.

    Args:
        fn: a module-level function (spawned ranks import it by name); its result must pickle.
        cfg: the validated, frozen configuration.
        world_size: ranks to start in spawn mode; defaults to `cfg.parallel.world_size`. A different value
            is an error (useful to test the check); under a launcher, WORLD_SIZE decides.

    Returns:
        `fn`'s result on world rank 0; None on the other ranks (launcher mode only).

    Raises:
        ValueError: the split does not match the ranks, or there are not enough GPUs.
        RuntimeError: a rank failed ("rank R (role) failed: ..."), in spawn or single-rank mode.
    """
    for key, value in COMM_ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return _run_under_launcher(fn, cfg)
    n = cfg.parallel.world_size if world_size is None else world_size
    check_world_size(cfg.parallel, n)
    resolve_device(cfg.parallel.device, n, share=group_size_bound(cfg.parallel))  # before spawning: GPUs missing
    _PARTIAL["local"] = []
    try:
        if n == 1:
            return _run_in_process(fn, cfg)
        return _spawn(fn, cfg, n)
    except KeyboardInterrupt as e:
        raise Interrupted(getattr(e, "partial", _PARTIAL["local"])) from None


# -- launcher mode ------------------------------------------------------------------------------------------


def _run_under_launcher(fn: RankFn, cfg: ExperimentConfig) -> Any:
    env = os.environ
    rank, world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
    local_rank = int(env.get("LOCAL_RANK", rank))
    local_world = int(env.get("LOCAL_WORLD_SIZE", env.get("LOCAL_SIZE", world_size)))
    # DeepSpeed reads LOCAL_SIZE; torchrun only sets LOCAL_WORLD_SIZE.
    env.setdefault("LOCAL_SIZE", str(local_world))
    launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "deepspeed" if "CROSS_RANK" in env else "env"
    role = role_of(cfg.parallel, rank)
    configure_logging(rank, role, is_leader=rank in (0, cfg.parallel.target_gpus))
    _limit_cpu_threads(cfg.parallel, local_world)
    try:
        ctx = init_parallel(cfg.parallel, rank, world_size, "env://", local_rank=local_rank,
                            local_world_size=local_world, extra={"launcher": launcher})
        result = fn(ctx, cfg)
        close_parallel(ctx)
    except BaseException as e:  # noqa: BLE001 - any failure must end this rank promptly
        log.error("rank %d (%s) failed: %s: %s\n%s", rank, role, type(e).__name__, e, traceback.format_exc())
        _flush_std()
        os._exit(1)
    return result if rank == 0 else None


# -- single rank, in process --------------------------------------------------------------------------------


def _run_in_process(fn: RankFn, cfg: ExperimentConfig) -> Any:
    if dist.is_initialized():
        raise RuntimeError("launch: a process group already exists in this process")
    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=cfg.parallel.timeout_s))
    ctx = None
    try:
        ctx = init_parallel(cfg.parallel, 0, 1, store=store, extra={"launcher": "in-process"})
        result = fn(ctx, cfg)
    except Exception as e:
        raise RuntimeError(f"rank 0 ({role_of(cfg.parallel, 0)}) failed: {type(e).__name__}: {e}") from e
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return result


# -- spawn mode ---------------------------------------------------------------------------------------------


# Failure categories, most likely root cause first.
_DIED = 0  # died without reporting (signal, os._exit): nothing else explains it
_RAISED = 1  # reported an exception of its own
_PEER = 2  # reported an error that looks like a consequence of another rank's failure (closed connection, timeout)
_STOPPED = 3  # terminated by the launcher after another rank failed


@dataclass
class _Failure:
    rank: int
    role: str
    summary: str
    detail: str = ""
    category: int = _RAISED
    order: int = 0


def _spawn(fn: RankFn, cfg: ExperimentConfig, world_size: int) -> Any:
    try:
        pickle.dumps(fn)
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        raise TypeError(f"launch: fn must be a module-level function (spawned ranks import it by name): {e}") from e
    store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=cfg.parallel.timeout_s))
    mpc = mp.get_context("spawn")
    results: Any = mpc.Queue()
    level = logging.getLogger().getEffectiveLevel()
    procs = [
        mpc.Process(target=_child_main, name=f"rank{r}",
                    args=(fn, cfg, r, world_size, store.port, results, os.getpid(), level))
        for r in range(world_size)
    ]
    partial: list[Any] = []
    try:
        for p in procs:
            p.start()
        payload = _monitor(procs, results, cfg, partial)
    except KeyboardInterrupt:
        _collect(_drain(results), {}, {}, cfg, partial)
        raise Interrupted(partial) from None
    finally:
        _stop(procs)
        results.close()
        results.cancel_join_thread()
        del store
    return pickle.loads(payload)


def _monitor(procs: list[Any], results: Any, cfg: ExperimentConfig, partial: list[Any]) -> bytes:
    """Wait for every child; return rank 0's pickled result or raise naming the failing rank."""
    done: dict[int, bytes] = {}
    failures: dict[int, _Failure] = {}
    exited_at: dict[int, float] = {}  # when the parent first saw a rank gone without a report
    first_failure_at: float | None = None
    while True:
        _collect(_drain(results), done, failures, cfg, partial)
        now = time.monotonic()
        for rank, p in enumerate(procs):
            if p.exitcode is None or rank in done or rank in failures:
                continue
            # A report written just before exiting may still be in the pipe: look again before blaming.
            if now - exited_at.setdefault(rank, now) > _REPORT_WAIT_S:
                failures[rank] = _silent_failure(rank, p.exitcode, len(failures), cfg)
        if failures:
            first_failure_at = first_failure_at or now
            if all(p.exitcode is not None for p in procs) or now - first_failure_at > _GRACE_S:
                _stop(procs)
                _collect(_drain(results), done, failures, cfg, partial)
                for rank, p in enumerate(procs):  # every rank has exited now: the silent ones are known
                    if rank not in done and rank not in failures:
                        failures[rank] = _silent_failure(rank, p.exitcode, len(failures), cfg)
                raise RuntimeError(_failure_message(failures))
        elif len(done) == len(procs):
            for p in procs:  # they exit right after reporting
                p.join(_TERM_WAIT_S)
            return done[0]


def _collect(items: list[tuple[Any, ...]], done: dict[int, bytes], failures: dict[int, _Failure],
             cfg: ExperimentConfig, partial: list[Any] | None = None) -> None:
    for item in items:
        kind, rank = item[0], item[1]
        if kind == "partial":
            if partial is not None:
                partial.append(pickle.loads(item[2]))
        elif kind == "ok":
            done[rank] = item[2]
        elif rank not in failures:
            failures[rank] = _Failure(rank, role_of(cfg.parallel, rank), item[2], item[3],
                                      _PEER if item[4] else _RAISED, len(failures))


def _silent_failure(rank: int, exitcode: int | None, order: int, cfg: ExperimentConfig) -> _Failure:
    role = role_of(cfg.parallel, rank)
    if exitcode is None or exitcode == -signal.SIGTERM:
        return _Failure(rank, role, "stopped after another rank failed", category=_STOPPED, order=order)
    return _Failure(rank, role, _exit_text(exitcode), category=_DIED, order=order)


def _drain(results: Any) -> list[tuple[Any, ...]]:
    """Reports waiting in the queue (blocks up to one poll interval for the first)."""
    items = []
    try:
        items.append(results.get(timeout=_POLL_S))
        while True:
            items.append(results.get_nowait())
    except queue_mod.Empty:
        pass
    return items


def _failure_message(failures: dict[int, _Failure]) -> str:
    ordered = sorted(failures.values(), key=lambda f: (f.category, f.order))
    cause = ordered[0]
    text = f"rank {cause.rank} ({cause.role}) failed: {cause.summary}"
    others = [f"rank {f.rank} ({f.role}): {f.summary}" for f in ordered[1:]]
    if others:
        text += "\nthen: " + "; ".join(others)
    if cause.detail:
        text += f"\n\n--- traceback of rank {cause.rank} ---\n{cause.detail}"
    return text


def _exit_text(code: int) -> str:
    if code == 0:
        return "exited with code 0 without returning a result"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} without reporting an error"
    return f"exited with code {code} without reporting an error (see its log above)"


def _stop(procs: list[Any]) -> None:
    """Terminate every child still alive (SIGTERM, then SIGKILL) and reap them all."""
    alive = [p for p in procs if p.pid is not None and p.exitcode is None]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + _TERM_WAIT_S
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in alive:
        if p.exitcode is None:
            p.kill()
            p.join(_TERM_WAIT_S)


def _child_main(fn: RankFn, cfg: ExperimentConfig, rank: int, world_size: int, port: int, results: Any,
                parent_pid: int, log_level: int) -> None:
    """Body of a spawned rank: join, run `fn`, report ("ok", rank, pickled result) or the error, then exit."""
    _watch_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops every rank (Interrupted)
    if rank == 0:
        _PARTIAL["queue"] = results
    role = role_of(cfg.parallel, rank)
    configure_logging(rank, role, is_leader=rank in (0, cfg.parallel.target_gpus), level=log_level)
    _limit_cpu_threads(cfg.parallel, world_size)
    code = 0
    try:
        store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False,
                              timeout=datetime.timedelta(seconds=cfg.parallel.timeout_s))
        ctx = init_parallel(cfg.parallel, rank, world_size, store=store, extra={"launcher": "spawn"})
        result = fn(ctx, cfg)
        close_parallel(ctx)
        results.put(("ok", rank, pickle.dumps(result if rank == 0 else None)))
    except BaseException as e:  # noqa: BLE001 - report any failure, then leave at once
        summary = f"{type(e).__name__}: {e}"
        log.debug("rank %d (%s) failed: %s\n%s", rank, role, summary, traceback.format_exc())  # the parent reports it
        secondary = any(t in summary.lower() for t in _PEER_FAILURE_TEXTS)
        results.put(("error", rank, summary, traceback.format_exc(), secondary))
        code = 1
    results.close()
    results.join_thread()
    _flush_std()
    os._exit(code)


def _watch_parent(parent_pid: int) -> None:
    """Exit this child if its parent goes away (orphans would otherwise wait for their timeouts)."""

    def watch() -> None:
        while True:
            time.sleep(_PARENT_CHECK_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


# -- helpers ------------------------------------------------------------------------------------------------


class RankFilter(logging.Filter):
    """Prefix every log message with "[rank R role] " (once, whatever the number of handlers)."""

    def __init__(self, rank: int, role: str) -> None:
        """Remember the prefix."""
        super().__init__()
        self.prefix = f"[rank {rank} {role}] "

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the prefix; never drops a record."""
        if not getattr(record, "rank_prefixed", False):
            record.msg = self.prefix + str(record.msg)
            record.rank_prefixed = True
        return True


def configure_logging(rank: int, role: str, *, is_leader: bool, level: int = logging.INFO) -> None:
    """Rank-aware logging: prefix messages with the rank; non-leaders log warnings and errors only.

    Adds a stderr handler when the process has none (spawned ranks); otherwise (e.g. Hydra's handlers under
    torchrun) adds the rank filter to the existing root handlers.
    """
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    for handler in root.handlers:
        if not any(isinstance(f, RankFilter) for f in handler.filters):
            handler.addFilter(RankFilter(rank, role))
    root.setLevel(level if is_leader else max(level, logging.WARNING))


def host_threads(pcfg: ParallelConfig, ranks_on_host: int) -> int | None:
    """torch intra-op threads for one rank; None: leave torch's as OMP_NUM_THREADS set. A GPU rank's host work is
    single-threaded bookkeeping on tiny tensors: 1 thread (1 and 16 measured the same); CPU ranks share the host's
    cores."""
    if "OMP_NUM_THREADS" in os.environ:
        return None
    if pcfg.device == "cuda" or (pcfg.device == "auto" and torch.cuda.is_available()):
        return 1
    return max(1, (os.cpu_count() or 1) // max(1, ranks_on_host))


def _limit_cpu_threads(pcfg: ParallelConfig, ranks_on_host: int) -> None:
    n = host_threads(pcfg, ranks_on_host)
    if n is not None:
        torch.set_num_threads(n)


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
