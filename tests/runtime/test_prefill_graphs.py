"""kernels.prefill_graph on CPU: the length buckets, a prefill's forward without logits, and the padded prefill's K/V
(runtime/graphs.py PrefillGraphs, its eager stand-in for the capture) alone and wired through the workers. The
captured graphs themselves run in tests/gpu/test_graphs.py."""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from conf.kernels_config import KernelFeatures
from runtime.attention import AttnMeta
from runtime.draft_worker import DraftWorker
from runtime.worker_spec import WorkerSpec
from tests.runtime.test_tree_cache import (
    ATTN,
    CAPACITY,
    MAX_LEN,
    PROMPT,
    CpuStepGraph,
    _assert_same,
    _cache,
    _model,
)
from tests.tolerances import assert_bitwise


def test_prefill_buckets_are_powers_of_two_within_the_cache():
    from runtime.graphs import PREFILL_MIN_BUCKET, prefill_bucket

    assert [prefill_bucket(n, 2048) for n in (1, 16, 17, 37, 64, 65, 1023, 1024)] == \
        [PREFILL_MIN_BUCKET, 16, 32, 64, 64, 128, 1024, 1024]
    assert prefill_bucket(1025, 2048) == 2048 and prefill_bucket(1025, 2000) is None  # past the cache: eager
    with pytest.raises(ValueError, match="a prefill of 0 tokens"):
        prefill_bucket(0, 64)


@torch.no_grad()
def test_logits_false_writes_the_same_kv_and_returns_none():
    """Transformer.forward(logits=False), a prefill's forward: the same K/V in every layer, no logits (the last layer's
    MLP, the final norm and the LM head are skipped)."""
    model = _model("tiny-llama", 1)
    caches = [_cache(model), _cache(model)]
    tokens = torch.tensor(PROMPT)
    assert model(tokens, AttnMeta.causal(0, len(PROMPT)), caches[0], ATTN).shape[0] == len(PROMPT)
    assert model(tokens, AttnMeta.causal(0, len(PROMPT)), caches[1], ATTN, logits=False) is None
    assert_bitwise(caches[1].kv, caches[0].kv, reason="logits=False skips only what follows the last K/V write: the "
                   "K/V come from the same operations on the same inputs")


@torch.no_grad()
def test_bucketed_prefill_keeps_the_prompts_kv_and_reuses_its_bucket():
    """PrefillGraphs (eager stand-in for the capture): a prompt padded to its bucket writes the K/V of a plain prefill
    at the prompt's slots (causal: no real row sees a padding row); a second prompt of the same bucket reuses it, and
    decoding after it equals decoding after an eager prefill. A prompt past the cache's last bucket is left to the
    eager path."""
    from runtime.graphs import PrefillGraphs
    from runtime.tree_cache import prefill

    model = _model("tiny-llama", 1)
    for prompt in (PROMPT, PROMPT[:5] + [31, 32, 33, 34, 35, 36]):
        want, got = _cache(model), _cache(model)
        graphs = PrefillGraphs(model, got, ATTN, eager=True)
        assert prefill(model, want, ATTN, prompt, "cpu") == prefill(model, got, ATTN, prompt, "cpu", graphs)
        n = len(prompt) - 1
        _assert_same(got.kv[:, :, :n], want.kv[:, :, :n])
        # the root's step after it: same logits and K/V (the padding slots [n, 16) are overwritten, never read)
        root = torch.tensor(prompt[-1:])
        la, lb = (model(root, AttnMeta.causal(n, 1), c, ATTN) for c in (want, got))
        _assert_same(lb, la)
        _assert_same(got.kv[:, :, : n + 1], want.kv[:, :, : n + 1])
    graphs = PrefillGraphs(model, _cache(model), ATTN, eager=True)
    assert graphs.run(PROMPT) and graphs.run(PROMPT[:3]) and len(graphs._buckets) == 1 and graphs.replays == 2
    assert not graphs.run(list(range(CAPACITY + 1))) and graphs.replays == 2
    graphs.prepare([0, 4, 10, 40, 63, CAPACITY + 1])  # the workload's prefills, before the timed region
    assert sorted(graphs._buckets) == [16, 64]  # 16 was there; 64 added; none past the cache


def test_one_eager_warmup_prefill_follows_the_first_capture():
    """PrefillGraphs.eager_warmup (steps after only-replayed prefills ran 5-6% slower on the H200): one eager forward of
    PREFILL_MIN_BUCKET zeros runs right after the first bucket's capture, and never again (captures stood in for)."""
    from runtime.graphs import PREFILL_MIN_BUCKET, PrefillGraphs

    model = _model("tiny-llama", 1)
    graphs = PrefillGraphs(model, _cache(model), ATTN, eager=True)
    eager_bucket = graphs._bucket

    def stand_in(bucket):  # the capture, stood in for by the eager bucket
        graphs.eager = True
        try:
            return eager_bucket(bucket)
        finally:
            graphs.eager = False
            graphs.captures += 1  # as the capture counts itself

    graphs.eager, graphs.drain = False, False  # as if on CUDA (no stream to drain here)
    seen = []
    real_forward = model.forward

    def forward(ids, meta, cache, attn, **kw):
        seen.append(ids.numel())
        return real_forward(ids, meta, cache, attn, **kw)

    with mock.patch.object(graphs, "_bucket", side_effect=stand_in), mock.patch.object(model, "forward", forward):
        graphs.prepare([10, 40])
        assert seen == [PREFILL_MIN_BUCKET] and graphs.captures == 2  # the stand-ins run nothing; the warm-up once
        graphs.prepare([20])  # a second capture (bucket 32)
        assert graphs.run(PROMPT)
        assert seen == [PREFILL_MIN_BUCKET, PREFILL_MIN_BUCKET]  # the replay of PROMPT's bucket; no second warm-up
    assert sorted(graphs._buckets) == [16, 32, 64]


def test_prefill_graphs_refuse_a_cpu_capture():
    from runtime.graphs import PrefillGraphs

    model = _model("tiny-llama", 1)
    with pytest.raises(ValueError, match="kernels.prefill_graph: CUDA graphs need a CUDA device"):
        PrefillGraphs(model, _cache(model), ATTN)


@torch.no_grad()
def test_workers_prefill_through_their_buckets_and_decode_as_after_an_eager_prefill():
    """kernels.prefill_graph wired through the workers (`CpuStepGraph` and an eager `PrefillGraphs` standing in for
    the captures): TargetWorker and DraftWorker prefill each prompt through its bucket (two prompts share one, prepared
    up front), and their next steps give the logits, tree and cache an eager-prefill worker gives."""
    from functools import partial

    from conf.messages import DraftProposal
    from runtime.graphs import PrefillGraphs
    from runtime.target_worker import TargetWorker

    eager_graphs = partial(PrefillGraphs, eager=True)
    prompts = [PROMPT, PROMPT[:4], PROMPT + list(range(61, 72))]  # prefills of 6, 3, 17 tokens: buckets 16, 16, 32

    def workers(graphs: bool) -> tuple[TargetWorker, DraftWorker]:
        with mock.patch("runtime.target_worker.StepGraph", CpuStepGraph), \
                mock.patch("runtime.draft_worker.StepGraph", CpuStepGraph), \
                mock.patch("runtime.target_worker.PrefillGraphs", eager_graphs), \
                mock.patch("runtime.draft_worker.PrefillGraphs", eager_graphs):
            kernels = KernelFeatures(cuda_graphs=True, prefill_graph=graphs)
            target = TargetWorker(_model("tiny-llama", 1), ATTN, WorkerSpec(4, CAPACITY - 4), kernels)
            draft = DraftWorker(_model("tiny-llama-draft", 2), ATTN,
                                WorkerSpec(4, CAPACITY - MAX_LEN, topk=3, max_tree_nodes=MAX_LEN), kernels)
        return target, draft

    plain, bucketed = workers(False), workers(True)
    assert plain[0].prefill_graphs is None and bucketed[1].prefill_graphs is not None
    for w in bucketed:
        w.prefill_graphs.prepare([len(p) - 1 for p in prompts[:2]])
        assert sorted(w.prefill_graphs._buckets) == [16]
    for prompt in prompts:
        results = []
        for target, draft in (plain, bucketed):
            target.start(prompt)
            draft.start(prompt)
            assert draft.expand() and draft.expand()
            proposal = draft.propose(0, 0, bs=4)
            target.forward(DraftProposal(0, 0, proposal.token_ids, proposal.parent_indices))
            results.append((target._logits.clone(), proposal, [(n.token, n.parent) for n in draft.tree.nodes]))
        (want, prop_a, tree_a), (got, prop_b, tree_b) = results
        assert (prop_b.token_ids, prop_b.parent_indices, tree_b) == (prop_a.token_ids, prop_a.parent_indices, tree_a)
        # logits over K/V that the CPU GEMM computed at another row count: last-bit differences, amplified
        _assert_same(got, want)
    for w in bucketed:
        assert sorted(w.prefill_graphs._buckets) == [16, 32] and w.prefill_graphs.replays == 3
