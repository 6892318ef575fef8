"""bench/bench_prelaunch.py on CPU: what it refuses, by name (the loops need a CUDA device and the driver's stream
wait; they run in the GPU session, where the bench itself checks both loops' read-backs agree step by step)."""

from __future__ import annotations

import time

import pytest
import torch

from bench.bench_prelaunch import busy, main


@pytest.mark.parametrize("args", [["--steps", "1"], ["--blocks", "0"], ["--rows", "0"], ["--host-us", "-1"]])
def test_bad_arguments_are_refused(args):
    with pytest.raises(SystemExit, match=r"needs --steps >= 2, --blocks >= 1, --rows >= 1, --host-us >= 0"):
        main(args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_it_says_what_it_needs():
    with pytest.raises(SystemExit, match="bench_prelaunch: needs a CUDA device"):
        main(["--steps", "4"])


def test_busy_spins_at_least_the_time_asked():
    start = time.perf_counter()
    busy(2000.0)
    assert time.perf_counter() - start >= 2e-3
