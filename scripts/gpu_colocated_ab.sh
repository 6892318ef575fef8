#!/usr/bin/env bash
# One device call (1 x H200, ~35 s per run): an A/B(/C...) of Hydra overrides on workload a with the draft colocated
# (parallel=1x0: chain and serial_tree on one GPU), interleaved round by round, every variant of a round on the same
# seed (the oracle's stream: paired acceptance), trace.graph_events on. Per run: tokens/s, iteration, accepted length
# and the medians of the verify and expansion spans with their device time and host marks (after the 5th of each).
#
#   SWIFTSPEC_GIT_SHA=<sha> bash scripts/gpu_colocated_ab.sh OUTDIR "kernels.draft_head=false" \
#       "kernels.draft_head=true"
# A variant is one or more space-separated overrides. AB_ROUNDS=2 rounds (round r uses workload.seed r - 1),
# AB_MODES="chain serial_tree", AB_NEW_TOKENS=512, AB_REQUESTS=2; AB_BASE replaces the model / kernels / prompt
# overrides (default: workload a's, prompts of 1,024 tokens; a CPU run: tests/bench/test_colocated_ab.py).
# OUTDIR gets ab.json (git SHA, device, date, config, per run and per variant), ab.log; the table last.
set -uo pipefail
# shellcheck source=scripts/ab_args.sh
source "$(dirname "$0")/ab_args.sh" "$@"  # OUT, VARIANTS, LABELS, WORK; cwd: the repository root
BASE=${AB_BASE:-"model=llama3-8b_llama3.2-1b kernels=graphs trace.graph_events=true workload.prompt_tokens=1024 \
workload.max_seq_len_tokens=2048"}
for r in $(seq 1 "${AB_ROUNDS:-2}"); do
  for mode in ${AB_MODES:-chain serial_tree}; do
    for i in "${!VARIANTS[@]}"; do
      run="${mode}__${LABELS[$i]}_$r"
      echo "=== $(date -u +%T) $run: ${VARIANTS[$i]}" | tee -a "$OUT/ab.log"
      # shellcheck disable=SC2086
      timeout 240 python3 generate.py $BASE spec=$mode spec.oracle=true acceptance=smollm2 \
        spec.oracle_belief=table workload.max_new_tokens="${AB_NEW_TOKENS:-512}" \
        workload.num_requests="${AB_REQUESTS:-2}" workload.seed=$((r - 1)) parallel=1x0 trace.chrome=false \
        ${VARIANTS[$i]} hydra.run.dir="$WORK/$run" >> "$OUT/ab.log" 2>&1 \
        || echo "    $run failed (exit $?): see ab.log" | tee -a "$OUT/ab.log"
    done
  done
done
python3 - "$OUT" "$WORK" "${VARIANTS[@]}" <<'PY' 2>&1 | tee -a "$OUT/ab.log"
import datetime, json, os, statistics, sys
from pathlib import Path
import torch
from conf.rundir import atomic_write_json
from conf.trace import read_traces, span_medians
out, work, variants = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
labels = "abcdef"[:len(variants)]
VERIFY = ("device_s", "gpu_inputs_s", "gpu_copies_s", "gpu_replay_s", "inputs_s", "copied_s", "launched_s",
          "decided_s")
EXPAND = ("device_s", "gpu_copies_s", "gpu_replay_s", "planned_s", "copied_s", "launched_s")

runs = {}
for run in sorted(work.iterdir()):
    metrics = run / "metrics.json"
    if not metrics.exists():
        print(f"{run.name}: no metrics.json (failed)"); continue
    m = json.loads(metrics.read_text())
    recs = list(read_traces(run / "traces.jsonl"))
    row = {"tokens_per_s": m["tokens_per_s"], "iteration_ms": m["iteration_time_s"] * 1e3,
           "mean_accept_len": m["mean_accept_len"],
           "verify": span_medians([r for r in recs if r.name == "step.verify"][5:], VERIFY, f"{run}: step.verify"),
           "expand": span_medians([r for r in recs if r.name == "step.expand"][5:], EXPAND, f"{run}: step.expand")}
    runs[run.name] = row
def mean(values):  # None when no run has the value (an autoregressive run has no expansions, a chained one no spans)
    vs = [v for v in values if v is not None]
    return statistics.mean(vs) if vs else None


per_variant = {}
for mode in sorted({k.split("__")[0] for k in runs}):
    for lab in labels:
        rs = [v for k, v in runs.items() if k.startswith(f"{mode}__{lab}_")]
        if rs:
            per_variant[f"{mode}__{lab}"] = {
                "rounds": len(rs), "tokens_per_s": mean(r["tokens_per_s"] for r in rs),
                "iteration_ms": mean(r["iteration_ms"] for r in rs),
                "verify_span_ms": mean(r["verify"]["span_ms"] for r in rs),
                "expand_span_ms": mean(r["expand"]["span_ms"] for r in rs)}
record = {"benchmark": "colocated_ab", "git_sha": os.environ.get("SWIFTSPEC_GIT_SHA", ""),
          "date": datetime.date.today().isoformat(),
          "device": (f"{torch.cuda.device_count()} x {torch.cuda.get_device_name()}" if torch.cuda.is_available()
                     else "cpu (no CUDA device)"),
          "config": {"workload": "a: llama3-8b_llama3.2-1b bf16 random weights, kernels=graphs, oracle smollm2 table",
                     "parallel": "1x0 (draft colocated)", "prompt_tokens": 1024,
                     "max_new_tokens": int(os.environ.get("AB_NEW_TOKENS", 512)),
                     "num_requests": int(os.environ.get("AB_REQUESTS", 2)),
                     "rounds": int(os.environ.get("AB_ROUNDS", 2)), "seed": "round r: workload.seed r - 1",
                     "spans": "medians after each run's 5th verify / expansion; ms; host marks after the span's start"},
          "overrides": dict(zip(labels, variants)), "runs": runs, "per_variant": per_variant}
atomic_write_json(out / "ab.json", record)
for lab, v in zip(labels, variants):
    print(f"{lab}: {v}")
print("| run | tok/s | accept | iteration | verify span | verify launched | verify decided | verify device | "
      "expand span | expand launched | expand device |")
print("|---" * 11 + "|")
f = lambda x: "-" if x is None else f"{x:.3f}"
for name, r in runs.items():
    v, e = r["verify"], r["expand"]
    print(f"| {name} | {r['tokens_per_s']:.1f} | {r['mean_accept_len']:.2f} | {r['iteration_ms']:.3f} | "
          f"{f(v['span_ms'])} | {f(v['launched_ms'])} | {f(v['decided_ms'])} | {f(v['device_ms'])} | "
          f"{f(e['span_ms'])} | {f(e['launched_ms'])} | {f(e['device_ms'])} |")
for k, v in per_variant.items():
    print(k, " ".join(f"{kk} {f(vv)}" for kk, vv in v.items()))
PY
chmod -R a+rX "$OUT"
