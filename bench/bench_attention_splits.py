"""Tree attention as the CUDA-graph runtime calls it: split count sized from the cache, prefix length in a
device tensor; sweep of the key tile and the keys per split (kernels/tree_attention.py: `block_n`,
MIN_BLOCKS_PER_SPLIT, `num_stages`, `num_warps`), TILES below; the first entry is the kernel's own heuristic.

    python bench/bench_attention_splits.py [--device cuda|cpu] [--out runs/bench]

Shape: one layer of Llama-3-8B (Hq 32, Hkv 8, D 128, bf16; the target's verify: a T x T tree mask) or
Llama-3.2-1B (Hq 32, Hkv 8, D 64; the draft's expansion: T rows over the whole 256-slot tree region), over
`ctx` cached tokens, cache capacity 2,048 + 256 tree slots (as `workload.max_seq_len_tokens=2048`). On CUDA
each variant is captured in a CUDA graph and timed by `triton.testing.do_bench_cudagraph` (median), the K/V
rotating over enough cache copies to overflow the 50 MB L2 (each call reads from HBM), next to its byte
floor (K and V of ctx + tree tokens over 4.29 TB/s). On CPU (interpreter, tiny shape, 8 splits of 16-key
blocks so that every min-blocks value changes the split layout) only the correctness of each variant
against `tree_attention_ref` is checked. Writes
`<out>/attention_splits_<device>_<date>.json` (git SHA, device, date, config) and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from conf.presets import GPU_PRESETS  # noqa: E402
from conf.rundir import BENCH_DIR, atomic_write_json, git_sha  # noqa: E402

TILES = ({}, *({"block_n": 64, "min_blocks": mb, "num_stages": 3} for mb in (1, 2, 4, 8)),
         {"block_n": 128, "min_blocks": 1, "num_stages": 2}, {"block_n": 128, "min_blocks": 2, "num_stages": 2},
         {"block_n": 128, "min_blocks": 1, "num_stages": 2, "num_warps": 8},
         {"block_n": 256, "min_blocks": 1, "num_stages": 1}, {"block_n": 256, "min_blocks": 1, "num_stages": 1,
                                                               "num_warps": 8},
         {"block_n": 256, "min_blocks": 2, "num_stages": 1, "num_warps": 8})
"""Tile variants on CUDA: {} is the heuristic (kernels/tree_attention.py KEYS_PER_SPLIT); keys per split =
block_n x min_blocks. A batched merge of the partials was swept next to these at 2bd79c2
(bench/results/attention_splits_gpu_2026-11-30_2bd79c2.json: slower than the serial one) and removed."""
CPU_TILES = tuple({"min_blocks": mb} for mb in (1, 2, 4, 8))
"""On CPU (the interpreter, correctness only): the 16-key tile at four split sizes."""
SHAPES = {"llama3-8b": (32, 8, 128), "llama3.2-1b": (32, 8, 64)}
TREE_LEN = {"llama3-8b": None, "llama3.2-1b": 256}  # None: a T x T verify mask; else the draft's region
CAP = 2048 + 256
L2_BYTES = 50 * 2**20


def _inputs(torch, hq: int, hkv: int, d: int, rows: int, tree_len: int, cap: int, dtype, device, seed: int):
    """q, k, v and a [rows, tree_len] mask: rows are the last `rows` nodes of a binary tree of tree_len
    nodes (each sees its ancestors and itself), as a verify (tree_len = rows) or a draft expansion."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, hq, d, generator=g).to(device, dtype)
    k = torch.randn(cap, hkv, d, generator=g).to(device, dtype)
    v = torch.randn(cap, hkv, d, generator=g).to(device, dtype)
    parents = [-1] + [(i - 1) // 2 for i in range(1, tree_len)]
    mask = torch.zeros(rows, tree_len, dtype=torch.bool)
    for r, i in enumerate(range(tree_len - rows, tree_len)):
        j = i
        while j >= 0:
            mask[r, j] = True
            j = parents[j]
    return q, k, v, mask.to(device)


def run(device: str) -> dict:
    """Every (shape, rows, ctx, tile) case: CUDA timings, or CPU correctness only."""
    import torch

    from kernels.reference import tree_attention_ref
    from kernels.tree_attention import tree_attention

    cuda = device == "cuda"
    hbm = GPU_PRESETS["h200"].hbm_bytes_per_s
    rows_out = []
    cases = ([(name, rows, ctx) for name in SHAPES for rows in (1, 8, 16) for ctx in (512, 1024, 2000)] if cuda
             else [("tiny", 8, 100)])  # tiny: 7 blocks of 16 keys over 8 splits
    for name, rows, ctx in cases:
        hq, hkv, d = SHAPES.get(name, (4, 2, 32))
        cap = CAP if cuda else 256
        tree_len = TREE_LEN.get(name) or rows
        dtype = torch.bfloat16 if cuda else torch.float32
        q, k, v, mask = _inputs(torch, hq, hkv, d, rows, tree_len, cap, dtype, device, seed=rows + ctx)
        prefix = torch.tensor([ctx], device=device)
        ref = tree_attention_ref(q.float(), k.float(), v.float(), ctx, mask, 1 / math.sqrt(d))
        floor_s = 2 * (ctx + tree_len) * hkv * d * q.element_size() / hbm
        # K/V copies to rotate over, so that no call finds the previous one's K/V in L2
        copies = [(k, v)] + [(k.clone(), v.clone()) for _ in range(
            (L2_BYTES // (2 * k.numel() * k.element_size()) + 1) if cuda else 0)]
        tune = {} if cuda else {"num_splits": 8, "block_n": 16}  # CPU: a split layout min_blocks changes
        rest = (prefix, mask, 1 / math.sqrt(d))
        for tile in (TILES if cuda else CPU_TILES):
            out = torch.empty_like(q)
            turn = [0]
            kw = {**tune, **{k: v for k, v in tile.items() if k != "min_blocks"}}
            mb = tile.get("min_blocks")

            def call(q=q, out=out, mb=mb, kw=kw, turn=turn, copies=copies, rest=rest):
                kc, vc = copies[turn[0] % len(copies)]
                turn[0] += 1
                tree_attention(q, kc, vc, *rest, out=out, min_blocks_per_split=mb, **kw)

            call()
            err = (out.float() - ref).abs().max().item() / ref.abs().max().item()
            row = {"shape": name, "rows": rows, "tree_len": tree_len, "ctx": ctx, "cap": cap,
                   "tile": tile or "heuristic", "rel_err": err}
            if cuda:
                import triton

                torch.cuda.synchronize()
                row["us"] = triton.testing.do_bench_cudagraph(call, rep=50, return_mode="median") * 1e3
                row["floor_us"] = floor_s * 1e6
            rows_out.append(row)
    return {"rows": rows_out}


def main(argv: list[str] | None = None) -> dict:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--out", type=Path, default=BENCH_DIR)
    a = ap.parse_args(argv)
    import torch

    device = "cuda" if a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available()) else "cpu"
    today = datetime.date.today().isoformat()
    result = {"benchmark": "tree_attention_tiles", "date": today, "git_sha": git_sha(),
              "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (interpreter: correctness only)",
              "config": {"tiles": list(TILES if device == "cuda" else CPU_TILES),
                         "cap": CAP, "timing": "do_bench_cudagraph median",
                         "l2_rotation": True},
              **run(device)}
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"attention_splits_{'gpu' if device == 'cuda' else 'cpu'}_{today}.json"
    atomic_write_json(path, result)
    print("| shape | rows | ctx | tile | us | floor us | rel err |")
    print("|---|---|---|---|---|---|---|")
    for r in result["rows"]:
        us = f"{r['us']:.1f}" if "us" in r else "-"
        fl = f"{r['floor_us']:.1f}" if "floor_us" in r else "-"
        tile = r["tile"] if isinstance(r["tile"], str) else ",".join(f"{k}={v}" for k, v in r["tile"].items())
        print(f"| {r['shape']} | {r['rows']} | {r['ctx']} | {tile} | {us} | {fl} | {r['rel_err']:.1e} |")
    print(json.dumps({"json": str(path), "device": result["device"]}))
    return result


if __name__ == "__main__":
    main()
