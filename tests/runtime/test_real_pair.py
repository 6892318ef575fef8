"""The real pair (SmolLM2-135M-Instruct + the shipped draft) and the acceptance report's machinery.

Fast tests run the report's draft-tree code on tiny random models (no download). Tests of the shipped draft
skip with a reason when models/smollm2-draft has no checkpoint yet (it is trained on a GPU by
scripts/gpu.sh train_draft); the reproduction of its recorded acceptance also needs the target's GGUF and
is `slow`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conf.presets import model_preset
from conf.schema import AcceptanceConfig
from conf.train_schema import AcceptanceReportConfig
from runtime import acceptance_report as A
from runtime.distill import load_draft, load_teacher
from tests.tolerances import assert_close, forward_terms

REPO = Path(__file__).resolve().parents[2]
DRAFT = REPO / "models" / "smollm2-draft"
GGUF = REPO / ".cache" / "models" / "smollm2-135m-instruct.gguf"
REPORT = REPO / "profiles" / "acceptance" / "smollm2.json"

needs_draft = pytest.mark.skipif(
    not (DRAFT / "model.safetensors").exists(),
    reason="models/smollm2-draft has no checkpoint yet (train it: scripts/gpu.sh train_draft)")
needs_gguf = pytest.mark.skipif(not GGUF.exists(), reason="no target GGUF (python -m runtime.fetch_smollm2)")


def _tiny_pair():
    target = load_teacher("random:tiny-llama", torch.device("cpu"), seed=1)
    draft = load_draft("random:tiny-llama-draft", torch.device("cpu"), seed=2)
    with torch.no_grad():  # peaked draft distributions, so trees are deep and varied
        draft.model.embed_tokens.weight.mul_(25.0)
    return target, draft


# ------------------------------------------------------------------------------------- report machinery


def test_draft_runner_matches_hf_forward_and_tree_nodes_match_teacher_forcing():
    _, draft = _tiny_pair()
    runner = A.DraftRunner(draft)
    seq = torch.randint(0, 256, (30,), generator=torch.Generator().manual_seed(0))
    logits, kv = runner.prefix(seq)
    with torch.no_grad():
        ref = draft(input_ids=seq[None]).logits[0]
    chain = forward_terms(model_preset("tiny-llama-draft"), 35)
    assert_close(logits, ref, torch.float32, reduction=chain, what="prefix vs HF")
    # A chain of tree nodes along seq from root 9 sees exactly the true prefix: same logits.
    roots = torch.tensor([9, 14])
    m = 5
    own = [(torch.zeros(2, m, runner.kvh, runner.d), torch.zeros(2, m, runner.kvh, runner.d))
           for _ in range(runner.num_layers)]
    anc = torch.zeros(2, m, dtype=torch.bool)
    for n in range(m):
        anc[:, n] = True
        out = runner.nodes(seq[roots + 1 + n], roots + 1 + n, kv, roots, own, n, anc)
        assert_close(out, logits[roots + 1 + n], torch.float32, reduction=chain, what=f"tree node {n}")


def test_tree_acceptance_agrees_with_greedy_verify_and_chain_bounds():
    target, draft = _tiny_pair()
    runner = A.DraftRunner(draft)
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 256, (12,), generator=gen).tolist()
    seq = torch.tensor(A.teacher_generate(target, [prompt], 40, 0.0, eos_id=-1, batch_size=1, seed=0)[0])
    sizes = [2, 4, 8, 16]
    # verify_count: every root's bs=2 tree is re-verified with runtime.verify.greedy_verify (raises if not equal)
    stats = A.measure_prompt(runner, seq, len(prompt), 32, depths=6, ranks=4, gammas=[1, 2, 4, 8],
                             sizes=sizes, batch_roots=7, verify_count=32)
    for bs in (4, 8, 16):
        tree = A.grow_trees(runner, seq, *runner.prefix(seq), torch.arange(11, 43), bs - 1, 4)
        acc = A.tree_accepted(tree, seq, torch.arange(11, 43), [bs])[:, 0]
        A.verify_sample(tree, seq, torch.arange(11, 43), bs, acc, 32)
    assert stats.roots == 32
    tree_mean = (stats.tree_sum / stats.roots).tolist()
    chain_mean = (stats.chain_sum / stats.roots).tolist()
    assert all(1.0 <= t <= bs for t, bs in zip(tree_mean, sizes))
    assert tree_mean == sorted(tree_mean), "a larger best-first tree contains the smaller one"
    assert chain_mean == sorted(chain_mean) and chain_mean[0] <= 2.0
    # bs = 2 is a chain of one token: both must agree exactly.
    assert tree_mean[0] == pytest.approx(chain_mean[0])


def test_self_speculation_accepts_every_chain_token():
    """Draft == target: the draft's argmax is the target's greedy token at every position."""
    target, _ = _tiny_pair()
    runner = A.DraftRunner(target)
    prompt = list(range(40, 60))
    seq = torch.tensor(A.teacher_generate(target, [prompt], 24 + 8, 0.0, eos_id=-1, batch_size=1, seed=0)[0])
    stats = A.measure_prompt(runner, seq, len(prompt), 24, depths=4, ranks=4, gammas=[1, 4, 8], sizes=[4, 8],
                             batch_roots=64)
    assert (stats.chain_sum / stats.roots).tolist() == [2.0, 5.0, 9.0]
    assert stats.pos_hits[:, 0].tolist() == stats.pos_total.tolist()
    assert stats.top1 == stats.roots


def test_report_on_tiny_models_is_a_valid_acceptance_file(tmp_path):
    cfg = AcceptanceReportConfig(target="random:tiny-llama", draft="random:tiny-llama-draft", device="cpu",
                                 max_prompts=2, max_new_tokens=6, margin_tokens=4, depths=3, ranks=4,
                                 tree_sizes=[4, 8], check_prompts=1, check_new_tokens=3,
                                 out=str(tmp_path / "acc.json"))
    report = A.run_report(cfg)
    path = A.write_report(report, cfg.out)
    data = json.loads(path.read_text())
    assert set(data) >= {"kind", "positional", "chain", "tree", "by_domain", "check", "meta"}
    assert set(data["by_domain"]) == {"code", "instruction"}
    assert data["by_domain"]["code"]["roots"] == 2 * 6
    assert list(data["tree"]) == ["4", "8"] and list(data["chain"]) == [str(g) for g in range(1, 9)]
    assert len(data["positional"]) == 3 and all(len(r) == 4 for r in data["positional"])
    AcceptanceConfig(kind="positional", positional=data["positional"], file=str(path)).validate()
    assert data["meta"]["prompts"] == {"code": 2, "instruction": 2} and data["meta"]["tokens"] > 0


def test_acceptance_config_points_at_the_report():
    from tests.conftest import build

    cfg = build("generate", ["acceptance=smollm2"])
    assert cfg.acceptance.file == "profiles/acceptance/smollm2.json"
    assert cfg.model.draft is not None and cfg.model.draft.checkpoint == "models/smollm2-draft"


def _runtime_logits(model, ids: torch.Tensor) -> torch.Tensor:
    from runtime.attention import AttnMeta, make_attention_backend
    from runtime.kv_cache import KVCache

    layers, heads, dim = model.cache_spec()
    cache = KVCache(layers, ids.shape[0], heads, dim, torch.float32, "cpu")
    with torch.no_grad():
        return model(ids, AttnMeta.causal(0, ids.shape[0], "cpu"), cache, make_attention_backend("reference"))


@pytest.mark.slow
@needs_gguf
def test_distillation_teacher_is_the_runtime_target():
    """The HF teacher built from the GGUF (train_draft.py, the report) computes what runtime/model.py does."""
    from runtime.loader import build_model

    ids = torch.randint(0, 49152, (40,), generator=torch.Generator().manual_seed(0))
    runtime = build_model(model_preset("smollm2-135m"), "float32", "cpu", checkpoint=GGUF)
    teacher = load_teacher(str(GGUF), torch.device("cpu"))
    with torch.no_grad():
        hf = teacher(input_ids=ids[None]).logits[0]
    assert_close(_runtime_logits(runtime, ids), hf, torch.float32, reduction=forward_terms(runtime.shape, 40),
                 what="runtime vs HF teacher")


# ----------------------------------------------------------------------------------------- shipped draft


@needs_draft
def test_shipped_draft_loads_with_the_project_loader_and_fits_the_budget():
    from runtime.loader import build_model

    shape = model_preset("smollm2-draft")
    model = build_model(shape, "float32", "cpu", checkpoint=DRAFT)
    assert model.shape.vocab_size == 49152
    ids = torch.randint(0, 49152, (24,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        hf = load_draft(str(DRAFT), torch.device("cpu"))(input_ids=ids[None]).logits[0]
    assert_close(_runtime_logits(model, ids), hf, torch.float32, reduction=forward_terms(shape, 24),
                 what="runtime vs HF draft")
    assert (DRAFT / "model.safetensors").stat().st_size <= 25 * 10**6
    card = (DRAFT / "MODEL_CARD.md").read_text()
    assert "acceptance:begin" in card and "Not measured yet" not in card


@needs_draft
@needs_gguf
def test_shipped_draft_shares_the_targets_vocabulary():
    from runtime.tokenizer import check_same_vocab, load_tokenizer

    check_same_vocab(load_tokenizer(DRAFT), load_tokenizer(GGUF))
    assert json.loads((DRAFT / "config.json").read_text())["vocab_size"] == 49152


@pytest.mark.slow
@needs_draft
@needs_gguf
@pytest.mark.skipif(not REPORT.exists(), reason="no recorded report (python -m runtime.acceptance_report)")
def test_shipped_draft_reproduces_its_recorded_acceptance():
    """The report's small fixed check set, re-measured on CPU in fp32, matches what was recorded.

    Both runs are fp32 greedy: only near-tied logits can flip between devices, which moves a mean over
    ~100 roots by a few hundredths; 0.15 tokens per verify is far below what a wrong checkpoint gives.
    """
    recorded = json.loads(REPORT.read_text())
    check = recorded["check"]
    cfg = AcceptanceReportConfig(max_prompts=check["prompts_per_domain"], max_new_tokens=check["max_new_tokens"],
                                 margin_tokens=check["margin_tokens"], depths=recorded["meta"]["depths"],
                                 ranks=recorded["meta"]["ranks"], tree_sizes=[int(b) for b in recorded["tree"]],
                                 device="cpu")
    from runtime.distill import load_tokenizer

    tok = load_tokenizer(str(GGUF))
    target = load_teacher(str(GGUF), torch.device("cpu"))
    runner = A.DraftRunner(load_draft(str(DRAFT), torch.device("cpu")))
    for domain in A.DOMAINS:
        prompts = A.load_prompts(cfg, tok, domain, cfg.max_prompts)
        got, _ = A.measure_domain(target, runner, tok, prompts, cfg.max_new_tokens, cfg.margin_tokens, cfg)
        want = check[domain]
        assert got["roots"] == want["roots"]
        for bs in ("4", "8"):
            assert got["tree"][bs] == pytest.approx(want["tree"][bs], abs=0.15), (domain, bs)
        assert got["chain"]["4"] == pytest.approx(want["chain"]["4"], abs=0.15), domain
