"""GPU tests (marker `gpu`): how a CUDA-graph step's inputs reach the device and its outputs the host, and launch
orders that must not change its results (runtime/graphs.py `StepBuffers` / `StepGraph`, kernels/pdl.py): every
variant's replays are compared bitwise with a reference graph's, step after step, on the tiny bf16 model.

Run on a GPU machine with the interpreter off: TRITON_INTERPRET=0 pytest -m gpu tests/gpu -p no:cacheprovider
"""

from __future__ import annotations

import importlib

import pytest
import torch

from conf.presets import MODEL_PRESETS
from kernels.pdl import pdl
from runtime.attention import AttnMeta, make_attention_backend
from runtime.fused_decode import FusedDecoder, KernelPlan
from runtime.graphs import StepGraph, StepSpec
from runtime.kv_cache import KVCache
from runtime.loader import build_model
from runtime.tree import ancestor_mask
from tests.tolerances import assert_bitwise, assert_close, forward_terms

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

STAGING_TREE = (ancestor_mask([-1, 0, 0, 1, 1, 2, 3, 3], 8), [0, 1, 1, 2, 2, 2, 3, 3])
"""The staging tests' 8-node tree: its [8, 8] ancestor mask and the nodes' depths."""


def _staging_case(names: tuple[str, ...], prefixes: tuple[int, ...]) -> tuple:
    """The staging tests' setup: the tiny bf16 model (skinny GEMMs), the Triton attention, one 200-slot cache per name
    with the same 150-token prompt prefilled, and one step per prefix length ((8 random token ids, prefix))."""
    shape = MODEL_PRESETS["tiny-llama"]
    model = FusedDecoder(build_model(shape, "bfloat16", "cuda", seed=3), KernelPlan(skinny=True))
    attn = make_attention_backend("triton")
    layers, heads, head_dim = model.cache_spec()
    caches = {s: KVCache(layers, 200, heads, head_dim, model.dtype, "cuda") for s in names}
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, shape.vocab_size, (150,), generator=g).cuda()
    for cache in caches.values():
        model(prompt, AttnMeta.causal(0, 150, "cuda"), cache, attn)
    steps = [(torch.randint(0, shape.vocab_size, (8,), generator=g), p) for p in prefixes]
    return model, attn, caches, steps


def _replay(graph: StepGraph, ids: torch.Tensor, prefix: int):
    """One step of STAGING_TREE's 8 nodes at `prefix` (tree slots 0..7); the graph's static outputs."""
    mask, depth = STAGING_TREE
    return graph.replay(ids, torch.tensor([prefix + d for d in depth]), torch.arange(8), prefix, mask)


@torch.no_grad()
@pytest.mark.parametrize("qkv_rope", [False, True], ids=["skinny_qkv", "qkv_rope"])
def test_early_norms_replay_like_late(qkv_rope):
    """The norms released early (the "norm" PDL role) change the launch order only: the logits are those of the norms
    released late (to bf16 rounding: the norm kernels are another specialisation; a race would be far off). The
    tiny model's rows take kernels.norm.EARLY_MAX_ROWS_TINY (16 by default): 8 passed in here (KernelPlan
    early_norm_rows) so that its 8-row norms take the role whatever the default."""
    norm = importlib.import_module("kernels.norm")
    model, attn, caches, steps = _staging_case(("late", "early"), (20, 77, 141))
    rows = norm.EARLY_ROWS._replace(tiny=8)
    model = FusedDecoder(model.model, KernelPlan(skinny=True, qkv_rope=qkv_rope, early_norm_rows=tuple(rows)))
    with pdl(True, norm="late"):
        late = StepGraph(model, caches["late"], attn, StepSpec(8, 8))
    with pdl(True, norm="early"):
        assert norm.norm_role(8, 1, rows) == "norm"
        early = StepGraph(model, caches["early"], attn, StepSpec(8, 8))
    for k, (ids, p) in enumerate(steps):
        a = _replay(late, ids, p).clone()
        b = _replay(early, ids, p).clone()
        assert_close(b, a, torch.bfloat16, reduction=forward_terms(MODEL_PRESETS["tiny-llama"], 160),
                     what=f"step {k}: norms released early")


@torch.no_grad()
def test_in_graph_staging_and_spin_readback_replay_like_the_logits():
    """Every graph copies its pinned inputs itself; one with a head also copies the head's outputs to pinned host
    memory. Those host copies equal the head applied to a logits-only graph's outputs bitwise (its replays guarded by
    an event instead of a ticket), step after step, with the loads queued back to back (each load waits for the
    previous replay's ticket) and interleaved with host reads."""
    model, attn, caches, steps = _staging_case(("logits", "head"), (20, 77, 141, 150, 33))

    def head(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        top = torch.topk(logits.float(), 4, dim=-1)
        return top.values, top.indices

    graphs = {"logits": StepGraph(model, caches["logits"], attn, StepSpec(8, 8)),
              "head": StepGraph(model, caches["head"], attn, StepSpec(8, 8, keep_rows=8, head=head))}
    assert not graphs["logits"].readback and graphs["head"].readback
    logits = [_replay(graphs["logits"], ids, p).clone() for ids, p in steps]  # back to back: the event guards loads
    want = [tuple(t.clone() for t in head(x)) for x in logits]
    spun = graphs["head"]
    for k, (ids, p) in enumerate(steps):
        _replay(spun, ids, p)
        if k % 2:  # odd steps: read now; even ones: the next load waits for the ticket itself
            continue
        lp, tok = spun.host_outputs()
        assert spun._flag[0] == k + 1
        assert_bitwise(torch.from_numpy(lp), want[k][0], what=f"step {k}: log-probs",
                       reason="the same captured kernels and head ops on the same inputs, outputs copied to the host")
        assert torch.equal(torch.from_numpy(tok), want[k][1].cpu()), f"step {k}: ids differ"
    assert spun._flag[0] == len(steps)
    with pytest.raises(ValueError, match="no head or verdict to read back"):
        graphs["logits"].host_outputs()
