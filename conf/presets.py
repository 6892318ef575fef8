"""Named shapes and hardware: model shape presets, GPU presets and link presets.

Plain data shared by the runtime (random init, TP checks), the simulator (cost model) and the config
validation. No torch import. Numbers carry their source in a comment; "measured" means on this project's
H200 machines (see docs/LOG.md and ../shared/reference/device-h200.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from conf.frozen import ConfigError


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3.1+ frequency-dependent RoPE scaling ("llama3" rope_type)."""

    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


@dataclass(frozen=True)
class ModelShape:
    """The architecture of a Llama-family decoder; enough to build it or to cost it."""

    name: str
    arch: str  # "llama" | "qwen2"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    max_position: int
    rms_eps: float = 1e-5
    tie_embeddings: bool = False
    qkv_bias: bool = False
    rope_scaling: RopeScaling | None = None
    num_tokens: int | None = None  # tokens the tokenizer defines, when the embedding is padded beyond them

    @property
    def token_count(self) -> int:
        """Tokens the tokenizer defines (<= vocab_size); draft and target must agree on it."""
        return self.num_tokens or self.vocab_size

    @property
    def q_size(self) -> int:
        """Width of the query projection output."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of one of the key / value projection outputs."""
        return self.num_kv_heads * self.head_dim

    def layer_params(self) -> int:
        """Weights of one decoder layer (projections, biases and the two norms)."""
        attn = self.hidden_size * (self.q_size + 2 * self.kv_size) + self.q_size * self.hidden_size
        bias = (self.q_size + 2 * self.kv_size) if self.qkv_bias else 0
        mlp = 3 * self.hidden_size * self.intermediate_size
        return attn + bias + mlp + 2 * self.hidden_size

    def num_params(self) -> int:
        """All weights, counting a tied LM head once."""
        emb = self.vocab_size * self.hidden_size
        head = 0 if self.tie_embeddings else emb
        return emb + head + self.num_layers * self.layer_params() + self.hidden_size

    def kv_bytes_per_token(self, bytes_per_elem: int = 2) -> int:
        """KV-cache bytes one token occupies over all layers."""
        return 2 * self.num_layers * self.kv_size * bytes_per_elem


def _llama3(name: str, hidden: int, inter: int, layers: int, heads: int, head_dim: int, **kw) -> ModelShape:
    return ModelShape(
        name=name, arch="llama", vocab_size=128256, hidden_size=hidden, intermediate_size=inter,
        num_layers=layers, num_heads=heads, num_kv_heads=8, head_dim=head_dim, rope_theta=500000.0, **kw,
    )


# Llama 3.1/3.2 use rope_type "llama3" with these factors (Hugging Face config.json of each model).
_ROPE_31 = RopeScaling(factor=8.0)
_ROPE_32 = RopeScaling(factor=32.0)

MODEL_PRESETS: dict[str, ModelShape] = {
    s.name: s
    for s in [
        ModelShape("llama2-7b", "llama", 32000, 4096, 11008, 32, 32, 32, 128, 10000.0, 4096),
        _llama3("llama3-8b", 4096, 14336, 32, 32, 128, max_position=8192),
        _llama3("llama3.1-8b", 4096, 14336, 32, 32, 128, max_position=131072, rope_scaling=_ROPE_31),
        _llama3("llama3-70b", 8192, 28672, 80, 64, 128, max_position=8192),
        _llama3("llama3.2-1b", 2048, 8192, 16, 32, 64, max_position=131072, tie_embeddings=True,
                rope_scaling=_ROPE_32),
        _llama3("llama3.2-3b", 3072, 8192, 28, 24, 128, max_position=131072, tie_embeddings=True,
                rope_scaling=_ROPE_32),
        ModelShape("qwen2-72b", "qwen2", 152064, 8192, 29568, 80, 64, 8, 128, 1e6, 32768, rms_eps=1e-6,
                   qkv_bias=True, num_tokens=151646),
        ModelShape("qwen2-1.5b", "qwen2", 151936, 1536, 8960, 28, 12, 2, 128, 1e6, 32768, rms_eps=1e-6,
                   tie_embeddings=True, qkv_bias=True, num_tokens=151646),
        ModelShape("qwen2-0.5b", "qwen2", 151936, 896, 4864, 24, 14, 2, 64, 1e6, 32768, rms_eps=1e-6,
                   tie_embeddings=True, qkv_bias=True, num_tokens=151646),
        ModelShape("smollm2-135m", "llama", 49152, 576, 1536, 30, 9, 3, 64, 100000.0, 8192,
                   tie_embeddings=True),
        # The project's draft for SmolLM2 (same tokenizer); trained by train_draft.py.
        ModelShape("smollm2-draft", "llama", 49152, 192, 512, 4, 3, 1, 64, 100000.0, 8192,
                   tie_embeddings=True),
        # Tiny shapes for CPU tests. tiny-llama has 4 heads: TP=3 exercises zero-padding.
        ModelShape("tiny-llama", "llama", 256, 64, 176, 2, 4, 2, 16, 10000.0, 4096),
        ModelShape("tiny-llama-draft", "llama", 256, 32, 64, 1, 2, 1, 16, 10000.0, 4096, tie_embeddings=True),
        ModelShape("tiny-llama31", "llama", 256, 64, 128, 2, 4, 2, 16, 500000.0, 4096,
                   rope_scaling=RopeScaling(factor=8.0, original_max_position=64)),
        # 8 query heads: every split of an 8-GPU node (TP up to 8, zero-padded at 3, 6, 7) on CPU.
        ModelShape("tiny-llama-8h", "llama", 256, 64, 176, 2, 8, 4, 8, 10000.0, 4096),
        ModelShape("tiny-llama-draft-4h", "llama", 256, 32, 64, 1, 4, 2, 8, 10000.0, 4096, tie_embeddings=True),
        ModelShape("tiny-qwen2", "qwen2", 256, 64, 176, 2, 4, 2, 16, 1e6, 4096, rms_eps=1e-6,
                   qkv_bias=True),
    ]
}


def model_preset(name: str, field: str = "preset") -> ModelShape:
    """The shape preset called `name`; a ValueError names `field` and the allowed names otherwise."""
    if name not in MODEL_PRESETS:
        raise ConfigError(f"{field}: unknown model preset {name!r}; allowed: {sorted(MODEL_PRESETS)}")
    return MODEL_PRESETS[name]


def check_tp(shape: ModelShape, tp: int, field: str) -> None:
    """Raise unless `tp` ranks can shard `shape`: every rank needs at least one query head.

    Degrees that do not divide the head count or the intermediate size are allowed: the runtime pads
    with zero heads / zero columns (the paper's auto-pad), which is exact.
    """
    if tp < 1 or tp > shape.num_heads:
        raise ConfigError(
            f"{field}: TP degree {tp} cannot shard {shape.name} ({shape.num_heads} query heads); "
            f"allowed: 1..{shape.num_heads}"
        )


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type. Bandwidth and FLOP/s are achievable values, not datasheet peaks, where known."""

    name: str
    hbm_bytes_per_s: float
    bf16_flops_per_s: float
    memory_bytes: float
    nvlink_bytes_per_s: float  # one direction, per GPU
    kernel_launch_s: float  # per kernel in a CUDA graph replay
    link: str = "nvlink4"  # its GPU-to-GPU link preset (LINK_PRESETS): what interconnect.*_group=gpu selects
    gpus_per_node: int = 8  # GPUs of one node (an HGX / DGX board of 8 SXM GPUs): ranks fill nodes in order


GPU_PRESETS: dict[str, GpuSpec] = {
    g.name: g
    for g in [
        # H200: 4.29 TB/s copy and ~790 TFLOP/s measured on our machines (reference/device-h200.md).
        GpuSpec("h200", 4.29e12, 7.9e14, 141e9, 4.5e11 * 0.62, 2.0e-6, link="nvlink4"),
        # H100 SXM / H800: 3.35 TB/s datasheet x 0.88 (our H200 copy efficiency); 989 TFLOP/s x 0.8.
        # H800 NVLink is cut to 400 GB/s bidirectional (200 GB/s per direction).
        GpuSpec("h100", 3.35e12 * 0.88, 989e12 * 0.8, 80e9, 4.5e11 * 0.62, 2.0e-6, link="nvlink4"),
        GpuSpec("h800", 3.35e12 * 0.88, 989e12 * 0.8, 80e9, 2.0e11 * 0.62, 2.0e-6, link="nvlink4-h800"),
        # A100 SXM 80GB: 2.04 TB/s x 0.88, 312 TFLOP/s x 0.8, NVLink 3 600 GB/s bidirectional.
        GpuSpec("a100", 2.04e12 * 0.88, 312e12 * 0.8, 80e9, 3.0e11 * 0.62, 2.5e-6, link="nvlink3"),
    ]
}


@dataclass(frozen=True)
class LinkSpec:
    """A point-to-point link: one-way latency of a small message and sustained bandwidth."""

    name: str
    latency_s: float
    bytes_per_s: float


LINK_PRESETS: dict[str, LinkSpec] = {
    l.name: l
    for l in [
        # NVLink 4 (H100/H200): 8 KB NCCL all-reduce in a CUDA graph 9.5 us; peer copy 281 GB/s measured.
        LinkSpec("nvlink4", 4.0e-6, 2.81e11),
        # H800's NVLink at 400 GB/s bidirectional.
        LinkSpec("nvlink4-h800", 4.0e-6, 1.6e11),
        LinkSpec("nvlink3", 5.0e-6, 2.0e11),
        # PCIe x16 through the host: latency of a small peer write ~10 us; ~80% of the link rate.
        LinkSpec("pcie4", 1.0e-5, 2.5e10),
        LinkSpec("pcie5", 8.0e-6, 5.0e10),
        # Between nodes: 400 Gb/s InfiniBand NDR and 200 Gb/s RoCE, GPUDirect RDMA.
        LinkSpec("ib-ndr", 5.0e-6, 4.5e10),
        LinkSpec("roce-200g", 8.0e-6, 2.2e10),
        # The runtime's leader channel over a Unix socket (both leaders on one host), host work included: one way
        # = round trip / 2 of UnixLeaderChannel on the H200 host, 8.3 us at 176 B and 27.3 us at 1,072 B
        # (bench/bench_channel.py): a line through both. Not a GPU link: the simulator's
        # cross-group message when parallel.leader_channel resolves to unix.
        LinkSpec("unix-socket", 4.5e-6, 4.7e7),
    ]
}


def preset_of(table: dict, name: str, field: str):
    """Look `name` up in a preset table; a ValueError names `field` and the allowed keys otherwise."""
    if name not in table:
        raise ConfigError(f"{field}: unknown preset {name!r}; allowed: {sorted(table)}")
    return table[name]
