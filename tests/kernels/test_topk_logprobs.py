"""topk_logprobs (the draft's head) vs its torch twin: ids, log-probs, tie order, scale, segments, bad input."""

from __future__ import annotations

import pytest
import torch

from kernels import topk_logprobs
from kernels.reference import topk_logprobs_ref
from tests.tolerances import assert_close


def _logits(rows: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 3


@pytest.mark.parametrize("rows,vocab,k,block", [
    (3, 1000, 8, None),  # one segment
    (5, 1000, 8, 128),  # 8 segments, the last one partial
    (2, 5000, 4, 256),  # 20 segments
    (1, 17, 8, 16),  # a 1-element last segment
    (4, 300, 1, 64),  # k = 1
    (2, 64, 16, 16),  # k > a segment's length: every segment gives all its entries
])
def test_matches_the_torch_head(rows, vocab, k, block):
    x = _logits(rows, vocab, seed=rows * vocab + k)
    values, ids = topk_logprobs(x, k, block=block)
    ref_values, ref_ids = topk_logprobs_ref(x, k)
    assert ids.dtype == torch.int64 and values.dtype == torch.float32 and values.shape == (rows, k)
    assert torch.equal(ids, ref_ids)
    assert_close(values, ref_values, torch.float32, reduction=vocab, what="log-probs", relative=False)


def test_equal_values_come_lower_id_first():
    """Rounded logits tie often: the order is (value desc, id asc) across segment boundaries."""
    x = (_logits(3, 500, seed=1) / 1.5).round()
    _, ids = topk_logprobs(x, 8, block=64)
    for r in range(3):
        want = sorted(range(500), key=lambda j: (-x[r, j].item(), j))[:8]
        assert ids[r].tolist() == want


def test_scale_is_a_temperature():
    x = _logits(2, 700, seed=2)
    values, ids = topk_logprobs(x, 5, scale=1 / 0.7, block=128)
    ref_values, ref_ids = topk_logprobs_ref(x, 5, scale=1 / 0.7)
    assert torch.equal(ids, ref_ids)
    assert_close(values, ref_values, torch.float32, reduction=700, what="log-probs at temperature 0.7",
                 relative=False)
    assert_close(torch.logsumexp(torch.log_softmax(x / 0.7, -1), -1), torch.zeros(2), torch.float32, reduction=700,
                 what="normalised")


def test_zero_rows_and_strided_rows():
    values, ids = topk_logprobs(torch.zeros(0, 50), 4)
    assert values.shape == ids.shape == (0, 4)
    x = _logits(4, 200, seed=3)
    values, ids = topk_logprobs(x[1:], 3, block=64)  # a row slice (the pending step's head)
    assert torch.equal(ids, topk_logprobs_ref(x[1:], 3)[1])


@pytest.mark.parametrize("call,match", [
    (lambda: topk_logprobs(torch.zeros(2, 8, dtype=torch.float16), 2), r"logits must be \[rows, vocab\] float32"),
    (lambda: topk_logprobs(torch.zeros(8), 2), r"logits must be \[rows, vocab\] float32"),
    (lambda: topk_logprobs(torch.zeros(2, 8), 9), r"k must be in \[1, min\(vocab 8, 64\)\], got 9"),
    (lambda: topk_logprobs(torch.zeros(2, 8), 0), r"k must be in"),
    (lambda: topk_logprobs(torch.zeros(2, 8), 2, block=48), r"block must be a power of two >= 16, got 48"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()
