"""Process groups and ranks: the only module that builds `torch.distributed` groups.

Layout (docs/DESIGN.md "Processes and groups"): world ranks `[0, T)` form the **target** group and
`[T, T + D)` the **draft** group, with T = `parallel.target_gpus` and D = `parallel.draft_gpus`. Each group is
also its tensor-parallel (TP) group. Rank 0 of each group is its **leader**; only the two leaders talk across
groups (`runtime/comm.py`, over `leader_group`), and the two groups never share a collective.

Contract:
- `init_parallel(cfg, rank, world_size, init_method)` joins the world, creates every group on every rank in
  the same order (a `dist.new_group` requirement), and returns a frozen `ParallelContext`.
- Every collective names its group: `ctx.tp_group` (None when the group has one rank, so callers skip the
  collective), `ctx.leader_group` (the two leaders, for point-to-point messages), `ctx.world_group` (only for
  start/end bookkeeping: the final barrier and the gather of traces to rank 0).
- `wait_bounded(work, ...)` is the one way to wait on an asynchronous operation: every wait has a deadline,
  so a dead or stuck peer ends the run with an error instead of a hang.

What it does not do: read environment variables (runtime/launch.py does, and passes rank / world size /
init method in), spawn processes, shard models (runtime/tp.py), or move messages (runtime/comm.py).
"""

from __future__ import annotations

import datetime
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from conf.schema import ParallelConfig

log = logging.getLogger(__name__)

ROLES = ("target", "draft")

# Polling schedule of `wait_bounded` on device (NCCL) work: spin this many checks first (a reply usually
# arrives within a few hundred microseconds), then sleep with exponential backoff up to the cap, so a
# long wait costs little CPU and adds at most the cap to the observed latency.
_SPIN_CHECKS = 200
_MAX_SLEEP_S = 2e-4


@dataclass(frozen=True)
class ParallelContext:
    """Where this process sits: world rank, role, its group and the peer group's leader, device, backend."""

    rank: int
    """World rank."""
    world_size: int
    role: str
    """target | draft."""
    group_rank: int
    """Rank inside this rank's group (0 = leader); also its TP rank."""
    group_size: int
    """Ranks in this rank's group; also its TP degree."""
    tp_group: Any
    """ProcessGroup of this rank's group, or None when the group has one rank."""
    is_leader: bool
    leader_rank: int
    """World rank of this group's leader."""
    peer_leader_rank: int | None
    """World rank of the other group's leader; None when there is no draft group."""
    device: torch.device
    backend: str
    """nccl (device tensors on GPU) | gloo (CPU)."""
    group_ranks: tuple[int, ...] = ()
    """World ranks of this rank's group."""
    leader_group: Any = None
    """ProcessGroup of the two leaders (point-to-point messages); None on non-leaders or without drafts."""
    world_group: Any = None
    """The default group; only for start/end bookkeeping (barrier, gather of traces)."""
    timeout_s: float = 120.0
    """Bound on every wait (parallel.timeout_s)."""
    num_target: int = 1
    num_draft: int = 0
    shared_gpu: bool = False
    """`parallel.share_gpus` took effect: ranks of both groups share a GPU, the world and leader groups are gloo."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    """Launcher facts for logs and run metadata (launcher name, local rank); never read for control flow."""

    @property
    def label(self) -> str:
        """Short description for log lines and errors, e.g. "rank 2 (draft leader)"."""
        return f"rank {self.rank} ({self.role}{' leader' if self.is_leader else ''})"


def role_of(cfg: ParallelConfig, rank: int) -> str:
    """The role of world rank `rank` under split `cfg`: target for [0, T), draft for [T, T + D)."""
    return "target" if rank < cfg.target_gpus else "draft"


def leader_ranks(target_gpus: int, draft_gpus: int) -> tuple[int, ...]:
    """World ranks of the group leaders: the target group's first rank (0), then the draft group's (`target_gpus`)
    when there is a draft group."""
    return (0,) if draft_gpus == 0 else (0, target_gpus)


def check_world_size(cfg: ParallelConfig, world_size: int) -> None:
    """Raise ValueError unless exactly `cfg.world_size` ranks were started."""
    if world_size != cfg.world_size:
        raise ValueError(
            f"parallel.target_gpus + parallel.draft_gpus = {cfg.target_gpus} + {cfg.draft_gpus} = "
            f"{cfg.world_size} but {world_size} ranks were started"
        )


def resolve_device(device: str, num_ranks: int, local_rank: int = 0, *, share: int = 0) -> torch.device:
    """Map `parallel.device` (auto | cuda | cpu) to this rank's device.

    `num_ranks` ranks share this host's GPUs, one each; raises ValueError when there are too few. `share` > 0
    (`parallel.share_gpus`, the size of the larger group): fewer GPUs do, rank r on GPU r mod (GPUs found), as long
    as the larger group still has a GPU per rank.
    """
    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if share and found >= 1:
        if share > found:
            raise ValueError(f"parallel.share_gpus: a group of {share} ranks needs {share} GPUs (one per TP rank), "
                             f"found {found}")
        return torch.device("cuda", local_rank % found)
    if found < num_ranks or local_rank >= found:
        raise ValueError(f"parallel: {num_ranks} ranks need {num_ranks} GPUs, found {found}"
                         + (" (parallel.share_gpus=true lets the two groups share them)" if found else ""))
    return torch.device("cuda", local_rank)


def shares_gpus(cfg: ParallelConfig, device: torch.device, ranks_on_host: int) -> bool:
    """Whether this run puts ranks of both groups on one GPU (`parallel.share_gpus` with fewer GPUs than ranks)."""
    return cfg.share_gpus and device.type == "cuda" and torch.cuda.device_count() < ranks_on_host


def group_size_bound(cfg: ParallelConfig) -> int:
    """`resolve_device`'s `share`: the larger group's size under `parallel.share_gpus`, else 0."""
    return max(cfg.target_gpus, cfg.draft_gpus) if cfg.share_gpus else 0


def init_parallel(
    cfg: ParallelConfig,
    rank: int,
    world_size: int,
    init_method: str = "env://",
    *,
    local_rank: int | None = None,
    local_world_size: int | None = None,
    store: Any = None,
    extra: dict[str, Any] | None = None,
) -> ParallelContext:
    """Join the process group and build the target, draft and leader groups.

    Args:
        cfg: the GPU split and device choice.
        rank: this process's world rank.
        world_size: ranks started; must equal `cfg.target_gpus + cfg.draft_gpus`.
        init_method: torch.distributed rendezvous URL (ignored when `store` is given).
        local_rank: rank on this host (GPU index); defaults to `rank`.
        local_world_size: ranks on this host; defaults to `world_size`.
        store: an already connected `torch.distributed.Store` (the spawn launcher hosts one).
        extra: launcher facts kept in `ParallelContext.extra`.

    Returns:
        The frozen context of this rank.
    """
    check_world_size(cfg, world_size)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside [0, {world_size})")
    local_rank = rank if local_rank is None else local_rank
    on_host = world_size if local_world_size is None else local_world_size
    device = resolve_device(cfg.device, on_host, local_rank, share=group_size_bound(cfg))
    shared = shares_gpus(cfg, device, on_host)
    timeout = datetime.timedelta(seconds=cfg.timeout_s)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        # Device tensors go through NCCL; CPU tensors (gather_object of traces) through gloo.
        backend, pg_backend = "nccl", "cpu:gloo,cuda:nccl"
    else:
        backend, pg_backend = "gloo", "gloo"
    # Groups that span both groups' ranks (the world, the two leaders): with GPUs shared, two of their ranks sit on
    # one GPU, where NCCL refuses a communicator, so they carry only host bookkeeping over gloo.
    cross_backend = "gloo" if shared else pg_backend
    if not dist.is_initialized():
        kw: dict[str, Any] = {"store": store} if store is not None else {"init_method": init_method}
        if device.type == "cuda" and not shared:
            # Eager NCCL init: communicators are made with the groups, and point-to-point messages on the
            # two-rank leader group reuse its communicator instead of creating another one lazily.
            kw["device_id"] = device
        dist.init_process_group(cross_backend, rank=rank, world_size=world_size, timeout=timeout, **kw)

    t, d = cfg.target_gpus, cfg.draft_gpus
    target_ranks, draft_ranks = tuple(range(t)), tuple(range(t, t + d))
    # dist.new_group must be called by every rank, in the same order, even by non-members. Which groups
    # exist depends only on cfg, so all ranks agree.
    groups: dict[str, Any] = {}
    for name, ranks in (("target", target_ranks), ("draft", draft_ranks)):
        if len(ranks) > 1:
            groups[name] = dist.new_group(list(ranks), timeout=timeout, backend=pg_backend)
    leader_group, leaders = None, leader_ranks(t, d)
    if len(leaders) == 2:
        pair = dist.new_group(list(leaders), timeout=timeout, backend=cross_backend)
        leader_group = pair if rank in leaders else None

    role = role_of(cfg, rank)
    ranks = target_ranks if role == "target" else draft_ranks
    leader = ranks[0]
    peer = None if d == 0 else (t if role == "target" else 0)
    ctx = ParallelContext(
        rank=rank, world_size=world_size, role=role, group_rank=rank - leader, group_size=len(ranks),
        tp_group=groups.get(role), is_leader=rank == leader, leader_rank=leader, peer_leader_rank=peer,
        device=device, backend=backend, group_ranks=ranks, leader_group=leader_group,
        world_group=dist.group.WORLD, timeout_s=cfg.timeout_s, num_target=t, num_draft=d, shared_gpu=shared,
        extra={"local_rank": local_rank, **(extra or {})},
    )
    log.debug("%s: group %s, device %s, backend %s", ctx.label, list(ranks), device, backend)
    return ctx


def wait_bounded(work: Any, timeout_s: float, what: str, *, poll: bool = False) -> None:
    """Wait for an async torch.distributed `work` for at most `timeout_s`.

    Gloo work is waited with its own timeout (its `is_completed()` only turns true inside `wait()` for
    point-to-point work); device (NCCL) work is polled with `is_completed()` (`poll=True`), because its
    `wait()` blocks the stream, not the host.

    Raises:
        TimeoutError: nothing completed in time; the message starts with `what`.
        RuntimeError: the peer failed (connection closed, aborted communicator), with `what` in front.
    """
    start = time.perf_counter()
    if poll:
        checks, sleep_s = 0, 1e-6
        while not work.is_completed():
            elapsed = time.perf_counter() - start
            if elapsed > timeout_s:
                raise TimeoutError(f"{what}: nothing arrived in {elapsed:.1f} s (limit {timeout_s:g} s)")
            checks += 1
            if checks > _SPIN_CHECKS:
                time.sleep(sleep_s)
                sleep_s = min(2 * sleep_s, _MAX_SLEEP_S)
        work.wait()  # orders the current stream after the communication
        return
    try:
        work.wait(datetime.timedelta(seconds=timeout_s))
    except RuntimeError as e:
        elapsed = time.perf_counter() - start
        if "timed out" in str(e).lower() or elapsed >= 0.95 * timeout_s:
            # The elapsed time, not `timeout_s`: gloo collectives also stop at their group's timeout.
            raise TimeoutError(f"{what}: nothing arrived in {elapsed:.1f} s (limit {timeout_s:g} s)") from e
        raise RuntimeError(f"{what} failed after {elapsed:.2f} s: {e}") from e


def barrier(ctx: ParallelContext, what: str = "barrier") -> None:
    """Bounded barrier over the world group (start and end of a run only)."""
    if ctx.world_size == 1:
        return
    work = dist.barrier(group=ctx.world_group, async_op=True)
    wait_bounded(work, ctx.timeout_s, f"{ctx.label}: {what} over all {ctx.world_size} ranks",
                 poll=ctx.backend == "nccl" and not ctx.shared_gpu)


def close_parallel(ctx: ParallelContext | None) -> None:
    """Leave the process group (after a bounded barrier, so no rank tears down while a peer still talks)."""
    if not dist.is_initialized():
        return
    if ctx is not None:
        barrier(ctx, "final barrier")
    dist.destroy_process_group()
