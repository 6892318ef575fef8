"""kv_compact vs the advanced-indexing reference, including overlapping source/destination ranges."""

from __future__ import annotations

import pytest
import torch

from kernels import kv_compact
from kernels.reference import kv_compact_ref
from tests.tolerances import assert_bitwise

DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
MOVE = "pure data movement: kv_compact copies whole rows, no arithmetic"

# (name, cap, src_slots, dst_start): each names the overlap pattern it exercises
CASES = [
    ("forward_compaction", 40, [20, 23, 24, 30, 31], 18),  # re-rooting: kept subtree moves down
    ("overlap_shift_down", 24, [5, 6, 7, 8, 9, 10], 3),  # dst range overlaps src range
    ("overlap_shift_up", 24, [3, 4, 5, 6, 7], 5),  # backward move: naive forward copy would smear
    ("swap", 12, [5, 4], 4),  # in-range permutation
    ("reverse", 16, [9, 8, 7, 6, 5, 4], 4),
    ("padded", 30, [12, -1, 15, -1, 20], 10),  # -1 entries (CUDA-graph padding) are skipped
    ("single", 8, [7], 0),
    ("identity", 8, [2, 3, 4], 2),
]


def _cache(cap, dtype, seed, layers=3, heads=2, dim=16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(layers, 2, cap, heads, dim, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_matches_reference(case, dtype):
    _, cap, src, dst = case
    kv = _cache(cap, dtype, seed=len(src))
    want = kv.clone()
    slots = torch.tensor(src, dtype=torch.int64)
    kv_compact(kv, slots, dst)
    kv_compact_ref(want, slots, dst)
    assert_bitwise(kv, want, reason=MOVE, what=case[0])


def test_moves_are_exact_and_rest_untouched():
    """Hand-checkable: destination i holds the old source row; every other slot is unchanged."""
    kv = _cache(16, torch.float32, seed=3)
    old = kv.clone()
    kv_compact(kv, torch.tensor([9, 7, 8]), 6)
    assert_bitwise(kv[:, :, 6:9], old[:, :, [9, 7, 8]], reason=MOVE, what="moved slots")
    untouched = [s for s in range(16) if s not in (6, 7, 8)]
    assert_bitwise(kv[:, :, untouched], old[:, :, untouched], reason="slots outside the destination are not written",
                   what="untouched slots")


def test_destination_as_device_tensor():
    kv = _cache(20, torch.float32, seed=4)
    want = kv.clone()
    slots = torch.tensor([10, 12, 13])
    kv_compact(kv, slots, torch.tensor([2]))
    kv_compact_ref(want, slots, 2)
    assert_bitwise(kv, want, reason=MOVE)


def test_more_rows_than_one_tile_forward_compaction():
    """n > MAX_ROWS: chunked rows stay exact for forward compaction (sources ascending, src >= dst)."""
    kv = _cache(700, torch.float32, seed=5, layers=1, heads=1, dim=16)
    want = kv.clone()
    keep = torch.randperm(300, generator=torch.Generator().manual_seed(1)) < 280  # drop 20 random slots
    slots = torch.arange(300, 600, dtype=torch.int64)[keep]  # ascending, src_i >= 300 + i > dst + i
    kv_compact(kv, slots, 250)
    kv_compact_ref(want, slots, 250)
    assert_bitwise(kv, want, reason=MOVE)


def test_rejects_out_of_range_destination():
    kv = _cache(8, torch.float32, seed=0)
    with pytest.raises(ValueError, match="exceeds cap"):
        kv_compact(kv, torch.tensor([1, 2, 3]), 6)
