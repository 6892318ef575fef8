"""bench/bench_draft_head.py on the CPU: its providers compute the runtime head's children, and bad input is named."""

from __future__ import annotations

import pytest
import torch

from bench import bench_draft_head
from tests.tolerances import assert_close


def test_providers_give_the_runtime_heads_children():
    logits = torch.randn(5, 1000, generator=torch.Generator().manual_seed(0)) * 3
    providers = bench_draft_head._providers(logits, 8)
    ref_vals, ref_ids = providers["runtime"][0]()
    for name in ("topk+logsumexp", "triton"):
        vals, ids = providers[name][0]()
        assert torch.equal(ids, ref_ids) and (vals <= 0).all()
        assert_close(vals, ref_vals, torch.float32, reduction=1000, what=name, relative=False)  # log-probs
    assert torch.equal(providers["topk"][0]().indices, ref_ids)
    assert_close(providers["log_softmax"][0]().exp().sum(-1), torch.ones(5), torch.float32, reduction=1000,
                 what="log_softmax normalised")
    assert all(graph for _, graph in providers.values())  # every provider is timed inside a CUDA graph


def test_bad_rows_and_no_gpu_are_named():
    with pytest.raises(SystemExit, match="--rows: expected comma-separated integers, got '8,x'"):
        bench_draft_head.main(["--rows", "8,x"])
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="needs a CUDA GPU"):
            bench_draft_head.main([])
