"""Checkpoint readers: Hugging Face safetensors folders and GGUF files, read slice by slice.

`open_checkpoint(path)` returns a `Checkpoint` that can (a) check a model shape preset against the
checkpoint's own config (config.json or GGUF metadata) and (b) read any rows/columns of the tensors that make
up one of our parameters (`read_param`). The model's fused parameters (`wqkv` = q|k|v, `w13` = gate|up) are
assembled from their checkpoint pieces; a TP rank asks only for its `ShardSpec` indices, so it reads only its
shard (safetensors slices are lazy; GGUF rows are dequantised row by row). Exception: a column-sharded GGUF
matrix (`wo`, `w2` under TP > 1) is dequantised whole, then sliced, because GGUF quantisation blocks run along
rows.

GGUF specifics: tensors are dequantised with `gguf.quants.dequantize` (any quant type, e.g. SmolLM2's Q4_1),
and llama.cpp's converter permutes the q/k rows of Llama checkpoints inside every head (interleaved RoPE pairs
instead of HF's rotate-half halves); `_gguf_unpermute` maps each HF row to its GGUF row so logits match HF.

Llama 3.1+ GGUFs carry their RoPE scaling as `rope_freqs.weight` (a divisor per frequency); it is checked
against the preset's scaling, which the model computes. Errors are `CheckpointError` (a ValueError) naming
the file and the field or tensor. Not supported: other architectures (Mistral, Gemma, ...).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from conf.presets import ModelShape
from runtime.model import rope_inv_freq

HF_ARCHS = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
GGUF_ARCHS = ("llama", "qwen2")

# Our parameter roles -> checkpoint tensor names (without .weight / .bias); {i} is the layer.
HF_NAMES = {
    "embed": "model.embed_tokens", "norm": "model.norm", "lm_head": "lm_head",
    "attn_norm": "model.layers.{i}.input_layernorm", "mlp_norm": "model.layers.{i}.post_attention_layernorm",
    "q": "model.layers.{i}.self_attn.q_proj", "k": "model.layers.{i}.self_attn.k_proj",
    "v": "model.layers.{i}.self_attn.v_proj", "o": "model.layers.{i}.self_attn.o_proj",
    "gate": "model.layers.{i}.mlp.gate_proj", "up": "model.layers.{i}.mlp.up_proj",
    "down": "model.layers.{i}.mlp.down_proj",
}
GGUF_NAMES = {
    "embed": "token_embd", "norm": "output_norm", "lm_head": "output",
    "attn_norm": "blk.{i}.attn_norm", "mlp_norm": "blk.{i}.ffn_norm",
    "q": "blk.{i}.attn_q", "k": "blk.{i}.attn_k", "v": "blk.{i}.attn_v", "o": "blk.{i}.attn_output",
    "gate": "blk.{i}.ffn_gate", "up": "blk.{i}.ffn_up", "down": "blk.{i}.ffn_down",
}
# Our parameter (after the layer prefix) -> its pieces along dim 0, in order.
_PARAM_ROLES = {
    "attn_norm": ["attn_norm"], "mlp_norm": ["mlp_norm"], "attn.wqkv": ["q", "k", "v"], "attn.wo": ["o"],
    "mlp.w13": ["gate", "up"], "mlp.w2": ["down"],
}


class CheckpointError(ValueError):
    """A checkpoint is missing, truncated, of an unsupported architecture or does not match the preset."""


def _pieces(param: str, shape: ModelShape) -> list[tuple[str, int]]:
    """(role with layer filled in, rows along dim 0) of every checkpoint piece of our parameter `param`."""
    rows = {"q": shape.q_size, "k": shape.kv_size, "v": shape.kv_size, "gate": shape.intermediate_size,
            "up": shape.intermediate_size}
    stem = param.rsplit(".", 1)[0]
    if stem in ("embed", "norm", "lm_head"):
        return [(stem, 0)]
    _, i, rest = stem.split(".", 2)
    return [(f"{role}@{i}", rows.get(role, 0)) for role in _PARAM_ROLES[rest]]


def _runs(sorted_index: torch.Tensor) -> list[tuple[int, int]]:
    """Maximal [start, stop) runs of consecutive values in a sorted index."""
    runs: list[tuple[int, int]] = []
    for v in sorted_index.tolist():
        if runs and runs[-1][1] == v:
            runs[-1] = (runs[-1][0], v + 1)
        else:
            runs.append((v, v + 1))
    return runs


class Checkpoint:
    """A checkpoint on disk; subclasses read one tensor's rows or columns."""

    names: dict[str, str]
    path: Path

    def tensor_names(self) -> set[str]:
        """Names of all tensors in the checkpoint."""
        raise NotImplementedError

    def tensor_shape(self, name: str) -> tuple[int, ...]:
        """Shape of tensor `name` in HF order ([out, in] for matrices)."""
        raise NotImplementedError

    def read(self, name: str, dim: int, index: torch.Tensor) -> torch.Tensor:
        """fp32 tensor of tensor `name`'s entries `index` (>= 0) along `dim`, in that order (CPU)."""
        raise NotImplementedError

    def file_of(self, name: str) -> Path:
        """The file holding tensor `name` (for error messages)."""
        return self.path

    def check_shape(self, shape: ModelShape) -> None:
        """Raise CheckpointError unless the checkpoint's config describes `shape`."""
        raise NotImplementedError

    def _row_map(self, role: str, shape: ModelShape) -> torch.Tensor | None:
        """Row permutation of a piece (HF row -> stored row), None if stored in HF order."""
        return None

    def checkpoint_name(self, role_at_layer: str, suffix: str) -> str:
        """Checkpoint tensor name of role `q@3`-style keys and a suffix (weight / bias)."""
        role, _, layer = role_at_layer.partition("@")
        return self.names[role].format(i=layer) + "." + suffix

    def read_param(self, param: str, global_shape: tuple[int, ...], shape: ModelShape, dim: int,
                   index: torch.Tensor) -> torch.Tensor:
        """fp32 CPU slice of our parameter `param` (full size `global_shape`): entries `index` along `dim`.

        `index` holds global indices along `dim`, -1 for zero padding (see runtime/tp.py ShardSpec).
        """
        suffix = param.rsplit(".", 1)[1]
        if param == "lm_head.weight" and shape.tie_embeddings:
            param = "embed.weight"
        out_shape = list(global_shape)
        out_shape[dim] = index.numel()
        out = torch.zeros(out_shape, dtype=torch.float32)
        offset = 0
        for role, rows in _pieces(param, shape):
            name = self.checkpoint_name(role, suffix)
            if name not in self.tensor_names():
                raise CheckpointError(f"checkpoint {self.file_of(name)}: tensor {name!r} is missing "
                                      f"(needed for parameter {param})")
            rows = rows or global_shape[0]
            expect = (rows, *global_shape[1:])
            if self.tensor_shape(name) != expect:
                raise CheckpointError(f"checkpoint {self.file_of(name)}: tensor {name!r} has shape "
                                      f"{self.tensor_shape(name)}, the preset {shape.name} needs {expect}")
            if dim == 0:  # this piece's rows of the requested index
                pos = ((index >= offset) & (index < offset + rows)).nonzero().flatten()
                local = index[pos] - offset
                row_map = self._row_map(role, shape)
                if row_map is not None:
                    local = row_map[local]
            else:  # columns of a single-piece matrix
                pos = (index >= 0).nonzero().flatten()
                local = index[pos]
            if pos.numel():
                out.index_copy_(dim, pos, self.read(name, dim, local))
            offset += rows
        return out


class SafetensorsCheckpoint(Checkpoint):
    """A Hugging Face folder: config.json plus model.safetensors or a sharded model.safetensors.index.json."""

    def __init__(self, path: Path) -> None:
        """Open every safetensors file lazily (headers only); raise CheckpointError naming a bad file."""
        from safetensors import safe_open

        self.path, self.names = path, HF_NAMES
        index_file = path / "model.safetensors.index.json"
        if index_file.exists():
            try:
                weight_map: dict[str, str] = json.loads(index_file.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError) as e:
                raise CheckpointError(f"checkpoint {index_file}: not a safetensors index ({e})") from e
        elif (path / "model.safetensors").exists():
            weight_map = {}
        else:
            raise CheckpointError(f"checkpoint {path}: neither model.safetensors nor model.safetensors.index.json")
        self._handles, self._file = {}, {}
        for fname in sorted(set(weight_map.values()) or {"model.safetensors"}):
            f = path / fname
            if not f.exists():
                raise CheckpointError(f"checkpoint {index_file}: lists {fname}, which does not exist")
            try:
                handle = safe_open(str(f), framework="pt", device="cpu")
            except Exception as e:  # safetensors raises its own error type for short/corrupt files
                raise CheckpointError(f"checkpoint {f}: cannot read safetensors header ({e}); truncated?") from e
            self._handles[fname] = handle
            for key in handle.keys():  # noqa: SIM118 (safe_open handles are not dicts)
                self._file[key] = fname
        for key, fname in weight_map.items():
            if self._file.get(key) != fname:
                raise CheckpointError(f"checkpoint {path / fname}: tensor {key!r} listed in the index is missing")

    def tensor_names(self) -> set[str]:
        """Names of all tensors in the checkpoint."""
        return set(self._file)

    def file_of(self, name: str) -> Path:
        """The file holding tensor `name`."""
        return self.path / self._file.get(name, "model.safetensors")

    def tensor_shape(self, name: str) -> tuple[int, ...]:
        """Shape of tensor `name`."""
        return tuple(self._handles[self._file[name]].get_slice(name).get_shape())

    def read(self, name: str, dim: int, index: torch.Tensor) -> torch.Tensor:
        """fp32 rows/columns `index` of tensor `name`, reading only the contiguous runs they cover."""
        sl = self._handles[self._file[name]].get_slice(name)
        uniq, inverse = torch.unique(index, sorted=True, return_inverse=True)
        try:
            parts = [sl[a:b] if dim == 0 else sl[:, a:b] for a, b in _runs(uniq)]
        except Exception as e:
            raise CheckpointError(f"checkpoint {self.file_of(name)}: cannot read tensor {name!r} ({e})") from e
        return torch.cat(parts, dim).float().index_select(dim, inverse)

    def config(self) -> dict:
        """config.json as a dict."""
        f = self.path / "config.json"
        if not f.exists():
            raise CheckpointError(f"checkpoint {f}: config.json is missing")
        try:
            return json.loads(f.read_text())
        except json.JSONDecodeError as e:
            raise CheckpointError(f"checkpoint {f}: invalid JSON ({e})") from e

    def check_shape(self, shape: ModelShape) -> None:
        """Compare config.json with the preset; the error lists every mismatching field."""
        cfg, f = self.config(), self.path / "config.json"
        archs = cfg.get("architectures") or []
        arch = HF_ARCHS.get(archs[0]) if archs else {"llama": "llama", "qwen2": "qwen2"}.get(cfg.get("model_type"))
        if arch is None:
            raise CheckpointError(f"checkpoint {f}: architectures = {archs} (model_type {cfg.get('model_type')!r})"
                                  f" is not supported; supported: {sorted(HF_ARCHS)}")
        rope = cfg.get("rope_parameters") or {}
        scaling = cfg.get("rope_scaling") or (rope if rope.get("rope_type") == "llama3" else None)
        heads = cfg["num_attention_heads"]
        found = {
            "architectures": arch, "vocab_size": cfg["vocab_size"], "hidden_size": cfg["hidden_size"],
            "intermediate_size": cfg["intermediate_size"], "num_hidden_layers": cfg["num_hidden_layers"],
            "num_attention_heads": heads, "num_key_value_heads": cfg.get("num_key_value_heads") or heads,
            "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // heads,
            "rope_theta": cfg.get("rope_theta", rope.get("rope_theta", 10000.0)),
            "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
            "rope_scaling": None if not scaling else (
                float(scaling["factor"]), float(scaling.get("low_freq_factor", 1.0)),
                float(scaling.get("high_freq_factor", 4.0)), int(scaling.get("original_max_position_embeddings", 0))),
            "rms_norm_eps": cfg.get("rms_norm_eps", 1e-6),
        }
        _compare(found, shape, f)


def _compare(found: dict, shape: ModelShape, where: Path) -> None:
    """Raise CheckpointError listing every field of `found` that differs from the preset."""
    rs = shape.rope_scaling
    wanted = {
        "architectures": shape.arch, "vocab_size": shape.vocab_size, "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size, "num_hidden_layers": shape.num_layers,
        "num_attention_heads": shape.num_heads, "num_key_value_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim, "rope_theta": shape.rope_theta, "tie_word_embeddings": shape.tie_embeddings,
        "rope_scaling": None if rs is None else (rs.factor, rs.low_freq_factor, rs.high_freq_factor,
                                                 rs.original_max_position),
        "rms_norm_eps": shape.rms_eps,
    }
    bad = []
    for key, value in found.items():
        want = wanted[key]
        same = (math.isclose(value, want, rel_tol=1e-6) if isinstance(want, float) and value is not None
                else value == want)
        if not same:
            bad.append(f"{key} = {value!r} (preset {want!r})")
    if bad:
        raise CheckpointError(f"checkpoint {where} does not match preset {shape.name!r}: " + "; ".join(bad))


def _gguf_unpermute(n_heads: int, head_dim: int) -> torch.Tensor:
    """[n_heads * head_dim] GGUF row of every HF row of a llama q/k projection.

    llama.cpp's converter reorders each head's rows from HF's halves [x0..x_{d/2-1} | y0..] to interleaved
    pairs [x0, y0, x1, y1, ...]: HF row j = a * d/2 + i (a in {0, 1}) is stored at row 2 i + a.
    """
    half = head_dim // 2
    j = torch.arange(head_dim)
    within = 2 * (j % half) + j // half
    return (torch.arange(n_heads)[:, None] * head_dim + within[None, :]).flatten()


class GGUFCheckpoint(Checkpoint):
    """A GGUF file (llama.cpp): metadata, tokenizer and (quantised) tensors in one file."""

    def __init__(self, path: Path) -> None:
        """Map the file; raise CheckpointError if it is not a readable GGUF."""
        import gguf

        self.path, self.names = path, GGUF_NAMES
        try:
            self.reader = gguf.GGUFReader(str(path))
        except Exception as e:  # numpy/struct errors on a short or foreign file
            raise CheckpointError(f"checkpoint {path}: not a readable GGUF file ({e}); truncated?") from e
        self._tensors = {t.name: t for t in self.reader.tensors}
        self.arch = self.field("general.architecture")

    def field(self, key: str, default: object = None) -> object:
        """Value of metadata field `key` (default if absent)."""
        f = self.reader.fields.get(key)
        return default if f is None else f.contents()

    def tensor_names(self) -> set[str]:
        """Names of all tensors in the file."""
        return set(self._tensors)

    def tensor_shape(self, name: str) -> tuple[int, ...]:
        """Shape in HF order (GGUF stores dimensions innermost first)."""
        return tuple(int(n) for n in reversed(self._tensors[name].shape))

    def read(self, name: str, dim: int, index: torch.Tensor) -> torch.Tensor:
        """fp32 rows/columns `index` of tensor `name`, dequantised (rows: only those rows)."""
        from gguf.quants import dequantize

        t = self._tensors[name]
        uniq, inverse = torch.unique(index, sorted=True, return_inverse=True)
        if dim == 0:
            data = dequantize(t.data[uniq.numpy()], t.tensor_type)
        else:
            data = dequantize(t.data, t.tensor_type)[:, uniq.numpy()]
        return torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32)).index_select(dim, inverse)

    def _row_map(self, role: str, shape: ModelShape) -> torch.Tensor | None:
        """llama q/k rows are stored permuted (see `_gguf_unpermute`)."""
        kind = role.partition("@")[0]
        if self.arch != "llama" or kind not in ("q", "k"):
            return None
        return _gguf_unpermute(shape.num_heads if kind == "q" else shape.num_kv_heads, shape.head_dim)

    def check_shape(self, shape: ModelShape) -> None:
        """Compare the GGUF metadata with the preset; the error lists every mismatching field."""
        if self.arch not in GGUF_ARCHS:
            raise CheckpointError(f"checkpoint {self.path}: general.architecture = {self.arch!r} is not "
                                  f"supported; supported: {list(GGUF_ARCHS)}")
        a = self.arch
        heads = self.field(f"{a}.attention.head_count")
        hidden = self.field(f"{a}.embedding_length")
        tokens = self.field("tokenizer.ggml.tokens") or []
        found = {
            "architectures": a,
            "vocab_size": self.field(f"{a}.vocab_size") or len(tokens),
            "hidden_size": hidden, "intermediate_size": self.field(f"{a}.feed_forward_length"),
            "num_hidden_layers": self.field(f"{a}.block_count"), "num_attention_heads": heads,
            "num_key_value_heads": self.field(f"{a}.attention.head_count_kv", heads),
            "head_dim": self.field(f"{a}.attention.key_length", hidden // heads),
            "rope_theta": self.field(f"{a}.rope.freq_base", 10000.0),
            "tie_word_embeddings": "output.weight" not in self._tensors,
            "rms_norm_eps": self.field(f"{a}.attention.layer_norm_rms_epsilon"),
        }
        _compare(found, shape, self.path)
        self._check_rope_freqs(shape)

    def _check_rope_freqs(self, shape: ModelShape) -> None:
        """Llama 3.1+ GGUFs store RoPE scaling as per-frequency divisors (`rope_freqs.weight`); they must
        equal the preset's scaling, which the model computes itself."""
        has = "rope_freqs.weight" in self._tensors
        if not has and shape.rope_scaling is None:
            return
        if not has:
            raise CheckpointError(f"checkpoint {self.path}: no tensor 'rope_freqs.weight', but preset "
                                  f"{shape.name!r} has rope_scaling {shape.rope_scaling}")
        half = shape.head_dim // 2
        divisors = self.read("rope_freqs.weight", 0, torch.arange(half))
        base = rope_inv_freq(replace(shape, rope_scaling=None))
        if not torch.allclose(base / divisors, rope_inv_freq(shape), rtol=1e-5, atol=0.0):
            raise CheckpointError(f"checkpoint {self.path}: tensor 'rope_freqs.weight' does not match preset "
                                  f"{shape.name!r} rope_scaling {shape.rope_scaling}")


def open_checkpoint(path: str | Path) -> Checkpoint:
    """A safetensors folder or a .gguf file; CheckpointError if it is missing or of another kind."""
    from conf.paths import resolve_path

    p = resolve_path(path)
    if not p.exists():
        raise CheckpointError(f"checkpoint {p}: does not exist (a Hugging Face folder or a .gguf file)")
    if p.is_dir():
        return SafetensorsCheckpoint(p)
    if p.suffix == ".gguf":
        return GGUFCheckpoint(p)
    raise CheckpointError(f"checkpoint {p}: expected a Hugging Face folder or a .gguf file")
