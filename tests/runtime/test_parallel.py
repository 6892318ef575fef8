"""Process groups (runtime/parallel.py): roles, leaders and TP groups for several splits, on gloo (CPU).

Each split runs once through `launch` (spawned ranks); every rank reports what it sees and the result of an
all-reduce on its TP group, which must sum only the ranks of its own group.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from conf.schema import ExperimentConfig, ParallelConfig, SpecConfig, freeze
from runtime.launch import launch
from runtime.parallel import check_world_size, init_parallel, resolve_device, role_of


def make_cfg(target: int, draft: int, timeout_s: float = 30.0, device: str = "cpu",
             share_gpus: bool = False) -> ExperimentConfig:
    """A frozen config with only the split set (launch needs no model)."""
    mode = "async_tree" if draft else "autoregressive"
    return freeze(ExperimentConfig(parallel=ParallelConfig(target, draft, device, timeout_s, share_gpus=share_gpus),
                                   spec=SpecConfig(mode=mode)))


def _probe_groups(ctx, cfg):
    """Every rank: its context and the sum of (rank + 1) over its TP group; rank 0 returns all ranks'."""
    x = torch.tensor([float(ctx.rank + 1)])
    if ctx.tp_group is not None:
        dist.all_reduce(x, group=ctx.tp_group)
    mine = {"rank": ctx.rank, "world_size": ctx.world_size, "role": ctx.role, "group_rank": ctx.group_rank,
            "group_size": ctx.group_size, "is_leader": ctx.is_leader, "leader_rank": ctx.leader_rank,
            "peer_leader_rank": ctx.peer_leader_rank, "has_tp_group": ctx.tp_group is not None,
            "has_leader_group": ctx.leader_group is not None, "group_ranks": ctx.group_ranks,
            "tp_sum": x.item(), "device": str(ctx.device), "backend": ctx.backend, "shared_gpu": ctx.shared_gpu}
    everyone = [None] * ctx.world_size
    dist.all_gather_object(everyone, mine, group=ctx.world_group)
    return everyone


@pytest.mark.parametrize("target,draft", [(1, 1), (2, 1), (1, 2), (3, 1)], ids=["1+1", "2+1", "1+2", "3+1"])
def test_groups_roles_leaders_and_tp_sums(target, draft):
    """1+1 runs with parallel.share_gpus on: on CPU ranks there is no GPU to share, so it changes nothing (the same
    groups, gloo everywhere, `shared_gpu` false)."""
    infos = launch(_probe_groups, make_cfg(1, 1, share_gpus=True) if (target, draft) == (1, 1)
                   else make_cfg(target, draft))
    assert [i["rank"] for i in infos] == list(range(target + draft))
    for info in infos:
        r = info["rank"]
        is_target = r < target
        ranks = tuple(range(target)) if is_target else tuple(range(target, target + draft))
        assert info["role"] == ("target" if is_target else "draft")
        assert info["group_ranks"] == ranks
        assert info["group_size"] == len(ranks)
        assert info["group_rank"] == r - ranks[0]
        assert info["leader_rank"] == ranks[0]
        assert info["is_leader"] == (r == ranks[0])
        assert info["peer_leader_rank"] == (target if is_target else 0)
        assert info["has_tp_group"] == (len(ranks) > 1)
        assert info["has_leader_group"] == (r in (0, target))
        # the all-reduce saw exactly the ranks of this group
        assert info["tp_sum"] == sum(q + 1 for q in ranks)
        assert info["device"] == "cpu" and info["backend"] == "gloo" and info["shared_gpu"] is False
        assert info["world_size"] == target + draft


def test_single_rank_runs_in_process_without_draft_group():
    infos = launch(_probe_groups, make_cfg(1, 0))
    assert infos == [{"rank": 0, "world_size": 1, "role": "target", "group_rank": 0, "group_size": 1,
                      "is_leader": True, "leader_rank": 0, "peer_leader_rank": None, "has_tp_group": False,
                      "has_leader_group": False, "group_ranks": (0,), "tp_sum": 1.0, "device": "cpu",
                      "backend": "gloo", "shared_gpu": False}]
    assert not dist.is_initialized()  # launch left no process group behind


def test_bad_world_size_is_a_clear_error():
    with pytest.raises(ValueError, match=r"parallel.target_gpus \+ parallel.draft_gpus = 2 \+ 1 = 3 but 2 ranks "
                                         r"were started"):
        launch(_probe_groups, make_cfg(2, 1), world_size=2)
    with pytest.raises(ValueError, match="= 4 but 5 ranks were started"):
        check_world_size(make_cfg(3, 1).parallel, 5)
    # init_parallel checks before joining any process group
    with pytest.raises(ValueError, match="but 1 ranks were started"):
        init_parallel(make_cfg(1, 1).parallel, 0, 1, "tcp://127.0.0.1:1")
    assert not dist.is_initialized()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without enough GPUs")
def test_missing_gpus_is_a_clear_error():
    with pytest.raises(ValueError, match=r"parallel: 3 ranks need 3 GPUs, found 0"):
        launch(_probe_groups, make_cfg(2, 1, device="cuda"))
    assert resolve_device("auto", 4) == torch.device("cpu")


def test_role_of_ranks():
    cfg = make_cfg(3, 2).parallel
    assert [role_of(cfg, r) for r in range(5)] == ["target"] * 3 + ["draft"] * 2


def _cuda_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.multi_gpu
@pytest.mark.skipif(_cuda_count() < 2, reason="needs 2 CUDA GPUs")
@pytest.mark.parametrize("target,draft", [(1, 1), (2, 0)], ids=["1+1", "2+0"])
def test_groups_on_gpus_use_nccl(target, draft):
    infos = launch(_probe_groups, make_cfg(target, draft, device="cuda"))
    for info in infos:
        assert info["backend"] == "nccl" and info["device"] == f"cuda:{info['rank']}"
        ranks = range(target) if info["rank"] < target else range(target, target + draft)
        assert info["tp_sum"] == sum(q + 1 for q in ranks)


def _fake_gpus(monkeypatch, count: int) -> None:
    """`resolve_device` sees `count` CUDA GPUs (no GPU is touched: it only builds torch.device objects)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_shared_gpus_map_ranks_round_robin(monkeypatch):
    """parallel.share_gpus: rank r on GPU r mod (GPUs found), while the larger group still has a GPU per rank;
    without it, too few GPUs are an error that names the switch."""
    _fake_gpus(monkeypatch, 1)
    assert [resolve_device("auto", 2, r, share=1) for r in (0, 1)] == [torch.device("cuda", 0)] * 2
    with pytest.raises(ValueError, match=r"parallel: 2 ranks need 2 GPUs, found 1 \(parallel.share_gpus=true"):
        resolve_device("cuda", 2, 1)
    with pytest.raises(ValueError, match=r"parallel.share_gpus: a group of 2 ranks needs 2 GPUs .*found 1"):
        resolve_device("cuda", 3, 0, share=2)
    _fake_gpus(monkeypatch, 2)
    assert [resolve_device("cuda", 3, r, share=2) for r in range(3)] == [torch.device("cuda", i) for i in (0, 1, 0)]
    assert resolve_device("cpu", 3, 2, share=2) == torch.device("cpu")


def test_shared_gpus_config_errors_name_the_field():
    with pytest.raises(ValueError, match=r"parallel.share_gpus.*leader_channel auto or unix, got dist"):
        ParallelConfig(1, 1, share_gpus=True, leader_channel="dist").validate()
    with pytest.raises(ValueError, match=r"parallel.share_gpus.*expected true or false, got 'yes'"):
        ParallelConfig(1, 1, share_gpus="yes").validate()
    ParallelConfig(1, 1, share_gpus=True, leader_channel="unix").validate()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_groups_share_the_gpus_there_are():
    """1 + 1 with parallel.share_gpus on this machine's GPUs: on one GPU both ranks sit on it (the world and leader
    groups over gloo, `shared_gpu`), on two each has its own (NCCL, nothing shared)."""
    infos = launch(_probe_groups, make_cfg(1, 1, device="cuda", share_gpus=True))
    one = _cuda_count() < 2
    assert [i["device"] for i in infos] == (["cuda:0", "cuda:0"] if one else ["cuda:0", "cuda:1"])
    assert [i["shared_gpu"] for i in infos] == [one, one]
    assert [i["tp_sum"] for i in infos] == [1.0, 2.0] and all(i["backend"] == "nccl" for i in infos)
