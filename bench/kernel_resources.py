"""Registers, spills and shared memory of the tree-attention kernel per launch configuration, compiled offline.

    python bench/kernel_resources.py [--arch 90] [--out bench/results] [--quick]

No GPU needed: `triton.compile` lowers the kernel for a target (sm_90a by default) and the ptxas that ships with
Triton assembles it with `-v`, whose report gives registers per thread, the stack frame and spill bytes. Each case
is a runtime launch shape, Llama-3-8B (Hq 32, Hkv 8, D 128) or Llama-3.2-1B (Hq 32, Hkv 8, D 64) at T query tokens,
with the tile the kernel's own heuristic picks on CUDA (`kernels.tree_attention.attention_tile`) and, next to it,
a 64-key tile on 4 warps; with and without the fused RoPE + KV write (`rope_tree_attention`). The 2026-11-30
finding it was written for: the wide tile (256 keys, 8 warps) compiles to 32 registers and a ~5 KB spill stack.
Spills are not time: the GPU benchmarks (bench/bench_attention_splits.py, bench/bench_step_variants.py) decide;
this is the check to run before and after a kernel change, in seconds, on any machine. Writes
`<out>/kernel_resources_<date>.json` (git SHA, date, Triton and ptxas versions, target) and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from conf.rundir import atomic_write_json, git_sha  # noqa: E402

SHAPES = {"llama3-8b": (32, 8, 128), "llama3.2-1b": (32, 8, 64)}
ROWS = (1, 8, 16)
ALT_TILE = {"block_n": 64, "num_stages": 3, "num_warps": 4}
"""The non-wide tile next to the heuristic's (64 keys, 3 stages, 4 warps)."""
POINTER_TYPES = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "Out": "*bf16", "Mask": "*u8", "prefix_arg": "*i32",
                 "WsAcc": "*fp32", "WsM": "*fp32", "WsL": "*fp32", "Counter": "*i32", "Pos": "*i64",
                 "InvFreq": "*fp32", "Slots": "*i64"}
"""Types of the kernel's pointer arguments as the CUDA-graph runtime passes them (bf16 model, tensor prefix)."""
FLOAT_ARGS = {"qk_scale"}
_PTXAS_REPORT = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads.*?"
                           r"Used (\d+) registers", re.S)


def ptxas_path() -> Path:
    """The ptxas that ships with Triton's NVIDIA backend."""
    import triton

    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not path.exists():
        raise SystemExit(f"kernel_resources: no ptxas at {path} (this Triton has no NVIDIA backend binaries)")
    return path


def ptxas_report(ptx: str, arch: int) -> dict:
    """Assemble `ptx` with `ptxas -v`: registers, stack frame and spill bytes of its one kernel."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        proc = subprocess.run([str(ptxas_path()), f"-arch=sm_{arch}a", "-v", str(src), "-o", str(Path(tmp) / "k.o")],
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"kernel_resources: ptxas failed: {proc.stderr[-500:]}")
    m = _PTXAS_REPORT.search(proc.stderr)
    if m is None:
        raise RuntimeError(f"kernel_resources: no resource line in ptxas' report: {proc.stderr[-500:]}")
    stack, spill_st, spill_ld, regs = map(int, m.groups())
    return {"registers": regs, "stack_bytes": stack, "spill_store_bytes": spill_st, "spill_load_bytes": spill_ld}


def compile_case(shape: str, rows: int, rope: bool, tile: dict, arch: int) -> dict:
    """Compile the tree-attention kernel for one launch and report its resources."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernels.tree_attention import _tree_attention_kernel, attention_tile

    if not isinstance(_tree_attention_kernel, triton.runtime.jit.JITFunction):
        raise SystemExit("kernel_resources: the kernels were imported under TRITON_INTERPRET=1 (interpreted functions "
                         "do not compile); run with TRITON_INTERPRET=0")
    hq, hkv, d = SHAPES[shape]
    group = hq // hkv
    bm, bn, stages, warps, wide = attention_tile(rows * group, d, 2, True, **tile)
    constexprs = {"GROUP": group, "BLOCK_M": bm, "BLOCK_N": bn, "HEAD_DIM": d, "SPLIT": True,
                  "PREFIX_IN_TENSOR": True, "UPCAST": False, "DOT_PRECISION": "tf32", "USE_PDL": 2, "ROPE": rope,
                  "BLOCK_T": triton.next_power_of_2(rows) if rope else 1}
    names = _tree_attention_kernel.arg_names
    signature = {n: "constexpr" if n in constexprs else POINTER_TYPES.get(n, "fp32" if n in FLOAT_ARGS else "i32")
                 for n in names}
    src = ASTSource(fn=_tree_attention_kernel, signature=signature,
                    constexprs={(names.index(n),): v for n, v in constexprs.items()})
    kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps,
                                                                               "num_stages": stages})
    return {"shape": shape, "rows": rows, "rope": rope, "tile": "heuristic" if not tile else "alt",
            "block_m": bm, "block_n": bn, "num_stages": stages, "num_warps": warps, "wide": wide,
            "shared_bytes": kernel.metadata.shared, **ptxas_report(kernel.asm["ptx"], arch)}


GEMM_TILES = {
    # (kernel, what, BLOCK_N or BLOCK_I, BLOCK_K, stages); BLOCK_M 16 (1-16 rows), 4 warps, bf16 operands
    "qkv_8b": ("skinny", "Llama-3-8B QKV, tuned", 64, 256, 4),
    "qkv_8b_k128": ("skinny", "Llama-3-8B QKV, 128-element K steps", 64, 128, 4),
    "o_8b": ("skinny", "Llama-3-8B o, tuned", 32, 256, 4),
    "o_8b_k128": ("skinny", "Llama-3-8B o, 128-element K steps", 32, 128, 4),
    "down_8b": ("skinny", "Llama-3-8B down / LM head, tuned", 64, 128, 4),
    "swiglu": ("swiglu", "SwiGLU, default (BLOCK_K 128)", 64, 128, 4),
    "swiglu_k64": ("swiglu", "SwiGLU, BLOCK_K 64", 64, 64, 4),
}
"""The weight-streaming GEMM tiles of the decode step (`--gemms`): the tuned ones and the spill-free alternatives
measured against them in the step (bench/bench_step_variants.py qkv_k128 / o_k128 / swiglu_k64: none faster)."""


def compile_gemm_case(name: str, arch: int) -> dict:
    """Compile one GEMM_TILES entry (skinny GEMM or SwiGLU kernel) and report its resources."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernels.fused_mlp import _swiglu_kernel
    from kernels.skinny_linear import _skinny_kernel

    kind, what, bn, bk, stages = GEMM_TILES[name]
    common = {"BLOCK_M": 16, "BLOCK_K": bk, "UPCAST": False, "DOT_PRECISION": "tf32", "USE_PDL": 2}
    if kind == "skinny":
        fn, types, consts = _skinny_kernel, {"X": "*bf16", "W": "*bf16", "Out": "*fp32"}, \
            {**common, "BLOCK_N": bn, "EVEN_K": True}
    else:
        fn, types, consts = _swiglu_kernel, {"X": "*bf16", "Wg": "*bf16", "Wu": "*bf16", "Out": "*bf16"}, \
            {**common, "BLOCK_I": bn}
    names = fn.arg_names
    signature = {n: "constexpr" if n in consts else types.get(n, "i32") for n in names}
    src = ASTSource(fn=fn, signature=signature, constexprs={(names.index(n),): v for n, v in consts.items()})
    kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": 4, "num_stages": stages})
    return {"case": name, "kernel": kind, "what": what, "block_n": bn, "block_k": bk, "num_stages": stages,
            "num_warps": 4, "shared_bytes": kernel.metadata.shared, **ptxas_report(kernel.asm["ptx"], arch)}


def run(arch: int, quick: bool) -> list[dict]:
    """Every (shape, rows, rope, tile) case; --quick: the 8B rows-1 heuristic tile only."""
    cases = ([("llama3-8b", 1, False, {})] if quick else
             [(s, r, rope, tile) for s in SHAPES for r in ROWS for rope in (False, True) for tile in ({}, ALT_TILE)])
    out = []
    for shape, rows, rope, tile in cases:
        rec = compile_case(shape, rows, rope, tile, arch)
        out.append(rec)
        print(f"{shape} rows {rows} rope {rope} {rec['tile']}: {rec['registers']} registers, "
              f"{rec['stack_bytes']} B stack, {rec['spill_store_bytes']} B spill stores", flush=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", type=int, default=90, help="compute capability to compile for (90: H100 / H200)")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results")
    ap.add_argument("--quick", action="store_true", help="one case (tests)")
    ap.add_argument("--gemms", action="store_true", help="the weight-streaming GEMM tiles instead (GEMM_TILES)")
    a = ap.parse_args(argv)
    if a.gemms:
        return gemm_main(a)
    import triton

    version = subprocess.run([str(ptxas_path()), "--version"], capture_output=True, text=True).stdout.strip()
    today = datetime.date.today().isoformat()
    result = {"benchmark": "kernel_resources", "date": today, "git_sha": git_sha(),
              "device": f"offline compile for sm_{a.arch}a (no GPU)", "triton": triton.__version__,
              "ptxas": version.splitlines()[-1] if version else "unknown",
              "config": {"arch": a.arch, "shapes": SHAPES, "rows": list(ROWS), "alt_tile": ALT_TILE, "quick": a.quick,
                         "kernel": "kernels.tree_attention._tree_attention_kernel"},
              "rows": run(a.arch, a.quick)}
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"kernel_resources_{today}{'_quick' if a.quick else ''}.json"
    atomic_write_json(path, result)
    print("| shape | rows | rope | tile (BM x BN, stages, warps) | registers | stack B | spill stores B |")
    print("|---|---|---|---|---|---|---|")
    for r in result["rows"]:
        print(f"| {r['shape']} | {r['rows']} | {r['rope']} | {r['tile']} ({r['block_m']} x {r['block_n']}, "
              f"{r['num_stages']}, {r['num_warps']}) | {r['registers']} | {r['stack_bytes']} | "
              f"{r['spill_store_bytes']} |")
    print(f"-> {path}")
    return result


def gemm_main(a: argparse.Namespace) -> dict:
    """`--gemms`: every GEMM_TILES entry (--quick: the first), to <out>/kernel_resources_gemms_<date>.json."""
    import triton

    version = subprocess.run([str(ptxas_path()), "--version"], capture_output=True, text=True).stdout.strip()
    today = datetime.date.today().isoformat()
    rows = [compile_gemm_case(name, a.arch) for name in (list(GEMM_TILES)[:1] if a.quick else GEMM_TILES)]
    result = {"benchmark": "kernel_resources_gemms", "date": today, "git_sha": git_sha(),
              "device": f"offline compile for sm_{a.arch}a (no GPU)", "triton": triton.__version__,
              "ptxas": version.splitlines()[-1] if version else "unknown",
              "config": {"arch": a.arch, "tiles": GEMM_TILES, "quick": a.quick}, "rows": rows}
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"kernel_resources_gemms_{today}{'_quick' if a.quick else ''}.json"
    atomic_write_json(path, result)
    print("| case | tile (BN x BK, stages) | registers | spill stores B | shared B |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['what']} | {r['block_n']} x {r['block_k']}, {r['num_stages']} | {r['registers']} | "
              f"{r['spill_store_bytes']} | {r['shared_bytes']} |")
    print(f"-> {path}")
    return result


if __name__ == "__main__":
    main()
