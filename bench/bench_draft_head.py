"""Device time of the draft expansion's head: the top-k children's log-probs from a step's fp32 logits (GPU).

    python bench/bench_draft_head.py [--vocab 128256] [--topk 8] [--rows 1,8,16,17] [--out bench/results]

The expansion graph (runtime/draft_worker.py `_top_children`) ends with `topk(log_softmax(logits), k)` over
[w, vocab] fp32 logits (w + 1 rows with a pending token; Llama-3.2-1B: vocab 128,256, 0.5 MB a row). Its floor
is one read of the logits (w x vocab x 4 bytes over 4.29 TB/s: 1.9 us at w 16); the expansion's device time is
~0.1-0.2 ms above the 1B step's replay (docs/BENCHMARKS_RUNTIME.md, eleventh session), which this separates.
Providers, each captured in a CUDA graph (triton.testing.do_bench_cudagraph, median):

    runtime          topk(log_softmax(logits), k): what the graph runs
    log_softmax      the log-softmax alone
    topk             the top-k over the raw logits alone (the same ids: log-softmax is monotonic)
    topk+logsumexp   top-k of the raw logits, minus the row's logsumexp (ids as runtime's; values within fp32
                     rounding)
    triton           kernels.topk_logprobs (`kernels.draft_head`): per-segment top-k and sums, then a merge per row

Logits are seeded normal draws x 3 (never zeros). Writes `<out>/draft_head_<date>.json` (git SHA, device, date,
config, rows in us) and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from bench.kernel_bench_common import ERRORS, HBM_PEAK_GBS, ROWS, max_err, run_providers  # noqa: E402
from conf.rundir import atomic_write_json, git_sha  # noqa: E402


def _providers(logits: torch.Tensor, k: int) -> dict:
    def runtime():
        return torch.topk(torch.log_softmax(logits, dim=-1), k, dim=-1)

    def lse():
        top = torch.topk(logits, k, dim=-1)
        return top.values - torch.logsumexp(logits, dim=-1, keepdim=True), top.indices

    from kernels.topk_logprobs import topk_logprobs

    return {"runtime": (runtime, True), "log_softmax": (lambda: torch.log_softmax(logits, dim=-1), True),
            "topk": (lambda: torch.topk(logits, k, dim=-1), True), "topk+logsumexp": (lse, True),
            "triton": (lambda: topk_logprobs(logits, k), True)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=128256, help="vocabulary (Llama-3.2-1B: 128256)")
    ap.add_argument("--topk", type=int, default=8, help="children per expanded node (spec.topk)")
    ap.add_argument("--rows", default="1,8,16,17", help="comma-separated row counts (w, or w + 1 with a pending row)")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results", help="results folder")
    args = ap.parse_args(argv)
    try:
        rows = [int(r) for r in args.rows.split(",")]
    except ValueError:
        raise SystemExit(f"--rows: expected comma-separated integers, got {args.rows!r}") from None
    if not torch.cuda.is_available():
        raise SystemExit("bench_draft_head: needs a CUDA GPU (it times CUDA graphs)")
    gen = torch.Generator(device="cuda").manual_seed(0)
    checks = []
    for w in rows:
        logits = torch.randn(w, args.vocab, device="cuda", generator=gen) * 3
        ref = torch.topk(torch.log_softmax(logits, dim=-1), args.topk, dim=-1)
        for name in ("topk+logsumexp", "triton"):
            vals, ids = _providers(logits, args.topk)[name][0]()
            checks.append({"rows": w, "provider": name, "ids_equal": bool(torch.equal(ids, ref.indices)),
                           "max_abs_err": max_err(vals, ref.values)})
        run_providers("draft_head", f"rows {w}", _providers(logits, args.topk), nbytes=w * args.vocab * 4)
    record = {"benchmark": "draft_head", "git_sha": git_sha(), "date": datetime.date.today().isoformat(),
              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "config": {"vocab": args.vocab, "topk": args.topk, "rows": rows, "timing": "do_bench_cudagraph median",
                         "floor": f"rows x vocab x 4 B over {HBM_PEAK_GBS} GB/s"},
              "rows": ROWS, "errors": ERRORS, "checks": checks}
    path = args.out / f"draft_head_{record['date']}.json"
    atomic_write_json(path, record)
    print("| rows | provider | us | % of HBM peak |\n|---|---|---|---|")
    for r in ROWS:
        print(f"| {r['shape'].split()[-1]} | {r['provider']} | {r['us']:.1f} | {r['pct_peak']:.1f} |")
    print("checks:", checks, f"\n-> {path}")
    return record


if __name__ == "__main__":
    main()
