"""Tokenizers: Hugging Face tokenizer.json, a GGUF file's embedded vocabulary, or raw bytes.

`load_tokenizer(source)` picks by source: a folder (its tokenizer.json), a tokenizer.json file, a .gguf file
(byte-level BPE rebuilt from `tokenizer.ggml.*` with the `tokenizers` library), or None for `ByteTokenizer`,
the fallback of random-weight models (token id = UTF-8 byte). `check_same_vocab(draft, target)` guards the
speculative pair: draft token ids are only meaningful to the target if both vocabularies are identical.

GGUF pre-tokenization follows llama.cpp's `tokenizer.ggml.pre` (how the merges were learned): "smollm" splits
digits one by one before GPT-2's regex (as SmolLM2's own tokenizer.json does); "llama-bpe" and "qwen2" use
their split regexes; anything else uses GPT-2's. SentencePiece GGUF vocabularies (`tokenizer.ggml.model` =
llama) are not supported. Library code: no chat templates, no network.
"""

from __future__ import annotations

import json
from pathlib import Path

_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GGUF_CONTROL, _GGUF_USER_DEFINED = 3, 4  # llama.cpp token types


class Tokenizer:
    """Text <-> token ids. `vocab()` maps every token string to its id (for vocabulary checks)."""

    source: str = "?"
    eos_id: int | None = None
    bos_id: int | None = None

    @property
    def vocab_size(self) -> int:
        """Number of token ids the tokenizer defines."""
        return len(self.vocab())

    def vocab(self) -> dict[str, int]:
        """Token string -> id, for every id."""
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (with a BOS token if the tokenizer adds one)."""
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        """Text of `ids`."""
        raise NotImplementedError


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes as token ids 0..255: the tokenizer of random-weight models (no EOS, no BOS)."""

    vocab_size = 256

    def __init__(self) -> None:
        """The 256-token byte vocabulary."""
        self.source = "bytes"

    def vocab(self) -> dict[str, int]:
        """`<0xHH>` -> byte value."""
        return {f"<0x{b:02X}>": b for b in range(256)}

    def encode(self, text: str) -> list[int]:
        """The UTF-8 bytes of `text`."""
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        """Bytes back to text (invalid UTF-8 replaced)."""
        return bytes(ids).decode("utf-8", errors="replace")


class HFTokenizer(Tokenizer):
    """A `tokenizers.Tokenizer` (from tokenizer.json or rebuilt from a GGUF)."""

    def __init__(self, tk, source: str, eos_id: int | None = None, bos_id: int | None = None,
                 add_bos: bool = False) -> None:
        """Wrap `tk`; `add_bos` prepends `bos_id` to every encoding (GGUF's add_bos_token)."""
        self.tk, self.source, self.eos_id, self.bos_id, self.add_bos = tk, source, eos_id, bos_id, add_bos

    def vocab(self) -> dict[str, int]:
        """Token string -> id, added tokens included."""
        return self.tk.get_vocab(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, special tokens of the tokenizer's post-processor included."""
        ids = self.tk.encode(text, add_special_tokens=True).ids
        return [self.bos_id, *ids] if self.add_bos and self.bos_id is not None else ids

    def decode(self, ids: list[int]) -> str:
        """Text of `ids`, special tokens kept."""
        return self.tk.decode(ids, skip_special_tokens=False)


def _hf_folder_tokenizer(path: Path) -> HFTokenizer:
    """tokenizer.json of a folder (or the file itself), EOS from config.json or tokenizer_config.json."""
    from tokenizers import Tokenizer as TkTokenizer

    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.exists():
        raise FileNotFoundError(f"tokenizer: {file} does not exist")
    try:
        tk = TkTokenizer.from_file(str(file))
    except Exception as e:
        raise ValueError(f"tokenizer: cannot read {file} ({e})") from e
    eos: int | None = None
    config, tok_config = file.parent / "config.json", file.parent / "tokenizer_config.json"
    if config.exists():
        eos_field = json.loads(config.read_text()).get("eos_token_id")
        eos = eos_field[0] if isinstance(eos_field, list) else eos_field
    if eos is None and tok_config.exists():
        eos_tok = json.loads(tok_config.read_text()).get("eos_token")
        eos_tok = eos_tok.get("content") if isinstance(eos_tok, dict) else eos_tok
        eos = tk.token_to_id(eos_tok) if eos_tok else None
    return HFTokenizer(tk, str(file), eos_id=eos)


def gguf_tokenizer(path: str | Path) -> HFTokenizer:
    """The byte-level BPE tokenizer embedded in a GGUF file (`tokenizer.ggml.model` = gpt2)."""
    import gguf
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as TkTokenizer

    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:
        raise ValueError(f"tokenizer: {path} is not a readable GGUF file ({e})") from e

    def field(key: str, default: object = None) -> object:
        f = reader.fields.get(key)
        return default if f is None else f.contents()

    kind = field("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(f"tokenizer: {path}: tokenizer.ggml.model = {kind!r} is not supported (only gpt2, "
                         "byte-level BPE)")
    tokens: list[str] = field("tokenizer.ggml.tokens")
    types: list[int] = field("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges", [])]
    tk = TkTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    pre = field("tokenizer.ggml.pre", "default")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre in ("llama-bpe", "llama3", "qwen2"):
        split = _QWEN2_SPLIT if pre == "qwen2" else _LLAMA3_SPLIT
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tk.pre_tokenizer = byte_level
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(tokens, types) if ty == _GGUF_CONTROL])
    tk.add_tokens([AddedToken(t, special=False, normalized=False)
                   for t, ty in zip(tokens, types) if ty == _GGUF_USER_DEFINED])
    return HFTokenizer(tk, str(path), eos_id=field("tokenizer.ggml.eos_token_id"),
                       bos_id=field("tokenizer.ggml.bos_token_id"),
                       add_bos=bool(field("tokenizer.ggml.add_bos_token", False)))


def load_tokenizer(source: str | Path | None) -> Tokenizer:
    """The tokenizer of `source`: HF folder / tokenizer.json / .gguf file; None = ByteTokenizer."""
    if source is None:
        return ByteTokenizer()
    from conf.paths import resolve_path

    path = resolve_path(source)
    if not path.exists():
        raise FileNotFoundError(f"tokenizer: {source} does not exist (an HF folder, tokenizer.json or .gguf file)")
    if path.suffix == ".gguf":
        return gguf_tokenizer(path)
    return _hf_folder_tokenizer(path)


def check_same_vocab(a: Tokenizer, b: Tokenizer, names: tuple[str, str] = ("draft", "target")) -> None:
    """Raise ValueError unless `a` and `b` map exactly the same token strings to the same ids."""
    va, vb = a.vocab(), b.vocab()
    label_a, label_b = f"{names[0]} tokenizer ({a.source})", f"{names[1]} tokenizer ({b.source})"
    if len(va) != len(vb):
        raise ValueError(f"tokenizer: {label_a} has {len(va)} tokens but {label_b} has {len(vb)}; speculative "
                         "decoding needs identical vocabularies")
    if va != vb:
        ia, ib = {i: t for t, i in va.items()}, {i: t for t, i in vb.items()}
        i = next(i for i in sorted(set(ia) | set(ib)) if ia.get(i) != ib.get(i))
        raise ValueError(f"tokenizer: token id {i} is {ia.get(i)!r} in {label_a} but {ib.get(i)!r} in {label_b}; "
                         "speculative decoding needs identical vocabularies")
