"""train_draft.py end to end on CPU with a tiny random teacher (no download): the loss falls, resume is exact,
the exported folder loads with the project's loader, and the config validates its fields."""

from __future__ import annotations

import csv

import pytest
import torch

import train_draft
from conf.presets import model_preset
from conf.train_schema import TrainDraftConfig, build_train_config, register_train_configs
from runtime import distill
from tests.conftest import CONF_DIR
from tests.tolerances import assert_bitwise, assert_close

TINY = ["teacher=random:tiny-llama", "student_preset=tiny-llama-draft", "device=cpu", "batch_size=4",
        "seq_len=32", "generate_samples=4", "generate_max_new_tokens=16", "generate_batch_size=4",
        "code_prompt_tokens=16", "eval_tokens=256", "max_train_s=0", "warmup_steps=2", "lr=3e-3",
        "log_every_s=1000", "checkpoint_every=1000"]


def _cfg(tmp_path, name: str, *overrides: str) -> TrainDraftConfig:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_train_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        raw = compose("train_draft", [*TINY, f"out_dir={tmp_path / name}", "export_dir=null", *overrides])
    return build_train_config(raw, TrainDraftConfig)


def test_loss_falls_and_the_export_loads(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Say hi."}\n{"prompt": "Count to three."}\n')
    # 6 samples: 2 code continuations, 2 greedy completions (one per prompt), then 2 sampled ones
    cfg = _cfg(tmp_path, "run", "steps=40", f"export_dir={tmp_path / 'export'}", f"prompts_train={prompts}",
               "generate_samples=6", "code_generate_fraction=0.34")
    summary = train_draft.train(cfg)
    assert summary["data_tokens"]["instruction"] > 4 * len("<user>\nSay hi.\n<assistant>\n")
    with open(tmp_path / "run" / "loss.csv") as f:
        hist = list(csv.DictReader(f))
    first = sum(float(r["loss"]) for r in hist[:5]) / 5
    last = sum(float(r["loss"]) for r in hist[-5:]) / 5
    assert summary["finished"] and summary["steps"] == 40 and len(hist) == 40
    assert last < 0.7 * first, (first, last)
    assert (tmp_path / "run" / "loss.png").stat().st_size > 0
    assert set(summary["held_out"]) == {"code", "instruction"}
    # Exported HF folder: bf16 safetensors that the project's loader reads against the preset.
    from runtime.loader import build_model

    model = build_model(model_preset("tiny-llama-draft"), "float32", "cpu", checkpoint=tmp_path / "export")
    assert model.shape.vocab_size == 256
    card = (tmp_path / "export" / "MODEL_CARD.md").read_text()
    assert "| steps | 40 |" in card and "acceptance:begin" in card


def test_resume_continues_exactly(tmp_path):
    """6 steps in two invocations (stop after 3, then resume) == 6 steps in one, bit for bit on CPU."""
    torch.use_deterministic_algorithms(True)
    try:
        train_draft.train(_cfg(tmp_path, "split", "steps=6", "stop_after=3"))
        first = torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=False)
        assert first["state"]["step"] == 3
        resumed = train_draft.train(_cfg(tmp_path, "split", "steps=6", "resume=true"))
        whole = train_draft.train(_cfg(tmp_path, "whole", "steps=6"))
    finally:
        torch.use_deterministic_algorithms(False)
    assert resumed["steps"] == whole["steps"] == 6 and resumed["tokens"] == whole["tokens"]
    a = torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "whole" / "checkpoint.pt", weights_only=False)
    same = ("the same training steps in the same order on one machine (deterministic algorithms, state restored "
            "exactly from the checkpoint): determinism")
    for k, v in b["student"].items():
        assert_bitwise(a["student"][k], v, reason=same, what=k)
    losses = [torch.tensor([h["loss"] for h in ckpt["state"]["history"]], dtype=torch.float64) for ckpt in (a, b)]
    assert_bitwise(losses[0], losses[1], reason=same, what="losses")


@pytest.mark.parametrize("override,match", [
    ("student_preset=gpt5", r"student_preset: unknown model preset 'gpt5'"),
    ("init_embedding=pca", r"init_embedding: 'pca' is not one of svd, random"),
    ("mix_code=-1", r"mix_code: mixture weights must be >= 0"),
    ("device=tpu", r"device: 'tpu' is not one of auto, cuda, cpu"),
])
def test_config_errors_name_the_field(tmp_path, override, match):
    with pytest.raises(ValueError, match=match):
        _cfg(tmp_path, "bad", override)


def test_held_out_split_is_stable_and_disjoint():
    train = {rel for rel, _ in distill.stdlib_files(False, 5, 200_000)}
    held = {rel for rel, _ in distill.stdlib_files(True, 5, 200_000)}
    assert train and held and not train & held
    assert 0.02 < len(held) / (len(train) + len(held)) < 0.09
    # The committed code prompts come from held-out files (by path: same rule on any Python version).
    prompts = distill.read_jsonl("data/prompts_code_eval.jsonl")
    assert len(prompts) == 40 and all(distill.is_held_out(r["file"], 5) for r in prompts)
    train_p = {r["prompt"] for r in distill.read_jsonl("data/prompts_train.jsonl")}
    eval_p = {r["prompt"] for r in distill.read_jsonl("data/prompts_eval.jsonl")}
    assert len(train_p) >= 150 and len(eval_p) == 40 and not train_p & eval_p


def test_svd_embedding_keeps_the_principal_subspace():
    gen = torch.Generator().manual_seed(0)
    basis = torch.linalg.qr(torch.randn(16, 4, generator=gen)).Q  # rank-4 data in 16 dims
    emb = torch.randn(100, 4, generator=gen) @ basis.T
    proj = distill.svd_embedding(emb, 4)
    # Gram matrices (all pairwise logits of a tied head) are preserved exactly for rank <= dim.
    assert_close(proj @ proj.T, emb @ emb.T, torch.float32, reduction=16, what="Gram matrix")


def test_bf16_teacher_keeps_fp32_rotary_frequencies():
    """A bf16 cast would round RoPE's inverse frequencies to 8 bits (angles drift with the position)."""
    fp32 = distill.load_teacher("random:tiny-llama", torch.device("cpu"), torch.float32)
    bf16 = distill.load_teacher("random:tiny-llama", torch.device("cpu"), torch.bfloat16)
    assert bf16.model.embed_tokens.weight.dtype == torch.bfloat16
    assert bf16.model.rotary_emb.inv_freq.dtype == torch.float32
    assert_bitwise(bf16.model.rotary_emb.inv_freq, fp32.model.rotary_emb.inv_freq,
                   reason="both loads compute the frequencies by the same float32 operations; the cast must skip them")


# ------------------------------------------------------------- data/prompts_train.jsonl (scripts/make_prompts.py)

PROMPTS_CMD = ["scripts/make_prompts.py", "--out", "data/prompts_train.jsonl", "--count", "2000", "--seed", "0"]


def _make_prompts():
    import importlib.util

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("make_prompts", REPO / "scripts" / "make_prompts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train_prompts() -> list[str]:
    return [r["prompt"] for r in distill.read_jsonl("data/prompts_train.jsonl")]


def test_shipped_train_prompts_are_what_the_documented_command_makes(tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO

    assert "python " + " ".join(PROMPTS_CMD) in (REPO / "data" / "README.md").read_text()
    out = tmp_path / "prompts_train.jsonl"
    cmd = [sys.executable, *PROMPTS_CMD]
    cmd[cmd.index("--out") + 1] = str(out)
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True, timeout=120)
    assert out.read_bytes() == (REPO / "data" / "prompts_train.jsonl").read_bytes()


def test_train_prompts_keep_away_from_the_eval_prompts():
    mp = _make_prompts()
    held = mp.load_held_out()
    assert len(held.prompts) == 80
    # The rule itself: an eval prompt, a plural/punctuation variant and a template clone are all caught.
    assert held.too_similar("Explain how a rocket reaches orbit.")
    assert held.too_similar("explain how rockets reach orbit")
    assert held.too_similar("What is the difference between a frog and a toad?", content_only=False)
    assert not held.too_similar("Explain how a refrigerator keeps food cold.")
    prompts = _train_prompts()
    for i, p in enumerate(prompts):
        assert not held.too_similar(p, content_only=True), (i, p, held.max_similarity(p, True))
        if i >= len(mp.ORIGINAL):
            assert not held.too_similar(p, content_only=False), (i, p, held.max_similarity(p, False))
    # Original prompts that clash on all words (template clones, kept for comparability; listed in data/README.md).
    clashes = [p for p, _, _ in mp.all_words_clashes(prompts, held)]
    assert clashes == [
        "What is the difference between a virus and a bacterium?", "How do I write a good cover letter?",
        "Write a JavaScript function that reverses an array.", "What is the difference between HTTP and HTTPS?",
        "What is the difference between a noun and a verb?", "What is the difference between a lake and a pond?",
        "What is the difference between a republic and a monarchy?",
    ]


def test_train_prompts_are_many_unique_and_start_with_the_original_160():
    mp = _make_prompts()
    prompts = _train_prompts()
    assert len(prompts) >= 160 + 1300
    assert len({mp.norm_key(p) for p in prompts}) == len(prompts) >= 1500
    assert prompts[0] == "Explain how photosynthesis works in simple terms."
    assert prompts[159] == "Explain how to solve a quadratic equation."
    assert prompts[:160] == list(mp.ORIGINAL) and len(mp.ORIGINAL) == 160
    assert all(p.strip() == p and 10 <= len(p) <= 300 for p in prompts)
