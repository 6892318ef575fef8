"""Shared fixtures: Hydra composition of the project's configs, free ports for gloo tests."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CONF_DIR = REPO / "conf"

# Kernels run in Triton's interpreter on CPU machines (CI has no GPU). The GPU tests need it off; on a GPU
# machine they fail at once, naming the setting, if this default put it on (pytest_collection_modifyitems).
INTERPRET_DEFAULTED = "TRITON_INTERPRET" not in os.environ
os.environ.setdefault("TRITON_INTERPRET", "1")


# Modules that take longest (rank launches, engine runs, subprocesses), longest first: they are collected first. Under
# `pytest -n 2` (scripts/test.sh) a worker takes a whole file at a time, in collection order (`--dist loadfile
# --no-loadscope-reorder` in pyproject.toml: a module-scoped fixture, e.g. one rank launch per split, runs once), so
# the last files to finish are short ones and neither worker idles at the end waiting for the other's long file.
SLOW_FIRST = ("test_readme.py", "runtime/test_engine.py", "runtime/test_engine_mp.py", "bench/test_bench_runtime.py",
              "runtime/test_tp.py", "runtime/test_parallel.py", "analysis/test_sweep.py", "runtime/test_faults.py",
              "runtime/test_loading.py", "bench/test_compiled_peers.py", "conf/test_config_doc.py",
              "runtime/test_train_draft.py", "runtime/test_comm.py")


@pytest.hookimpl(trylast=True)  # after `-m` deselection (addopts deselects gpu tests on plain runs)
def pytest_collection_modifyitems(config, items):
    """Slow modules first (SLOW_FIRST, stable otherwise). GPU tests selected while this file turned the Triton
    interpreter on: stop with the fix, not 29 errors."""
    def rank(item) -> int:
        path = item.path.relative_to(REPO / "tests").as_posix() if item.path.is_relative_to(REPO / "tests") else ""
        return SLOW_FIRST.index(path) if path in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)
    if INTERPRET_DEFAULTED and any(item.get_closest_marker(m) for item in items for m in ("gpu", "multi_gpu")):
        import torch

        if torch.cuda.is_available():
            raise pytest.UsageError("GPU tests selected with TRITON_INTERPRET unset (tests/conftest.py then turns "
                                    "Triton's CPU interpreter on): run them with TRITON_INTERPRET=0")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def compose(config_name: str = "generate", overrides: list[str] | None = None):
    """Compose conf/<config_name>.yaml with overrides; returns the raw DictConfig."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from conf.schema import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=overrides or [])


def build(config_name: str = "generate", overrides: list[str] | None = None):
    """Compose, validate and freeze: the ExperimentConfig an entry point would pass down."""
    from conf import build_config

    return build_config(compose(config_name, overrides))


@pytest.fixture
def free_port() -> int:
    """A TCP port free on localhost (for torch.distributed rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def _pdl_policy_restored():
    """The PDL switch (kernels/pdl.py) is process-wide and an in-process Engine sets it from its config: every test
    starts and ends with the policy it found, so no test depends on the order of others."""
    import sys

    pdl = sys.modules.get("kernels.pdl")
    before = pdl.pdl_policy() if pdl is not None else None
    yield
    pdl = sys.modules.get("kernels.pdl")
    if pdl is not None:  # set_pdl(True, **policy) sets any policy exactly, all-off included
        pdl.set_pdl(before is not None, **(before or {}))


def pairwise(**factors: list) -> list[tuple]:
    """A covering subset of the product of `factors`' values in which every pair of values of any two factors occurs
    (greedy, deterministic: the case that covers most uncovered pairs, the least used values breaking ties, until
    none is left). For kernel grids where a failure needs at most two settings together: the full product's cost in
    Triton's interpreter grows with every factor, this with the two largest."""
    import itertools

    names, values = list(factors), list(factors.values())
    product = list(itertools.product(*(range(len(v)) for v in values)))

    def pairs(case: tuple[int, ...]) -> set[tuple[int, int, int, int]]:
        return {(a, case[a], b, case[b]) for a, b in itertools.combinations(range(len(names)), 2)}

    uncovered = set().union(*map(pairs, product))
    chosen: list[tuple[int, ...]] = []
    used = [[0] * len(v) for v in values]
    while uncovered:
        best = max(product, key=lambda case: (len(pairs(case) & uncovered),
                                              -sum(used[i][j] for i, j in enumerate(case))))
        chosen.append(best)
        uncovered -= pairs(best)
        for i, j in enumerate(best):
            used[i][j] += 1
    return [tuple(values[i][j] for i, j in enumerate(case)) for case in sorted(chosen)]
