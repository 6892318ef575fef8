"""`runtime.graphs.wait_for_ticket` on CPU: the host spin on a CUDA graph's read-back (the graph side: tests/gpu)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from runtime import graphs
from runtime.graphs import readback_outputs, wait_for_ticket


def test_a_ticket_already_there_returns_without_asking_the_stream():
    asked = []
    wait_for_ticket(np.array([7]), 7, lambda: asked.append(1) or True, "g")
    assert not asked


def test_the_spin_returns_once_another_writer_sets_the_ticket():
    """The flag is host memory written from elsewhere (the graph's last copy): the spin sees the new value."""
    flag = np.zeros(1, dtype=np.int64)
    timer = threading.Timer(0.03, lambda: flag.__setitem__(0, 3))
    start = time.perf_counter()
    timer.start()
    wait_for_ticket(flag, 3, lambda: False, "g")
    assert flag[0] == 3 and time.perf_counter() - start >= 0.02


def test_an_idle_stream_without_the_ticket_raises_naming_the_graph(monkeypatch):
    monkeypatch.setattr(graphs, "READBACK_CHECK_S", 0.0)
    with pytest.raises(RuntimeError, match=r"verify graph: the stream is idle but the read-back holds ticket 4, "
                                           r"expected 5"):
        wait_for_ticket(np.array([4]), 5, lambda: True, "verify graph")


def test_a_replay_that_never_ends_times_out_and_a_cuda_error_propagates(monkeypatch):
    with pytest.raises(TimeoutError, match=r"g: waited \d+\.\d s for the replay's read-back \(ticket 2, the host "
                                           r"holds 1\)"):
        wait_for_ticket(np.array([1]), 2, lambda: False, "g", timeout_s=0.02)

    def fault() -> bool:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(graphs, "READBACK_CHECK_S", 0.0)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        wait_for_ticket(np.array([1]), 2, fault, "g")


def test_readback_mirrors_a_heads_outputs_or_a_verdicts_but_its_logits():
    import torch

    logits, argmax, packed = torch.zeros(2, 5), torch.zeros(2, dtype=torch.long), torch.zeros(4, dtype=torch.long)
    assert readback_outputs((logits, argmax, packed), verdict=True) == (argmax, packed)
    assert readback_outputs((argmax, packed), verdict=False) == (argmax, packed)
    assert readback_outputs(argmax, verdict=False) == (argmax,)
    with pytest.raises(ValueError, match="the step's outputs must be tensors"):
        readback_outputs((argmax, None), verdict=False)
