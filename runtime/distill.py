"""Helpers of draft distillation (train_draft.py) and of the acceptance report: models, tokenizers, data.

- Models are Hugging Face `LlamaForCausalLM` modules (training needs autograd and fused attention, which the
  project's inference model does not offer). The teacher comes from the SmolLM2 GGUF through `gguf`
  (dequantised, llama.cpp's q/k row permutation undone) or is random from a shape preset (tests); the
  student is built from a shape preset, its embedding optionally the teacher's projected on its top
  principal directions.
- Tokenizers: the GGUF's (through transformers, chat template included) or bytes (tiny presets, vocab 256).
- Data: the Python standard library's source, split by file (a hash of the relative path holds files out),
  and text the teacher generates.

Nothing here parses argv or reads env vars; no training loop (that is train_draft.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from conf.presets import ModelShape, model_preset

REPO_ROOT = Path(__file__).resolve().parent.parent
RANDOM_PREFIX = "random:"


def resolve(path: str | Path) -> Path:
    """A path relative to the repository root (absolute paths are kept)."""
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


def pick_device(name: str) -> torch.device:
    """auto -> cuda if available else cpu."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


# ----------------------------------------------------------------------------------------------- models


def hf_llama_config(shape: ModelShape, **extra: Any):
    """The `LlamaConfig` of a llama-arch shape preset."""
    from transformers import LlamaConfig

    if shape.arch != "llama" or shape.rope_scaling is not None or shape.qkv_bias:
        raise ValueError(f"{shape.name}: only plain Llama shapes (no RoPE scaling, no qkv bias) are supported")
    return LlamaConfig(
        vocab_size=shape.vocab_size, hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers, num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads, head_dim=shape.head_dim, rope_theta=shape.rope_theta,
        max_position_embeddings=shape.max_position, rms_norm_eps=shape.rms_eps,
        tie_word_embeddings=shape.tie_embeddings, hidden_act="silu", attention_bias=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=2, **extra,
    )


def _unpermute_rows(w: torch.Tensor, n_head: int) -> torch.Tensor:
    # llama.cpp's converter interleaves each head's rotary halves: rows (h, 2, d/2) -> (h, d/2, 2).
    # Its inverse swaps the two middle axes back (the same reshape with 2 and d/2 exchanged).
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_GGUF_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}


def read_gguf_llama(path: str | Path) -> tuple[ModelShape, dict[str, torch.Tensor]]:
    """Read a llama-architecture GGUF: (its shape, HF-named fp32 state dict). Tied LM head if no output.weight."""
    import gguf

    reader = gguf.GGUFReader(str(path))

    def field(key: str):
        f = reader.fields[key]
        return f.contents()

    arch = field("general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: GGUF architecture {arch!r} is not llama")
    heads, kv_heads = int(field("llama.attention.head_count")), int(field("llama.attention.head_count_kv"))
    hidden = int(field("llama.embedding_length"))
    sd: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        w = torch.from_numpy(gguf.quants.dequantize(t.data, t.tensor_type).copy()).float()
        parts = t.name.split(".")
        if t.name == "token_embd.weight":
            sd["model.embed_tokens.weight"] = w
        elif t.name == "output_norm.weight":
            sd["model.norm.weight"] = w
        elif t.name == "output.weight":
            sd["lm_head.weight"] = w
        elif parts[0] == "blk" and parts[2] in _GGUF_NAMES:
            if parts[2] == "attn_q":
                w = _unpermute_rows(w, heads)
            elif parts[2] == "attn_k":
                w = _unpermute_rows(w, kv_heads)
            sd[f"model.layers.{parts[1]}.{_GGUF_NAMES[parts[2]]}.weight"] = w
        else:
            raise ValueError(f"{path}: unexpected tensor {t.name}")
    vocab, emb_dim = sd["model.embed_tokens.weight"].shape
    head_dim = int(field("llama.rope.dimension_count")) if "llama.rope.dimension_count" in reader.fields \
        else hidden // heads
    shape = ModelShape(
        name=Path(path).stem, arch="llama", vocab_size=vocab, hidden_size=emb_dim,
        intermediate_size=int(field("llama.feed_forward_length")), num_layers=int(field("llama.block_count")),
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, rope_theta=float(field("llama.rope.freq_base")),
        max_position=int(field("llama.context_length")),
        rms_eps=float(field("llama.attention.layer_norm_rms_epsilon")),
        tie_embeddings="lm_head.weight" not in sd,
    )
    return shape, sd


def load_teacher(spec: str, device: torch.device, dtype: torch.dtype = torch.float32, seed: int = 0):
    """The target as an HF LlamaForCausalLM in eval mode: from a GGUF path, or `random:<preset>`."""
    from transformers import LlamaForCausalLM

    if spec.startswith(RANDOM_PREFIX):
        shape = model_preset(spec.removeprefix(RANDOM_PREFIX), "teacher")
        torch.manual_seed(seed)
        model = LlamaForCausalLM(hf_llama_config(shape))
        _scale_random_logits(model)
    else:
        shape, sd = read_gguf_llama(resolve(spec))
        with torch.device("meta"):
            model = LlamaForCausalLM(hf_llama_config(shape))
        model.load_state_dict(sd, strict=False, assign=True)
        if shape.tie_embeddings:
            model.tie_weights()
        missing = {n for n, p in model.named_parameters() if p.is_meta}
        if missing:
            raise ValueError(f"{spec}: weights missing from the GGUF: {sorted(missing)[:5]}")
    rotary = type(model.model.rotary_emb)
    model.model.rotary_emb = rotary(model.config)  # off the meta device
    model = model.to(device=device, dtype=dtype)
    # Rebuilt after the cast, in fp32: a bf16 cast rounds the inverse frequencies to 8 bits, which skews
    # the rotary angles more and more with the position.
    model.model.rotary_emb = rotary(model.config).to(device)
    return model.eval().requires_grad_(False)


def _scale_random_logits(model) -> None:
    # A random tiny teacher with HF's 0.02-std init has near-uniform outputs: nothing to distil. Larger
    # embeddings give it peaked, context-dependent distributions, so the CPU test sees the loss fall.
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(25.0)


def svd_embedding(teacher_embedding: torch.Tensor, dim: int) -> torch.Tensor:
    """Teacher embedding [V, H] projected on its top-`dim` principal directions -> [V, dim].

    With a tied head, logits = h E^T; if the student's hidden state approximates h P (P: H x dim with
    orthonormal columns), then h P (E P)^T = h P P^T E^T, which keeps most of the teacher's logit geometry.
    """
    e = teacher_embedding.float()
    gram = e.T @ e  # [H, H]; eigenvectors = right singular vectors of E
    _, vecs = torch.linalg.eigh(gram)
    proj = vecs[:, -dim:].flip(1)
    return e @ proj


def build_student(shape: ModelShape, teacher=None, init_embedding: str = "svd", seed: int = 0):
    """A fresh draft from its shape preset (fp32, train mode)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    student = LlamaForCausalLM(hf_llama_config(shape))
    if teacher is not None and teacher.config.vocab_size != shape.vocab_size:
        raise ValueError(f"student vocabulary {shape.vocab_size} != teacher's {teacher.config.vocab_size}")
    if init_embedding == "svd" and teacher is not None:
        emb = svd_embedding(teacher.get_input_embeddings().weight.detach().cpu(), shape.hidden_size)
        with torch.no_grad():
            student.get_input_embeddings().weight.copy_(emb)
    return student


def save_hf_folder(model, folder: str | Path, tokenizer=None, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write config.json + model.safetensors (`dtype`) + tokenizer files (if any) into `folder`."""
    import copy

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = copy.deepcopy(model).to(dtype=dtype, device="cpu")
    out.config.dtype = str(dtype).removeprefix("torch.")
    out.save_pretrained(folder, safe_serialization=True)
    # Older readers look for rope_theta at the top level (transformers 5 nests it in rope_parameters).
    cfg_path = folder / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.setdefault("rope_theta", float(model.config.rope_parameters["rope_theta"]))
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    if tokenizer is not None:
        tokenizer.save(folder)
    return folder


def load_draft(spec: str, device: torch.device, dtype: torch.dtype = torch.float32, seed: int = 0):
    """The draft as an HF LlamaForCausalLM: from an HF folder, or `random:<preset>` (eval mode)."""
    from transformers import LlamaForCausalLM

    if spec.startswith(RANDOM_PREFIX):
        model = build_student(model_preset(spec.removeprefix(RANDOM_PREFIX), "draft"), seed=seed)
    else:
        model = LlamaForCausalLM.from_pretrained(resolve(spec), dtype=torch.float32)
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


# ------------------------------------------------------------------------------------------- tokenizers


class ByteTokenizer:
    """UTF-8 bytes as tokens (vocab 256) for the tiny presets; 0 doubles as end of text."""

    vocab_size = 256
    eos_id = 0

    def encode(self, text: str) -> list[int]:
        """Bytes of `text`."""
        return list(text.encode("utf-8"))

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` of each text."""
        return [self.encode(t) for t in texts]

    def decode(self, ids: Sequence[int]) -> str:
        """Bytes back to text (invalid sequences replaced)."""
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def chat(self, instruction: str) -> list[int]:
        """A minimal chat frame around one user instruction."""
        return self.encode(f"<user>\n{instruction}\n<assistant>\n")

    def save(self, folder: Path) -> None:
        """Nothing to save: bytes need no files."""


class GGUFTokenizer:
    """The tokenizer embedded in a GGUF (the project's `runtime.tokenizer`, as generate.py uses it) plus the
    GGUF's chat template (rendered with jinja2, as transformers does)."""

    def __init__(self, gguf_path: str | Path) -> None:
        import gguf
        import jinja2

        from runtime.tokenizer import gguf_tokenizer

        p = resolve(gguf_path)
        self.inner = gguf_tokenizer(p)
        self.vocab_size = len(self.inner.vocab())
        self.eos_id = int(self.inner.eos_id)
        field = gguf.GGUFReader(str(p)).fields.get("tokenizer.chat_template")
        self.chat_template = field.contents() if field is not None else None
        self._template = jinja2.Environment().from_string(self.chat_template) if self.chat_template else None

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (special-token strings such as <|im_start|> map to their ids)."""
        return self.inner.encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` of each text, in one parallel call of the `tokenizers` library."""
        if getattr(self.inner, "add_bos", False):
            return [self.encode(t) for t in texts]
        return [e.ids for e in self.inner.tk.encode_batch(list(texts), add_special_tokens=True)]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids (special tokens kept)."""
        return self.inner.decode(list(ids))

    def chat_text(self, instruction: str) -> str:
        """The chat template around one user instruction, ending with the assistant header."""
        if self._template is None:
            raise ValueError(f"{self.inner.source}: the GGUF has no tokenizer.chat_template")
        return self._template.render(messages=[{"role": "user", "content": instruction}],
                                     add_generation_prompt=True)

    def chat(self, instruction: str) -> list[int]:
        """Token ids of `chat_text(instruction)`."""
        return self.encode(self.chat_text(instruction))

    def save(self, folder: Path) -> None:
        """tokenizer.json + tokenizer_config.json (special tokens and chat template) into `folder`."""
        self.inner.tk.save(str(folder / "tokenizer.json"))
        ids = self.inner.tk.id_to_token
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192,
                  "bos_token": ids(self.inner.bos_id) if self.inner.bos_id is not None else None,
                  "eos_token": ids(self.eos_id), "pad_token": ids(self.eos_id), "add_bos_token": False,
                  "chat_template": self.chat_template}
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def load_tokenizer(teacher: str) -> ByteTokenizer | GGUFTokenizer:
    """The teacher's tokenizer: bytes for random-weight presets, else the GGUF's.

    A random teacher with a larger vocabulary (e.g. `random:smollm2-135m`, a GPU throughput smoke run) sees
    only byte ids 0..255; its other rows are never read as inputs but still cost their full LM-head share.
    """
    if teacher.startswith(RANDOM_PREFIX):
        vocab = model_preset(teacher.removeprefix(RANDOM_PREFIX), "teacher").vocab_size
        if vocab < ByteTokenizer.vocab_size:
            raise ValueError(f"{teacher}: random teachers use the byte tokenizer and need a vocabulary of at "
                             f"least {ByteTokenizer.vocab_size} tokens, got {vocab}")
        return ByteTokenizer()
    return GGUFTokenizer(teacher)


# ------------------------------------------------------------------------------------------------- data


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Records of a JSON-lines file (blank lines skipped)."""
    lines = resolve(path).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def is_held_out(relpath: str, percent: int) -> bool:
    """Whether a stdlib file is in the held-out split: a stable hash of its relative path, not the machine."""
    digest = hashlib.sha1(relpath.replace("\\", "/").encode()).hexdigest()
    return int(digest[:8], 16) % 100 < percent


def stdlib_files(held_out: bool, percent: int, max_bytes: int) -> list[tuple[str, Path]]:
    """(relative path, path) of the stdlib's .py files in one split, sorted; site-packages excluded."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if "site-packages" in rel or "dist-packages" in rel:
            continue
        try:
            size = p.stat().st_size
        except OSError:
            continue
        if 0 < size <= max_bytes and is_held_out(rel, percent) == held_out:
            out.append((rel, p))
    return out


def code_eval_prompts(percent: int, n: int, chars: int = 800, min_bytes: int = 3000) -> list[dict[str, str]]:
    """Snippets of held-out stdlib files: from the first top-level/def/class line after 40% of the file,
    whole lines up to `chars` characters. Skips `encodings/` (codec tables, not code anyone writes).

    Written once into data/prompts_code_eval.jsonl, so the report does not depend on the Python version.
    """
    out = []
    for rel, p in stdlib_files(True, percent, 10**9):
        if rel.startswith("encodings/") or p.stat().st_size < min_bytes:
            continue
        lines = p.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        i = int(0.4 * len(lines))
        while i < len(lines) and not (lines[i].strip() and (not lines[i][0].isspace()
                                                             or lines[i].lstrip().startswith(("def ", "class ")))):
            i += 1
        text = ""
        while i < len(lines) and len(text) < chars:
            text += lines[i]
            i += 1
        if len(text) >= chars // 2:
            out.append({"prompt": text, "file": rel})
        if len(out) == n:
            break
    return out


def tokenize_files(files: Sequence[tuple[str, Path]], tok, max_tokens: int = 0, chunk: int = 64) -> torch.Tensor:
    """Concatenated tokens of the files (each followed by the end-of-text id), int32; stops after max_tokens."""
    pieces: list[torch.Tensor] = []
    total = 0
    for i in range(0, len(files), chunk):
        texts = [p.read_text(encoding="utf-8", errors="replace") for _, p in files[i:i + chunk]]
        for ids in tok.encode_batch(texts):
            pieces.append(torch.tensor([*ids, tok.eos_id], dtype=torch.int32))
            total += len(ids) + 1
        if max_tokens and total >= max_tokens:
            break
    return torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.int32)


def code_snippets(stream: torch.Tensor, n: int, length: int, gen: torch.Generator) -> list[list[int]]:
    """`n` random windows of `length` tokens of a token stream (prompts for teacher continuations)."""
    if n == 0 or stream.numel() <= length:
        return []
    starts = torch.randint(0, stream.numel() - length, (n,), generator=gen)
    return [stream[s:s + length].tolist() for s in starts.tolist()]


@torch.no_grad()
def teacher_generate(teacher, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float,
                     eos_id: int, batch_size: int, seed: int, autocast: bool = False,
                     max_time_s: float = 0.0) -> list[list[int]]:
    """Prompt + completion ids per prompt (greedy if temperature == 0; completion stops after EOS).

    Prompts of a batch are left-padded; the teacher's output does not depend on the padding. `max_time_s`
    (0 = none) bounds the wall time: each batch gets an equal share and stops early (shorter completions).
    """
    num_batches = -(-len(prompts) // batch_size)
    device = next(teacher.parameters()).device
    out: list[list[int]] = []
    for b in range(0, len(prompts), batch_size):
        batch = prompts[b:b + batch_size]
        width = max(len(p) for p in batch)
        ids = torch.full((len(batch), width), eos_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, p in enumerate(batch):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        torch.manual_seed(seed + b)
        kw: dict[str, Any] = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} \
            if temperature > 0 else {"do_sample": False}
        if max_time_s > 0:
            kw["max_time"] = max_time_s / num_batches
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            gen = teacher.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                   max_new_tokens=max_new_tokens, min_new_tokens=1, eos_token_id=eos_id,
                                   pad_token_id=eos_id, **kw)
        for i, p in enumerate(batch):
            comp = gen[i, width:].tolist()
            if eos_id in comp:
                comp = comp[:comp.index(eos_id) + 1]
            out.append([*p, *comp])
    return out


class MixtureSampler:
    """Batches of random windows from several token streams, each row's stream drawn by weight."""

    def __init__(self, streams: dict[str, torch.Tensor], weights: dict[str, float]) -> None:
        self.names = [k for k in streams if weights.get(k, 0) > 0 and streams[k].numel() > 1]
        if not self.names:
            raise ValueError("no data: every stream with a positive weight is empty")
        self.streams = streams
        self.weights = torch.tensor([weights[k] for k in self.names], dtype=torch.float64)

    def sample(self, batch: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
        """[batch, seq_len] int64 token windows (short streams are tiled)."""
        rows = []
        which = torch.multinomial(self.weights, batch, replacement=True, generator=gen)
        for k in which.tolist():
            s = self.streams[self.names[k]]
            if s.numel() <= seq_len:
                s = s.repeat(seq_len // s.numel() + 2)
            start = int(torch.randint(0, s.numel() - seq_len, (1,), generator=gen))
            rows.append(s[start:start + seq_len])
        return torch.stack(rows).long()


# ------------------------------------------------------------------------------------------ loss, schedule


def distill_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, kl_weight: float,
                 ce_weight: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """kl_weight * KL(teacher || student) + ce_weight * CE(student, teacher argmax), per token (fp32).

    Also returns detached 0-d stats (kl, ce, top-1 agreement of the argmaxes); they stay on the device, so
    the caller decides when to synchronise.
    """
    s = student_logits.float().flatten(0, -2)
    t = teacher_logits.float().flatten(0, -2)
    s_logp = F.log_softmax(s, dim=-1)
    t_logp = F.log_softmax(t, dim=-1)
    kl = F.kl_div(s_logp, t_logp, log_target=True, reduction="batchmean")
    t_top = t.argmax(-1)
    ce = F.nll_loss(s_logp, t_top)
    loss = kl_weight * kl + ce_weight * ce
    agree = (s.argmax(-1) == t_top).float().mean()
    return loss, {"kl": kl.detach(), "ce": ce.detach(), "agree": agree}


def lr_at(step: int, progress: float, lr: float, warmup_steps: int, min_lr_ratio: float) -> float:
    """Linear warm-up over `warmup_steps`, then cosine from lr to lr * min_lr_ratio as progress goes 0 -> 1."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    p = min(max(progress, 0.0), 1.0)
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))
