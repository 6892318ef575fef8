"""Registers, spills and shared memory of the decode step's kernels per launch configuration, compiled offline.

    python tools/kernel_resources.py [--arch 90] [--out bench/results] [--quick] [--gemms | --attention-variants]

No GPU needed: `triton.compile` lowers the kernel for a target (sm_90a by default) and the ptxas that ships with
Triton assembles it with `-v`, whose report gives registers per thread, the stack frame and spill bytes. Each case
is a runtime launch shape, Llama-3-8B (Hq 32, Hkv 8, D 128) or Llama-3.2-1B (Hq 32, Hkv 8, D 64) at T query tokens,
with the tile the kernel's own heuristic picks on CUDA (`kernels.tree_attention.attention_tile`) and, next to it,
a 64-key tile on 4 warps; with and without the fused RoPE + KV write (`rope_tree_attention`). `--gemms`: the
weight-streaming GEMM tiles instead (GEMM_TILES).

Each compile is specialised as the JIT specialises a runtime launch (`jit_specialization`): 16-byte-aligned
pointers and integer arguments divisible by 16 get `tt.divisibility = 16`, integers equal to 1 become constants.
Without that (this tool before 2026-11-30's eighth session) the loads are not vectorised and the wide attention tile
compiled to 32 registers and ~10 KB of spill code, which the GPU never ran: Nsight Compute read 242 registers on the
H200 (bench/results/ncu_2026-11-30_2eb4f15/), and this specialised compile gives 240-242 and no spills. The device's
Triton (3.6) and this machine's (3.7) still differ; the GPU decides (Nsight Compute).
Writes `<out>/kernel_resources[_gemms]_<date>.json` (git SHA, date, Triton and ptxas versions, target) and a table.
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
H200_SMS = 132
ROWS = (1, 8, 16)
ALT_TILE = {"block_n": 64, "num_stages": 3, "num_warps": 4}
"""The non-wide tile next to the heuristic's (64 keys, 3 stages, 4 warps)."""
POINTER_TYPES = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "KDesc": "*bf16", "VDesc": "*bf16", "Out": "*bf16",
                 "Mask": "*u8", "prefix_arg": "*i32", "WsAcc": "*fp32", "WsM": "*fp32", "WsL": "*fp32",
                 "Counter": "*i32", "Pos": "*i64", "InvFreq": "*fp32", "Slots": "*i64"}
"""Types of the kernel's pointer arguments as the CUDA-graph runtime passes them (bf16 model, tensor prefix; KDesc /
VDesc are tensor descriptors only with `tma`, else unused pointers)."""
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


def ptxas_report(ptx: str, arch: int, sass: bool = False) -> dict:
    """Assemble `ptx` once with `ptxas -v`: registers, stack frame and spill bytes of its one kernel; with `sass`,
    also its static SASS (`sass_stats` of cuobjdump -sass over the same object)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, obj = Path(tmp) / "kernel.ptx", Path(tmp) / "k.o"
        src.write_text(ptx)
        proc = subprocess.run([str(ptxas_path()), f"-arch=sm_{arch}a", "-v", str(src), "-o", str(obj)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"kernel_resources: ptxas failed: {proc.stderr[-500:]}")
        dump = None
        if sass:
            dump = subprocess.run([str(ptxas_path().parent / "cuobjdump"), "-sass", str(obj)], capture_output=True,
                                  text=True)
            if dump.returncode != 0:
                raise RuntimeError(f"kernel_resources: cuobjdump failed: {dump.stderr[-500:]}")
    m = _PTXAS_REPORT.search(proc.stderr)
    if m is None:
        raise RuntimeError(f"kernel_resources: no resource line in ptxas' report: {proc.stderr[-500:]}")
    stack, spill_st, spill_ld, regs = map(int, m.groups())
    report = {"registers": regs, "stack_bytes": stack, "spill_store_bytes": spill_st, "spill_load_bytes": spill_ld}
    return {**report, **sass_stats(dump.stdout)} if dump is not None else report


def jit_specialization(fn, signature: dict[str, str], values: dict[str, int]) -> tuple[dict, dict]:
    """(constexprs, attrs) for ASTSource as the JIT specialises a launch whose integer arguments have `values`: every
    pointer 16-byte aligned (`tt.divisibility` 16), an int divisible by 16 likewise, an int equal to 1 a constant."""
    names = fn.arg_names
    constexprs, attrs = {}, {}
    for name, kind in signature.items():
        if kind == "constexpr":
            continue
        if kind.startswith("*"):
            attrs[(names.index(name),)] = [["tt.divisibility", 16]]
        elif kind == "i32":
            if name not in values:
                raise KeyError(f"kernel_resources: no launch value for {fn.__name__}'s integer argument {name!r}")
            v = values[name]
            if v == 1:
                constexprs[name] = 1
            elif v % 16 == 0:
                attrs[(names.index(name),)] = [["tt.divisibility", 16]]
    return constexprs, attrs


def _compile(fn, types: dict[str, str], consts: dict, values: dict[str, int], arch: int, warps: int, stages: int):
    """triton.compile of `fn` for sm_<arch>a with the JIT's specialisation of a launch with `values`."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if not isinstance(fn, triton.runtime.jit.JITFunction):
        raise SystemExit("kernel_resources: the kernels were imported under TRITON_INTERPRET=1 (interpreted functions "
                         "do not compile); run with TRITON_INTERPRET=0")
    names = fn.arg_names
    signature = {n: "constexpr" if n in consts else types.get(n, "i32") for n in names}
    ones, attrs = jit_specialization(fn, signature, values)
    signature.update({n: "constexpr" for n in ones})
    src = ASTSource(fn=fn, signature=signature,
                    constexprs={(names.index(n),): v for n, v in {**consts, **ones}.items()}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps, "num_stages": stages})


def compile_case(shape: str, rows: int, rope: bool, tile: dict, arch: int, prefetch: bool = True,
                 kernel_out: list | None = None, tma: bool = False, sass: bool = False) -> dict:
    """Compile the tree-attention kernel for one launch (the CUDA-graph runtime's: a 2,048-slot cache, the prefix in
    a device tensor, a tree of `rows` nodes, `prefetch` as the runtime's prefix_ready launch) and report its
    resources (`sass`: also its static SASS, `sass_stats`); `kernel_out`: a list the compiled kernel is appended to
    (its PTX, for inspection)."""
    import triton

    from kernels.tree_attention import MIN_BLOCKS_PER_SPLIT, _tree_attention_kernel, attention_tile, num_splits_for

    hq, hkv, d = SHAPES[shape]
    group = hq // hkv
    bm, bn, stages, warps, wide = attention_tile(rows * group, d, 2, True, **tile)
    constexprs = {"GROUP": group, "BLOCK_M": bm, "BLOCK_N": bn, "HEAD_DIM": d, "SPLIT": True,
                  "PREFIX_IN_TENSOR": True, "UPCAST": False, "DOT_PRECISION": "tf32", "USE_PDL": 2, "ROPE": rope,
                  "BLOCK_T": triton.next_power_of_2(rows) if rope else 1,
                  "PREFETCH": prefetch, "TMA": tma}
    cap, m_blocks = 2048, triton.cdiv(rows * group, bm)
    splits = num_splits_for(H200_SMS, m_blocks * hkv, triton.cdiv(cap - rows, bn))
    q_row = (hq + 2 * hkv) * d if rope else hq * d  # rope: q is a view of the QKV projection's rows
    values = {"n_rows": rows * group, "tree_len": rows, "num_splits": splits,
              "min_blocks": 1 if wide else MIN_BLOCKS_PER_SPLIT, "n_tok": rows, "num_q_heads": hq,
              "stride_qt": q_row, "stride_qh": d, "stride_kc": hkv * d, "stride_kh": d, "stride_vc": hkv * d,
              "stride_vh": d, "stride_ot": hq * d, "stride_oh": d, "stride_mt": rows,
              "stride_pos": 1 if rope else 0, "stride_slot": 1 if rope else 0}
    types = {**POINTER_TYPES, **{n: "fp32" for n in FLOAT_ARGS}}
    if tma:  # kernels.tree_attention.use_tma_prefix: the prefix K/V through [BLOCK_N, D] tensor descriptors
        types.update({n: f"tensordesc<bf16[{bn}, {d}]>" for n in ("KDesc", "VDesc")})
    kernel = _compile(_tree_attention_kernel, types, constexprs, values, arch, warps, stages)
    if kernel_out is not None:
        kernel_out.append(kernel)
    return {"shape": shape, "rows": rows, "rope": rope, "prefetch": prefetch,
            "tile": "heuristic" if not tile else "alt",
            "block_m": bm, "block_n": bn, "num_stages": stages, "num_warps": warps, "wide": wide,
            "shared_bytes": kernel.metadata.shared, **ptxas_report(kernel.asm["ptx"], arch, sass)}


GEMM_TILES = {
    # (kernel, what, N, K, split_k, BLOCK_N or BLOCK_I, BLOCK_K, stages); one row (BLOCK_M 16), 4 warps, bf16
    "qkv_8b": ("skinny", "Llama-3-8B QKV, tuned", 6144, 4096, 1, 64, 256, 4),
    "qkv_8b_k128": ("skinny", "Llama-3-8B QKV, 128-element K steps", 6144, 4096, 1, 64, 128, 4),
    "o_8b": ("skinny", "Llama-3-8B o, tuned", 4096, 4096, 2, 32, 256, 4),
    "o_8b_k128": ("skinny", "Llama-3-8B o, 128-element K steps", 4096, 4096, 2, 32, 128, 4),
    "down_8b": ("skinny", "Llama-3-8B down, tuned", 4096, 14336, 4, 64, 128, 4),
    "swiglu": ("swiglu", "SwiGLU, default (BLOCK_K 128)", 14336, 4096, 1, 64, 128, 4),
    "swiglu_k64": ("swiglu", "SwiGLU, BLOCK_K 64", 14336, 4096, 1, 64, 64, 4),
}
"""The weight-streaming GEMM tiles of the decode step (`--gemms`): the tuned ones and the half-size K steps measured
against them in the step (step replays with qkv_k128 / o_k128 / swiglu_k64 tiles: none faster; specialised as
the JIT does, none of them spills more than 16 B)."""


def compile_gemm_case(name: str, arch: int) -> dict:
    """Compile one GEMM_TILES entry (skinny GEMM or SwiGLU kernel) for a one-row launch and report its resources."""
    from kernels.fused_mlp import _swiglu_kernel
    from kernels.skinny_linear import _skinny_kernel, split_chunk

    kind, what, n, k, split, bn, bk, stages = GEMM_TILES[name]
    common = {"BLOCK_M": 16, "BLOCK_K": bk, "UPCAST": False, "DOT_PRECISION": "tf32", "USE_PDL": 2}
    if kind == "skinny":
        chunk = split_chunk(k, split) if split > 1 else k
        kernel = _compile(_skinny_kernel, {"X": "*bf16", "W": "*bf16", "S": "*bf16", "Out": "*fp32"},
                          {**common, "BLOCK_N": bn, "EVEN_K": k % (split * bk) == 0, "BALANCED": False,
                           "HAS_SCALE": False},
                          {"M": 1, "N": n, "K": k, "K_CHUNK": chunk, "stride_xm": k, "stride_wn": k,
                           "stride_os": n if split > 1 else 0, "stride_om": n}, arch, 4, stages)
    else:
        kernel = _compile(_swiglu_kernel, {"X": "*bf16", "Wg": "*bf16", "Wu": "*bf16", "Sg": "*bf16", "Su": "*bf16",
                                           "Out": "*bf16"}, {**common, "BLOCK_I": bn, "HAS_SCALE": False},
                          {"M": 1, "I": n, "K": k, "stride_xm": k, "stride_wgi": k, "stride_wui": k, "stride_om": n},
                          arch, 4, stages)
    return {"case": name, "kernel": kind, "what": what, "n": n, "k": k, "split_k": split, "block_n": bn,
            "block_k": bk, "num_stages": stages, "num_warps": 4, "shared_bytes": kernel.metadata.shared,
            **ptxas_report(kernel.asm["ptx"], arch)}


ATTENTION_CASES = (("llama3-8b", 1, True), ("llama3-8b", 8, False), ("llama3.2-1b", 16, False),
                   ("llama3.2-1b", 1, True))
"""(shape, rows, fused RoPE) of the runtime's attention launches: single-token steps fuse RoPE, tree steps do not."""
ATTENTION_VARIANTS = {
    "runtime": {},
    "no_prefetch": {"prefetch": False},
    "tma": {"tma": True},
    "w16": {"tile": {"num_warps": 16}},
}
"""`--attention-variants`: the runtime's launch (prefix_ready on the fused single-token path only) and other launches
of the same kernel next to it: without the prefetch, through TMA descriptors, at 16 warps."""
SASS_OPCODES = ("IMAD", "LEA", "LDG", "STS", "LDS", "UTMALDG", "HMMA", "HGMMA", "MUFU", "ACQBULK")


def sass_stats(dump: str) -> dict:
    """Static SASS from cuobjdump -sass text (`ptxas_report(sass=True)`): instruction lines and the
    count of each SASS_OPCODES opcode (predicated or not). Static counts: a line executes once per warp in the
    straight-line wide tile, so they track the executed ones there (Nsight Compute source counters, 2026-11-30).
    `before_pdl_wait`: global loads, shared-memory stores and TMA loads placed before the first griddepcontrol.wait
    (ACQBULK): a prefetch's loads are there, and a store there waits for its load before the kernel can wait."""
    ops = []
    for line in dump.splitlines():
        if re.match(r"\s+/\*[0-9a-f]{4}\*/", line):
            tokens = line.split("*/", 1)[1].split()
            if tokens and tokens[0].startswith("@"):  # a predicate: @P0, @!UP1, ...
                tokens = tokens[1:]
            ops.append(tokens[0].split(".")[0] if tokens else "")
    wait = ops.index("ACQBULK") if "ACQBULK" in ops else 0  # griddepcontrol.wait: what a PDL launch does before it
    return {"sass_lines": len(ops), "sass_opcodes": {op: ops.count(op) for op in SASS_OPCODES},
            "before_pdl_wait": {op: ops[:wait].count(op) for op in ("LDG", "STS", "UTMALDG")}}


def run_attention_variants(arch: int, quick: bool) -> list[dict]:
    """Each ATTENTION_CASES launch under each ATTENTION_VARIANTS entry: resources and static SASS."""
    cases = ATTENTION_CASES[:1] if quick else ATTENTION_CASES
    out = []
    for shape, rows, rope in cases:
        for name, v in ATTENTION_VARIANTS.items():
            rec = {"variant": name, **compile_case(shape, rows, rope, v.get("tile", {}), arch,
                                                   prefetch=v.get("prefetch", rope), tma=v.get("tma", False),
                                                   sass=True)}
            out.append(rec)
            print(f"{shape} rows {rows} {name}: {rec['registers']} registers, {rec['spill_store_bytes']} B spill "
                  f"stores, {rec['sass_lines']} SASS lines", flush=True)
    return out


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
    ap.add_argument("--case", action="append", help="with --gemms: only these GEMM_TILES cases (repeatable)")
    ap.add_argument("--attention-variants", action="store_true",
                    help="the attention's experiment switches side by side (ATTENTION_VARIANTS), with static SASS")
    a = ap.parse_args(argv)
    if a.attention_variants:
        return write_results(a, "kernel_resources_attention_variants",
                             {"cases": [list(c) for c in ATTENTION_CASES], "variants": ATTENTION_VARIANTS},
                             run_attention_variants(a.arch, a.quick),
                             "| shape | rows | variant | warps | registers | spill stores B | shared B | SASS lines | "
                             "IMAD | LDG | STS | UTMALDG | LDG / STS before the PDL wait |",
                             lambda r: f"| {r['shape']} | {r['rows']} | {r['variant']} | {r['num_warps']} | "
                                       f"{r['registers']} | {r['spill_store_bytes']} | {r['shared_bytes']} | "
                                       f"{r['sass_lines']} | " + " | ".join(str(r['sass_opcodes'][op]) for op in
                                                                            ("IMAD", "LDG", "STS", "UTMALDG"))
                                       + f" | {r['before_pdl_wait']['LDG']} / {r['before_pdl_wait']['STS']} |")
    if a.gemms:
        for name in a.case or []:
            if name not in GEMM_TILES:
                raise SystemExit(f"--case: {name!r} is not one of {', '.join(GEMM_TILES)}")
        names = a.case or (list(GEMM_TILES)[:1] if a.quick else list(GEMM_TILES))
        rows = [compile_gemm_case(name, a.arch) for name in names]
        return write_results(a, "kernel_resources_gemms", {"tiles": GEMM_TILES}, rows,
                             "| case | tile (BN x BK, stages) | registers | spill stores B | shared B |",
                             lambda r: f"| {r['what']} | {r['block_n']} x {r['block_k']}, {r['num_stages']} | "
                                       f"{r['registers']} | {r['spill_store_bytes']} | {r['shared_bytes']} |")
    return write_results(a, "kernel_resources", {"shapes": SHAPES, "rows": list(ROWS), "alt_tile": ALT_TILE,
                                                 "kernel": "kernels.tree_attention._tree_attention_kernel"},
                         run(a.arch, a.quick),
                         "| shape | rows | rope | tile (BM x BN, stages, warps) | registers | stack B | spill stores B"
                         " |",
                         lambda r: f"| {r['shape']} | {r['rows']} | {r['rope']} | {r['tile']} ({r['block_m']} x "
                                   f"{r['block_n']}, {r['num_stages']}, {r['num_warps']}) | {r['registers']} | "
                                   f"{r['stack_bytes']} | {r['spill_store_bytes']} |")


def write_results(a: argparse.Namespace, name: str, config: dict, rows: list[dict], header: str, line) -> dict:
    """<out>/<name>_<date>[_quick].json (git SHA, date, Triton and ptxas versions, target, config) and the table."""
    import triton

    version = subprocess.run([str(ptxas_path()), "--version"], capture_output=True, text=True).stdout.strip()
    today = datetime.date.today().isoformat()
    result = {"benchmark": name, "date": today, "git_sha": git_sha(),
              "device": f"offline compile for sm_{a.arch}a (no GPU)", "triton": triton.__version__,
              "ptxas": version.splitlines()[-1] if version else "unknown",
              "config": {"arch": a.arch, "quick": a.quick, **config}, "rows": rows}
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"{name}_{today}{'_quick' if a.quick else ''}.json"
    atomic_write_json(path, result)
    print(header)
    print("|---" * header.count(" | ") + "|---|")
    for r in rows:
        print(line(r))
    print(f"-> {path}")
    return result


if __name__ == "__main__":
    main()
