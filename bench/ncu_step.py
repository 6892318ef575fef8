"""One decode step's kernels under Nsight Compute: where each one stalls, not only how long it takes.

    bash scripts/gpu_ncu.sh OUT                       # GPU: ncu over this driver, rows 1 and 8 (the ncu command line)
    python3 bench/ncu_step.py --summarize ncu.csv     # any machine: the table of an ncu CSV (--csv --page details)

The driver builds the model as the runtime runs it (`kernels=graphs`: fused path, skinny GEMMs, PDL late, the fused
RoPE attention on single-token steps; a `--cap`-slot cache, 2,048 as the runtime's default, which sizes the attention's
splits), fills `--ctx` cached tokens with random ids, then runs one eager decode step of
`--rows` tokens between `torch.cuda.profiler.start()` and `stop()`, so ncu (`--profile-from-start off`) sees that
step's first layer only. ncu replays each kernel alone (no PDL overlap), so its durations are the kernels' own;
bench/graph_profile.py gives their exposed share of a graph replay. `--summarize` reads ncu's CSV (`--page details`)
and prints one row per kernel: duration, compute and memory throughput (% of peak), registers, achieved occupancy,
and the top warp-stall reasons (cycles per issued instruction). Random bf16 weights (never zeros); plain argparse.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

STALL_METRIC = re.compile(r"smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")
"""The per-reason warp-stall metrics (cycles per issued instruction) `--metrics regex:...` adds to the details page
(WarpStateStats' own chart reads them); the reason is the captured name, e.g. long_scoreboard, barrier, membar."""
STALL_METRICS_REGEX = "regex:smsp__average_warps?_issue_stalled_.*_per_issue_active\\.ratio"
"""The ncu `--metrics` argument that requests them."""


def run_step(preset: str, rows: int, ctx: int, cap: int, device: str = "cuda",
             rope_attention_all: bool = False):
    """Build the model (runtime kernels) with a `cap`-slot cache, prefill `ctx` tokens, run one eager step of `rows`
    tokens (a binary tree, as bench/bench_step_variants.py's) between the CUDA profiler's start and stop (on CUDA).
    `rope_attention_all`: the fused RoPE attention at every row count (bench_step_variants' *_ropeattn variants; the
    runtime fuses single-token steps only). Returns the profiled step's logits."""
    import torch

    from bench.bench_step_variants import prefill_random, tree_inputs
    from conf.presets import model_preset
    from kernels.pdl import pdl
    from runtime.attention import AttnMeta, make_attention_backend
    from runtime.kv_cache import KVCache
    from runtime.loader import build_model

    dev = torch.device(device)
    cuda = dev.type == "cuda"
    model = build_model(model_preset(preset), "bfloat16" if cuda else "float32", dev, seed=0)
    model.use_fused_kernels(True, skinny=True, rope_attention=True)
    layers, heads, head_dim = model.cache_spec()
    cache = KVCache(layers, cap, heads, head_dim, model.dtype, dev)
    attn = make_attention_backend("triton")
    if rope_attention_all:
        from kernels.tree_attention import ROPE_MAX_TOKENS

        attn.rope_max_tokens = ROPE_MAX_TOKENS
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad(), pdl(True):
        prefill_random(model, cache, attn, ctx, gen)
        ids, pos, slots, mask = (t.to(dev) for t in tree_inputs(rows, ctx, model.shape.vocab_size, gen))
        meta = AttnMeta.tree(ctx, rows, ctx + slots, pos, mask)
        for _ in range(2):  # warm: every kernel of the step compiled before the profiled one
            model(ids, meta, cache, attn)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        logits = model(ids, meta, cache, attn)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
    return logits


def summarize(text: str, top_stalls: int = 4) -> list[dict]:
    """ncu `--csv --page details` text -> one dict per profiled kernel launch (in launch order)."""
    start = text.find('"ID"')
    if start < 0:
        raise ValueError("ncu csv: no header row starting with \"ID\" (was it run with --csv --page details?)")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    need = {"ID", "Kernel Name", "Metric Name", "Metric Value"}
    if not rows or not need <= set(rows[0]):
        raise ValueError(f"ncu csv: expected the columns {sorted(need)}, got {sorted(rows[0]) if rows else 'no rows'}")
    kernels: dict[str, dict] = {}
    for r in rows:
        if not str(r["ID"]).strip().isdigit():  # a "==PROF==" line of ncu's own among the CSV rows
            continue
        k = kernels.setdefault(r["ID"], {"id": int(r["ID"]), "kernel": r["Kernel Name"].split("(")[0][:40],
                                         "grid": r.get("Grid Size", ""), "metrics": {}, "units": {}})
        k["metrics"][r["Metric Name"]] = r["Metric Value"]
        k["units"][r["Metric Name"]] = r.get("Metric Unit", "")
    out = []
    for k in sorted(kernels.values(), key=lambda k: k["id"]):
        m = k["metrics"]

        def num(name: str, m: dict = m) -> float | None:
            try:
                return float(str(m.get(name)).replace(",", ""))  # ncu writes thousands with commas
            except (TypeError, ValueError):
                return None

        dur = num("Duration")
        if dur is not None and k["units"].get("Duration") in ("nsecond", "ns"):
            dur /= 1000.0  # -> us
        elif dur is not None and k["units"].get("Duration") in ("msecond", "ms"):
            dur *= 1000.0
        stalls = sorted(((hit.group(1), v) for name in m if (hit := STALL_METRIC.match(name))
                         and (v := num(name)) is not None), key=lambda s: -s[1])
        out.append({"id": k["id"], "kernel": k["kernel"], "grid": k["grid"], "duration_us": dur,
                    "compute_pct": num("Compute (SM) Throughput"), "memory_pct": num("Memory Throughput"),
                    "dram_pct": num("DRAM Throughput"), "registers": num("Registers Per Thread"),
                    "achieved_occupancy_pct": num("Achieved Occupancy"),
                    "issued_ipc": num("Issued Ipc Active"), "stalls": stalls[:top_stalls]})
    return out


def table(kernels: list[dict]) -> str:
    """Markdown, one row per kernel."""
    lines = ["| # | kernel [grid] | us | SM % | mem % | DRAM % | regs | occ % | top stalls (cycles / instr) |",
             "|---|---|---|---|---|---|---|---|---|"]

    def f(v, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v)

    for k in kernels:
        stalls = ", ".join(f"{name} {v:.1f}" for name, v in k["stalls"])
        lines.append(f"| {k['id']} | {k['kernel']} {k['grid']} | {f(k['duration_us'], '{:.2f}')} | "
                     f"{f(k['compute_pct'])} | {f(k['memory_pct'])} | {f(k['dram_pct'])} | "
                     f"{f(k['registers'], '{:.0f}')} | {f(k['achieved_occupancy_pct'])} | {stalls} |")
    return "\n".join(lines)


MMA_OPCODES = ("HMMA", "HGMMA")
"""SASS tensor-core opcodes: the first one marks the end of a kernel's set-up in `summarize_sass`."""


def _sass_opcode(source: str) -> str:
    """The opcode of a SASS line (its predicate and modifiers dropped): '@!P1 LDG.E.128 R4, ...' -> 'LDG'."""
    parts = source.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0].split(".")[0] if parts else ""


def summarize_sass(text: str, top: int = 12) -> dict:
    """ncu `--page source --print-source sass --csv` text (one kernel) -> where its executed instructions and its
    warp-stall samples fall: totals, the share before the first tensor-core instruction (set-up: addresses, q,
    RoPE), the opcode mix of executed instructions, and the `top` SASS lines by stall samples."""
    start = text.find('"Address"')
    if start < 0:
        raise ValueError('ncu sass csv: no header row starting with "Address" (was it run with --page source '
                         "--print-source sass --csv?)")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    need = {"Address", "Source", "Instructions Executed", "Warp Stall Sampling (All Samples)"}
    if not rows or not need <= set(rows[0]):
        got = sorted(rows[0]) if rows else "no rows"
        raise ValueError(f"ncu sass csv: expected the columns {sorted(need)}, got {got}")

    def num(v) -> float:
        try:
            return float(str(v).replace(",", ""))
        except ValueError:
            return 0.0

    lines = [(r["Source"].strip(), num(r["Instructions Executed"]), num(r["Warp Stall Sampling (All Samples)"]))
             for r in rows]
    first_mma = next((i for i, (src, _, _) in enumerate(lines) if _sass_opcode(src) in MMA_OPCODES), len(lines))
    executed = sum(n for _, n, _ in lines)
    samples = sum(s for _, _, s in lines)
    mix: dict[str, float] = {}
    for src, n, _ in lines:
        mix[_sass_opcode(src)] = mix.get(_sass_opcode(src), 0.0) + n
    hot = sorted(range(len(lines)), key=lambda i: -lines[i][2])[:top]
    return {"sass_lines": len(lines), "executed": executed, "stall_samples": samples,
            "first_mma_line": first_mma if first_mma < len(lines) else None,
            "executed_before_mma": sum(n for _, n, _ in lines[:first_mma]),
            "samples_before_mma": sum(s for _, _, s in lines[:first_mma]),
            "opcodes": sorted(mix.items(), key=lambda kv: -kv[1])[:top],
            "hot_lines": [{"line": i, "samples": lines[i][2], "executed": lines[i][1], "sass": lines[i][0][:80]}
                          for i in sorted(hot) if lines[i][2] > 0]}


def sass_table(summary: dict, warps: int | None = None) -> str:
    """Markdown of `summarize_sass`; `warps`: the launch's warp count, for instructions per warp."""
    ex, smp = summary["executed"], summary["stall_samples"]
    per_warp = f", {ex / warps:,.0f} per warp" if warps else ""
    out = [f"{summary['sass_lines']} SASS lines; {ex:,.0f} warp instructions executed{per_warp}; {smp:,.0f} stall "
           f"samples",
           f"before the first tensor-core instruction (line {summary['first_mma_line']}): "
           f"{summary['executed_before_mma'] / max(ex, 1):.0%} of the instructions, "
           f"{summary['samples_before_mma'] / max(smp, 1):.0%} of the samples",
           "", "| opcode | executed | share |", "|---|---|---|"]
    out += [f"| {op or '-'} | {n:,.0f} | {n / max(ex, 1):.1%} |" for op, n in summary["opcodes"]]
    out += ["", "| SASS line | samples | executed | instruction |", "|---|---|---|---|"]
    out += [f"| {h['line']} | {h['samples']:.0f} | {h['executed']:,.0f} | `{h['sass']}` |"
            for h in summary["hot_lines"]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="llama3-8b")
    p.add_argument("--rows", type=int, default=1, help="tokens in the profiled step")
    p.add_argument("--ctx", type=int, default=1024, help="cached tokens before it")
    p.add_argument("--cap", type=int, default=2048,
                   help="KV cache slots (the runtime's max_seq_len_tokens: it sizes the attention's splits)")
    p.add_argument("--rope-attention-all", action="store_true",
                   help="the fused RoPE attention at every row count (the runtime: single-token steps only)")
    p.add_argument("--summarize", type=Path, default=None, metavar="CSV", help="print the table of an ncu CSV")
    p.add_argument("--sass", type=Path, default=None, metavar="CSV",
                   help="print where one kernel's instructions and stall samples fall (ncu --page source "
                        "--print-source sass --csv)")
    p.add_argument("--warps", type=int, default=None, help="with --sass: the launch's warps (instructions per warp)")
    a = p.parse_args(argv)
    if a.sass is not None:
        if not a.sass.is_file():
            raise SystemExit(f"--sass: no file {a.sass}")
        try:
            print(sass_table(summarize_sass(a.sass.read_text(errors="replace")), a.warps))
        except ValueError as e:
            raise SystemExit(f"--sass {a.sass}: {e}") from None
        return 0
    if a.summarize is not None:
        if not a.summarize.is_file():
            raise SystemExit(f"--summarize: no file {a.summarize}")
        try:
            print(table(summarize(a.summarize.read_text(errors="replace"))))
        except ValueError as e:
            raise SystemExit(f"--summarize {a.summarize}: {e}") from None
        return 0
    if not 1 <= a.rows <= 64:
        raise SystemExit(f"--rows: expected 1..64 (a decode step), got {a.rows}")
    if a.ctx < 1:
        raise SystemExit(f"--ctx: expected >= 1 cached tokens, got {a.ctx}")
    if a.cap < a.ctx + a.rows:
        raise SystemExit(f"--cap: expected >= ctx + rows = {a.ctx + a.rows} slots, got {a.cap}")
    from conf.presets import model_preset

    try:
        model_preset(a.preset, "--preset")
    except ValueError as e:
        raise SystemExit(str(e)) from None
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("ncu_step: needs a CUDA GPU")
    run_step(a.preset, a.rows, a.ctx, a.cap, rope_attention_all=a.rope_attention_all)
    return 0


if __name__ == "__main__":
    sys.exit(main())
