"""One decode step as a CUDA graph under kernel variants, side by side: base, PDL, skinny GEMMs, both.

    python bench/bench_step_variants.py --out bench/results/step_variants_<date>.json      # GPU (sm90+)

For each (model, rows) case the same model, cache and inputs are captured once per variant
(`runtime.graphs.StepGraph`, as the runtime replays verify / expand steps), then timed round-robin: every
round replays each variant's graph `--inner` times between two CUDA events, `--rounds` rounds, medians per
replay. Checks next to the times: each variant's fp32 logits against the base variant's (max |diff|, share of
rows with the same argmax), and the byte floor (weights + K/V of the context, over 4.29 TB/s).

Variants (`kernels.skinny`, `kernels.pdl` of the runtime; VARIANTS): base = the fused path of kernels=graphs
(cuBLAS projections, split-K reduces, separate norms); pdl* = programmatic dependent launch of the Triton kernels
with a trigger per kernel role (kernels/pdl.py: weight-streaming GEMMs vs the small kernels; early = release the
next kernel at the start, late = as the blocks exit, off = ordinary launch); skinny* = Triton skinny GEMMs with
the o / down split-K partials summed in the norms; *_qkvrope = the QKV GEMM also doing RoPE + the KV write
(`kernels.qkv_rope_kv_write`, an experiment: measured at 0eab9f8, slower on the 8B step, faster on the 1B draft);
*_ropeattn = the tree attention doing RoPE + the KV write (`kernels.rope_tree_attention`; q's cos / sin per (token,
head) row at 2bd79c2, per token at c19e99f: the same time; per row since). A batched split merge (every partial's
max in one load, the accumulators in unrolled chunks) was measured at 2bd79c2 (+0.01-0.03 ms per step, slower
standalone) and removed.
A first-weight-tile prefetch before the PDL wait (late_prefetch) was measured at 0eab9f8 (0.12-0.13 ms slower per
8B step) and removed. A variant that fails to build or capture is recorded as failed and the others still run.
`runtime` = what `kernels=graphs` runs on the draft (skinny_pdl_late, the fused RoPE attention on single-token
steps only); the target runs qkvrope_pre_early (`kernels.target_qkv_rope`).
`variant+patch+...` appends PATCHES: one module-level tile choice each (skinny tile per projection, SwiGLU BLOCK_I /
BLOCK_K, attention keys per split or register budget), set while that variant's graphs are captured (2026-11-30:
docs/BENCHMARKS_RUNTIME.md, eighth session). `--profile-kernels N` also profiles N replays per variant and charges
each kernel its exposed time (bench/graph_profile.py).
Random bf16 weights (never zeros; `--dtype float16` for fp16 models). Plain argparse: runs on the GPU machine without
Hydra.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import statistics
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.graph_profile import profile_graph  # noqa: E402
from bench.graph_profile import table as profile_table  # noqa: E402
from bench.profile_step import byte_floor_s  # noqa: E402
from conf.presets import model_preset  # noqa: E402
from conf.rundir import atomic_write_json, git_sha  # noqa: E402
from kernels.pdl import DEFAULT_POLICY, pdl  # noqa: E402
from kernels.tree_attention import ROPE_MAX_TOKENS  # noqa: E402
from runtime.attention import AttnMeta, make_attention_backend  # noqa: E402
from runtime.graphs import StepGraph  # noqa: E402
from runtime.kv_cache import KVCache  # noqa: E402
from runtime.loader import build_model  # noqa: E402
from runtime.tree import ancestor_mask  # noqa: E402

# the modules, not the package's same-named functions (kernels/__init__.py re-exports skinny_linear, tree_attention)
fused_mlp, norm, qkv_rope, skinny_linear, tree_attention = (
    importlib.import_module(f"kernels.{m}")
    for m in ("fused_mlp", "norm", "qkv_rope", "skinny_linear", "tree_attention"))


def _roles(gemm: str, small: str, pre_attention: str, norm: str | None = None) -> dict[str, str]:
    """A PDL policy; the norms take the small kernels' trigger unless given (they were "small" until 2026-12-01)."""
    return {"gemm": gemm, "small": small, "pre_attention": pre_attention, "norm": norm or small}


_EARLY = _roles("early", "early", "early")
_LATE = _roles("late", "late", "late")
VARIANTS: dict[str, tuple[bool, dict[str, str] | None]] = {
    "base": (False, None),
    "pdl": (False, _EARLY),
    "pdl_late": (False, _LATE),
    "skinny": (True, None),
    "skinny_pdl": (True, _EARLY),
    "skinny_pdl_late": (True, _LATE),
    "skinny_pdl_small": (True, _roles("off", "early", "early")),
    "skinny_pdl_small_late": (True, _roles("off", "late", "late")),
    "skinny_pdl_gemm_late": (True, _roles("late", "early", "early")),
    "skinny_pdl_small_late_gemm_early": (True, _roles("early", "late", "late")),
    "skinny_pdl_late_qkvrope": (True, _LATE),
    "skinny_pdl_late_ropeattn": (True, _LATE),
    "runtime": (True, dict(DEFAULT_POLICY)),
    "runtime_pre_late": (True, _LATE),
    "runtime_pre_early": (True, _roles("late", "late", "early")),
    "runtime_norm_early": (True, _roles("late", "late", "early", norm="early")),
    "runtime_norm_late": (True, _roles("late", "late", "early", norm="late")),
    "ropeattn_pre_early": (True, _roles("late", "late", "early")),
    "qkvrope_pre_early": (True, _roles("late", "late", "early")),
    "qkvrope_norm_early": (True, _roles("late", "late", "early", norm="early")),
}
"""name -> (kernels.skinny, the PDL trigger per kernel role or None for ordinary launches: kernels/pdl.py). The
pre_attention role (2026-11-30, ninth session: the QKV GEMM right before the fused RoPE attention of single-token
steps) takes the trigger of the small kernels in the older variants. runtime_pre_late / runtime_pre_early: the runtime
with that launch late or early.
In step_variants_2026-11-30_prefetch.json (c23bfd2) the role also covered rope_kv_write and the attention of
multi-token steps prefetched as well; that measured slower there and is off since. ropeattn_pre_early: the fused RoPE
attention at every row count with the QKV GEMM released early (its q RoPE angles and first prefix block loaded beside
the GEMM). qkvrope_pre_early: the QKV GEMM with RoPE + the KV write in its epilogue (kernels.qkv_rope), released early,
and the attention after it prefix_ready (since the ninth session every *qkvrope variant's attention is prefix_ready;
at 0eab9f8 it was not). *_norm_early: the same with the norms (role "norm" since 2026-12-01) released early, so the
QKV / SwiGLU / LM-head GEMM's blocks are resident while the norm runs (within kernels.norm.EARLY_MAX_ROWS; the
weight-prefetch patches wpf<N> of 2026-12-01, measured slower, are in git history: 3823e13)."""
QKV_ROPE_VARIANTS = frozenset({"skinny_pdl_late_qkvrope", "qkvrope_pre_early", "qkvrope_norm_early"})
"""Variants whose QKV GEMM also does RoPE + the KV write (`kernels.qkv_rope_kv_write`; qkvrope_pre_early is the
runtime's target path under `kernels.target_qkv_rope`, on in kernels=graphs since fa74a6f's child)."""
ROPE_ATTENTION_VARIANTS = frozenset({"skinny_pdl_late_ropeattn", "ropeattn_pre_early"})
"""Variants whose tree attention does RoPE + the KV write at every row count (`kernels.rope_tree_attention`; the
runtime's `kernels.rope_attention` uses it for single-token steps only: ROPE_FASTER_MAX_TOKENS)."""
RUNTIME_VARIANTS = frozenset({"runtime", "runtime_pre_late", "runtime_pre_early", "runtime_norm_early",
                              "runtime_norm_late"})
"""What `kernels=graphs` runs: skinny_pdl_late with the fused RoPE attention on single-token steps only."""


def _skinny_tile(block_n: int, split_k: int = 1, block_k: int = 256, programs: int = 0) -> dict[str, int]:
    tile = {"block_n": block_n, "block_k": block_k, "split_k": split_k, "num_warps": 4, "num_stages": 4}
    return {**tile, "programs": programs} if programs else tile


def _balanced(programs: int, split_k: int = 1, block_k: int = 256) -> dict[str, int]:
    """Balanced columns (skinny_linear CONFIG_KEYS `programs`): block_n is derived from N / programs."""
    return _skinny_tile(16, split_k, block_k, programs)


PATCHES: dict[str, tuple[str, object]] = {
    # Llama-3-8B projections (m bucket 16: 1-16 rows). Tuned: qkv block_n 64 (96 programs: one wave on 96 of 132
    # SMs), o block_n 32 x split 2 (256), down block_n 64 x split 4 (256).
    "qkv_n32": ("skinny", {(6144, 4096, 16): _skinny_tile(32)}),
    "qkv_n16": ("skinny", {(6144, 4096, 16): _skinny_tile(16)}),
    "o_n16": ("skinny", {(4096, 4096, 16): _skinny_tile(16, split_k=2)}),
    "o_s1": ("skinny", {(4096, 4096, 16): _skinny_tile(32, split_k=1)}),  # the tuned o tile before 2026-11-30
    "down_n32": ("skinny", {(4096, 14336, 16): _skinny_tile(32, split_k=4, block_k=128)}),
    # 128-element K steps: half the pipelined shared memory per CTA (bench/kernel_resources.py --gemms)
    "qkv_k128": ("skinny", {(6144, 4096, 16): _skinny_tile(64, block_k=128)}),
    "o_k128": ("skinny", {(4096, 4096, 16): _skinny_tile(32, split_k=2, block_k=128)}),
    "dqkv_k128": ("skinny", {(3072, 2048, 16): _skinny_tile(32, block_k=128)}),
    "do_k128": ("skinny", {(2048, 2048, 16): _skinny_tile(16, block_k=128)}),
    # Llama-3.2-1B: qkv block_n 32 (96 programs), o block_n 16 (128)
    "dqkv_n16": ("skinny", {(3072, 2048, 16): _skinny_tile(16)}),
    "do_s2": ("skinny", {(2048, 2048, 16): _skinny_tile(16, split_k=2)}),  # the default since 2026-12-01
    "do_s1": ("skinny", {(2048, 2048, 16): _skinny_tile(16)}),  # the tuned tile before 2026-12-01
    # Llama-3.2-1B down (tuned: block_n 32 x split 4, 256 programs): 512 programs by split 8 or by 16 columns
    "ddown_s8": ("skinny", {(2048, 8192, 16): _skinny_tile(32, split_k=8, block_k=128)}),
    "ddown_n16": ("skinny", {(2048, 8192, 16): _skinny_tile(16, split_k=4, block_k=128)}),
    # Llama-3.2-1B at 17-32 rows (m bucket 32, the draft's w 32 expansion): the bucket-16 tuned tiles (the CONFIGS
    # entries since 2026-11-30's 2cb6088 measurement), or the heuristic's (split 2 on all three: a reduce launch after
    # the QKV GEMM; None removes a CONFIGS entry while the patch applies)
    "m32_as16": ("skinny", {(3072, 2048, 32): _skinny_tile(32), (2048, 2048, 32): _skinny_tile(16),
                            (2048, 8192, 32): _skinny_tile(32, split_k=4, block_k=128)}),
    "m32_heuristic": ("skinny", {(n, k, 32): None for n, k in ((3072, 2048), (2048, 2048), (2048, 8192))}),
    # SwiGLU intermediate columns per program (kernels.fused_mlp.BLOCK_I, 64: 224 programs at 8B, 128 at 1B)
    "swiglu_i32": ("swiglu", 32),
    "swiglu_k64": ("swiglu_k", 64),  # kernels.fused_mlp.BLOCK_K (128 by default)
    # tree attention: prefix keys per split of the wide tile (KEYS_PER_SPLIT, 256)
    "attn_k128": ("attention", 128),
    "attn_k64": ("attention", 64),
    # warps per row program of the two norm kernels (kernels.norm.NUM_WARPS; 16 at 8B / 1B since 2026-11-30; 8 was
    # the 8B's before, and norm_w16 the name of the measured variant in step_variants_2026-11-30_normwarps*.json)
    "norm_w4": ("norm_warps", 4),
    "norm_w8": ("norm_warps", 8),
    # launches of up to 256 query rows on the wide tile (tree_attention.WIDE_MAX_ROWS: 256 since 800833c, 64 before)
    "attn_wide256": ("attention_wide_rows", 256),
    "attn_wide64": ("attention_wide_rows", 64),
    # the fused QKV + RoPE GEMM at two programs per head (96 at 8B, the skinny QKV's count; kernels.qkv_rope.PAIR_SPLIT)
    "qkvrope_split2": ("qkv_rope_split", 2),  # the default since fa74a6f (kernels.target_qkv_rope)
    "qkvrope_split1": ("qkv_rope_split", 1),  # one program per head: the default before fa74a6f
    "qkvrope_split4": ("qkv_rope_split", 4),  # four per head, 192 programs at 8B: +0.21 ms (2026-12-01)
    # balanced columns: one equal share of the weight rows per program (kernels.skinny_linear `programs`), so every SM
    # streams, instead of 96 tiles on 132 SMs (QKV); 132 = the H200's SMs. The fused QKV + RoPE's balanced grid
    # (qkvrope_p132 / p120 / p112 in step_variants_2026-12-01_243d5ab_balanced_8b.json) is in git history (243d5ab)
    "qkv_bal132": ("skinny", {(6144, 4096, 16): _balanced(132)}),
    "qkv_bal120": ("skinny", {(6144, 4096, 16): _balanced(120)}),
    "o_bal132": ("skinny", {(4096, 4096, 16): _balanced(132)}),
    "o_bal66s2": ("skinny", {(4096, 4096, 16): _balanced(66, split_k=2)}),
    "down_bal33s4": ("skinny", {(4096, 14336, 16): _balanced(33, split_k=4, block_k=128)}),
    "dqkv_bal132": ("skinny", {(3072, 2048, 16): _balanced(132)}),
    "do_bal66s2": ("skinny", {(2048, 2048, 16): _balanced(66, split_k=2)}),
    "ddown_bal33s4": ("skinny", {(2048, 8192, 16): _balanced(33, split_k=4, block_k=128)}),
    # the largest norm launch of >= 4,096-element rows that takes the "norm" role (released early by default;
    # kernels.norm.EARLY_MAX_ROWS, 8)
    "norm_rows4": ("norm_early_rows", 4),
    "norm_rows16": ("norm_early_rows", 16),
    "norm_rows64": ("norm_early_rows", 64),
    # EARLY_MAX_ROWS_NARROW (rows of 1,024-4,095 elements: 4 since f18d7da's measurement, 1 before; norm_narrow1 = the
    # old rule); until 016128a it covered every row under 4,096, as
    # in step_variants_2026-12-01_016128a_{1b,smol}.json, where norm_narrow16 / norm_narrow0 set the SmolLM2 limit too
    "norm_narrow1": ("norm_early_rows_narrow", 1),
    "norm_narrow4": ("norm_early_rows_narrow", 4),
    "norm_narrow8": ("norm_early_rows_narrow", 8),
    "norm_narrow16": ("norm_early_rows_narrow", 16),
    "norm_narrow0": ("norm_early_rows_narrow", 0),
    # EARLY_MAX_ROWS_TINY (rows under 1,024 elements, SmolLM2's 576: 16, the default since 486e2f7 so tiny16 changes
    # nothing now); tiny1 = the rule before cf3fa64, tiny0 = all late
    "norm_tiny0": ("norm_early_rows_tiny", 0),
    "norm_tiny1": ("norm_early_rows_tiny", 1),
    "norm_tiny16": ("norm_early_rows_tiny", 16),
    # weight_bits=8: the layers' projections streamed as fp8 copies (runtime.model; needs a skinny variant); with it,
    # the fp8 tiles of the skinny GEMMs at twice the K step (the same bytes per stage as the bf16 tiles) or split 2
    "w8": ("weight_bits", 8),
    "w8_k512": ("skinny", {(3072, 2048, 16): _skinny_tile(32, block_k=512),
                           (2048, 2048, 16): _skinny_tile(16, split_k=2, block_k=512),
                           (2048, 8192, 16): _skinny_tile(32, split_k=4, block_k=256)}),
    "w8_swiglu_k256": ("swiglu_k", 256),
    # with w8: the fp8 GEMMs on the bf16 tables' tiles (kernels.skinny_linear.FP8_CONFIGS, fused_mlp.FP8_TILES
    # emptied; the f44444eb results' `w8_swept` set those tables, the defaults since)
    "w8_bf16tiles": ("fp8_tables", None),
}
"""Tile / placement experiments appended to a variant as `variant+patch+...`: they set the module-level tile
choices while that variant's graphs are captured (what a capture records is what its replays run)."""


def parse_variant(spec: str) -> tuple[str, list[str]]:
    """`base+patch+...` -> (base variant, patches); SystemExit naming the unknown part."""
    base, *patches = spec.split("+")
    if base not in VARIANTS:
        raise SystemExit(f"--variants: {base!r} is not one of {', '.join(VARIANTS)}")
    for name in patches:
        if name not in PATCHES:
            raise SystemExit(f"--variants: patch {name!r} of {spec!r} is not one of {', '.join(PATCHES)}")
    return base, patches


KNOBS: dict[str, tuple[object, str]] = {
    "swiglu": (fused_mlp, "BLOCK_I"), "swiglu_k": (fused_mlp, "BLOCK_K"),
    "attention": (tree_attention, "KEYS_PER_SPLIT"), "norm_warps": (norm, "NUM_WARPS"),
    "attention_wide_rows": (tree_attention, "WIDE_MAX_ROWS"), "qkv_rope_split": (qkv_rope, "PAIR_SPLIT"),
    "norm_early_rows": (norm, "EARLY_MAX_ROWS"), "norm_early_rows_narrow": (norm, "EARLY_MAX_ROWS_NARROW"),
    "norm_early_rows_tiny": (norm, "EARLY_MAX_ROWS_TINY"),
}
"""The module-level value each non-skinny patch kind sets (skinny patches set, or with None remove,
skinny_linear.CONFIGS entries)."""


@contextlib.contextmanager
def patched(names: list[str]):
    """Apply PATCHES `names` to the kernel modules inside the block, restoring every value after it."""
    configs = dict(skinny_linear.CONFIGS)
    fp8_tables = (dict(skinny_linear.FP8_CONFIGS), dict(fused_mlp.FP8_TILES))
    saved = {kind: getattr(module, attr) for kind, (module, attr) in KNOBS.items()}
    try:
        for name in names:
            kind, value = PATCHES[name]
            if kind == "skinny":
                for key, tile in value.items():
                    if tile is None:
                        skinny_linear.CONFIGS.pop(key, None)
                    else:
                        skinny_linear.CONFIGS[key] = tile
            elif kind == "fp8_tables":  # None: empty
                skinny_linear.FP8_CONFIGS.clear()
                fused_mlp.FP8_TILES.clear()
            elif kind in KNOBS:
                setattr(*KNOBS[kind], value)
            elif kind != "weight_bits":  # that one is a use_fused_kernels argument (run_preset)
                raise ValueError(f"PATCHES[{name!r}]: unknown kind {kind!r}; expected skinny or one of {sorted(KNOBS)}")
        yield
    finally:
        skinny_linear.CONFIGS.clear()
        skinny_linear.CONFIGS.update(configs)
        for table, before in zip((skinny_linear.FP8_CONFIGS, fused_mlp.FP8_TILES), fp8_tables):
            table.clear()
            table.update(before)
        for kind, (module, attr) in KNOBS.items():
            setattr(module, attr, saved[kind])


def weight_bits_of(patches: list[str]) -> int:
    """8 when a patch asks for fp8 weights (kind weight_bits), else 16."""
    return 8 if any(PATCHES[name][0] == "weight_bits" for name in patches) else 16


def _variant_config(spec: str) -> dict:
    """What a variant sets, for the results file."""
    base, patches = parse_variant(spec)
    return {"skinny": VARIANTS[base][0], "pdl": VARIANTS[base][1], "qkv_rope": base in QKV_ROPE_VARIANTS,
            "rope_attention": ("all rows" if base in ROPE_ATTENTION_VARIANTS else
                               "single-token steps" if base in RUNTIME_VARIANTS else False),
            "patches": {name: (PATCHES[name][0], _jsonable(PATCHES[name][1])) for name in patches}}


def _jsonable(value: object) -> object:
    """A patch value for the results file: tuple-keyed tile tables with string keys."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    return value


def prefill_random(model: torch.nn.Module, cache: KVCache, attn: object, ctx: int, gen: torch.Generator) -> None:
    """Fill the cache's first `ctx` slots with the K/V of `ctx` random token ids (512-token chunks), so a step's
    attention reads real, non-zero keys."""
    device = cache.kv.device
    prompt = torch.randint(0, model.shape.vocab_size, (ctx,), generator=gen).to(device)
    for start in range(0, ctx, 512):
        n = min(512, ctx - start)
        model(prompt[start:start + n], AttnMeta.causal(start, n, device), cache, attn)


def tree_inputs(rows: int, ctx: int, vocab: int, gen: torch.Generator) -> tuple:
    """A binary tree of `rows` nodes after `ctx` cached tokens: ids, positions, tree slots, mask."""
    parents = [-1] + [(i - 1) // 2 for i in range(1, rows)]
    depth = [0] * rows
    for i in range(1, rows):
        depth[i] = depth[parents[i]] + 1
    ids = torch.randint(0, vocab, (rows,), generator=gen)
    return ids, torch.tensor([ctx + d for d in depth]), torch.arange(rows), ancestor_mask(parents, rows)


def run_preset(preset: str, cases: list[tuple[int, int]], ctx: int, cap: int, variants: list[str], rounds: int,
               inner: int, profile_reps: int = 0, dtype: str = "bfloat16") -> list[dict]:
    """Capture and time each (rows, tree_len) case of one model under every variant; one record per case.
    `profile_reps` > 0: also profile that many replays per variant (bench/graph_profile.py: exposed time per kernel)."""
    device = torch.device("cuda")
    model = build_model(model_preset(preset), dtype, device, seed=0)
    layers, heads, head_dim = model.cache_spec()
    cache = KVCache(layers, cap, heads, head_dim, model.dtype, device)
    attn_runtime = make_attention_backend("triton")  # fused RoPE attention on single-token steps, as kernels=graphs
    attn = make_attention_backend("triton")
    attn.rope_max_tokens = ROPE_MAX_TOKENS  # *_ropeattn fuse at every row count (the runtime: single-token steps)
    graphs: dict[tuple[int, str], StepGraph] = {}
    copies: dict[tuple[int, str], list] = {}
    failed: dict[tuple[int, str], str] = {}
    with torch.no_grad():
        for rows, tree_len in cases:
            for name in variants:
                base, patches = parse_variant(name)
                skinny, policy = VARIANTS[base]
                try:  # an experiment that does not build or capture is reported, not fatal to the others
                    with pdl(policy is not None, **(policy or {})), patched(patches):
                        model.use_fused_kernels(True, skinny=skinny, qkv_rope=base in QKV_ROPE_VARIANTS,
                                                rope_attention=base in ROPE_ATTENTION_VARIANTS | RUNTIME_VARIANTS,
                                                weight_bits=weight_bits_of(patches))
                        graphs[rows, name] = StepGraph(model, cache, attn_runtime if base in RUNTIME_VARIANTS
                                                       else attn, rows, tree_len)
                        # the graph reads the fp8 copies: keep them alive after the next variant drops them
                        copies[rows, name] = [(layer.attn.wqkv_q8, layer.attn.wo_q8, layer.mlp.w13_q8,
                                               layer.mlp.w2_q8) for layer in model.layers]
                except Exception as exc:  # noqa: BLE001 (recorded with its type and message)
                    failed[rows, name] = f"{type(exc).__name__}: {exc}"[:500]
                    print(f"{preset} rows {rows} {name}: FAILED {failed[rows, name][:200]}", flush=True)
        # After every capture (captures write slots [0, rows)): a real context of ctx random tokens, so the
        # attention reads non-zero K/V. A step writes K/V at ctx + tree slots only: every replay sees this cache.
        model.use_fused_kernels(True)
        gen = torch.Generator().manual_seed(0)
        prefill_random(model, cache, attn, ctx, gen)
    records = []
    for rows, tree_len in cases:
        ran = [name for name in variants if (rows, name) in graphs]
        if not ran:
            records.append({"preset": preset, "rows": rows, "tree_len": tree_len, "ctx": ctx, "cap": cap,
                            "variants": {}, "failed": {n: failed[rows, n] for n in variants}})
            continue
        ids, pos, slots, mask = tree_inputs(rows, ctx, model.shape.vocab_size, gen)
        full_mask = torch.zeros(rows, tree_len, dtype=torch.bool)
        full_mask[:, :rows] = mask
        logits = {name: graphs[rows, name].replay(ids, pos, slots, ctx, full_mask).float().clone()
                  for name in ran}
        torch.cuda.synchronize()
        times: dict[str, list[float]] = {name: [] for name in ran}
        for _ in range(rounds):
            for name in ran:
                g = graphs[rows, name].graph
                g.replay()  # one untimed replay: the variant's own kernels warm, as in a run of steps
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(inner):
                    g.replay()
                b.record()
                b.synchronize()
                times[name].append(a.elapsed_time(b) * 1e-3 / inner)
        floor = byte_floor_s(model, ctx, rows)
        base = logits[ran[0]]  # the first variant that ran (base, unless it failed)
        rec = {"preset": preset, "rows": rows, "tree_len": tree_len, "ctx": ctx, "cap": cap, "floor_s": floor,
               "floor_w8_s": byte_floor_s(model, ctx, rows, weight_bits=8),
               "logits_vs": ran[0], "variants": {},
               "failed": {n: failed[rows, n] for n in variants if (rows, n) in failed}}
        for name in ran:
            med = statistics.median(times[name])
            bits = weight_bits_of(parse_variant(name)[1])
            rec["variants"][name] = {
                "replay_s": med, "over_floor": med / floor, "replay_s_all": times[name], "weight_bits": bits,
                "over_own_floor": med / (rec["floor_w8_s"] if bits == 8 else floor),
                "max_abs_diff_vs_base": (logits[name] - base).abs().max().item(),
                "argmax_agree_vs_base": (logits[name].argmax(-1) == base.argmax(-1)).float().mean().item(),
            }
            if profile_reps:
                prof = profile_graph(graphs[rows, name].graph.replay, profile_reps)
                rec["variants"][name]["kernel_profile"] = prof
                print(f"{preset} rows {rows} {name}: kernels of one replay (exposed = how far each moves its end)\n"
                      + profile_table(prof, floors_us=[("byte floor", floor * 1e6)]), flush=True)
        records.append(rec)
        print(f"{preset} rows {rows}: " + ", ".join(f"{v} {rec['variants'][v]['replay_s'] * 1e3:.3f} ms"
                                                   for v in ran), flush=True)
    del graphs, copies, model, cache
    torch.cuda.empty_cache()
    return records


def table(results: list[dict], variants: list[str]) -> str:
    """Markdown: one row per variant, one column per case (ms and x floor; "failed" where it did not run), then
    per case the floor and the logits' agreement with the first variant that ran."""
    cols = [f"{r['preset']} rows {r['rows']}" for r in results]
    lines = ["| variant | " + " | ".join(f"{c}: ms (x floor)" for c in cols) + " |", "|---" * (1 + len(cols)) + "|"]
    for v in variants:
        cells = [f"{r['variants'][v]['replay_s'] * 1e3:.3f} ({r['variants'][v]['over_floor']:.2f})"
                 if v in r["variants"] else "failed" for r in results]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    for r in results:
        ran = list(r["variants"])
        if not ran:
            lines.append(f"{r['preset']} rows {r['rows']}: every variant failed")
            continue
        diff = max(r["variants"][v]["max_abs_diff_vs_base"] for v in ran)
        agree = min(r["variants"][v]["argmax_agree_vs_base"] for v in ran)
        lines.append(f"{r['preset']} rows {r['rows']}: floor {r['floor_s'] * 1e3:.3f} ms; logits vs {r['logits_vs']}: "
                     f"max |diff| {diff:.3g}, argmax agreement >= {agree:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="llama3-8b:1:1,llama3-8b:8:8,llama3-8b:16:16,llama3.2-1b:16:64",
                   help="comma-separated preset:rows:tree_len")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--ctx", type=int, default=1024)
    p.add_argument("--cap", type=int, default=2048, help="KV cache slots (the runtime's max_seq_len_tokens)")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--inner", type=int, default=10)
    p.add_argument("--profile-kernels", type=int, default=0, metavar="REPS",
                   help="also profile REPS replays per variant: exposed time per kernel (bench/graph_profile.py)")
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16",
                   help="weights and activations (w8 variants: the layers' projections fp8, the rest this)")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    if a.profile_kernels < 0:
        raise SystemExit(f"--profile-kernels: expected a count >= 0, got {a.profile_kernels}")
    variants = a.variants.split(",")
    for v in variants:
        parse_variant(v)
    cases: dict[str, list[tuple[int, int]]] = {}
    for spec in a.cases.split(","):
        try:
            preset, rows, tree_len = spec.split(":")
            cases.setdefault(preset, []).append((int(rows), int(tree_len)))
        except ValueError:
            raise SystemExit(f"--cases: {spec!r} is not preset:rows:tree_len") from None
        try:
            model_preset(preset)
        except (KeyError, ValueError) as e:
            raise SystemExit(f"--cases: {spec!r}: {e}") from None
        if not 1 <= int(rows) <= min(int(tree_len), 64):
            raise SystemExit(f"--cases: {spec!r}: needs 1 <= rows <= tree_len and rows <= 64 (a decode step)")
        if a.ctx + int(tree_len) > a.cap:
            raise SystemExit(f"--cases: {spec!r}: --ctx {a.ctx} + tree_len {tree_len} exceeds --cap {a.cap} KV slots "
                             f"(the step would attend past the cache)")
        if [r for r, _ in cases[preset]].count(int(rows)) > 1:
            raise SystemExit(f"--cases: {spec!r}: {preset} has another case of {rows} rows (a preset's graphs are "
                             f"captured once per row count: time another tree_len in its own run)")
    if not torch.cuda.is_available():
        raise SystemExit("bench_step_variants: needs a CUDA GPU (the steps are CUDA graphs)")
    results = [rec for preset, pcs in cases.items()
               for rec in run_preset(preset, pcs, a.ctx, a.cap, variants, a.rounds, a.inner, a.profile_kernels,
                                     a.dtype)]
    record = {"benchmark": "step_variants", "git_sha": git_sha(), "device": torch.cuda.get_device_name(),
              "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "triton": __import__("triton").__version__,
              "config": {"ctx": a.ctx, "cap": a.cap, "rounds": a.rounds, "inner": a.inner, "dtype": a.dtype,
                         "profile_kernels": a.profile_kernels,
                         "variants": {v: _variant_config(v) for v in variants},
                         "cases": a.cases},
              "results": results}
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(a.out, record)
    print(table(results, variants))
    return record


if __name__ == "__main__":
    main()
