#!/usr/bin/env bash
# One device call (1 or 2 x H200, ~6-9 min): the prepared step experiments side by side in CUDA-graph replays with
# per-kernel profiles, their figure, then the single-GPU tests. Results flat in OUTDIR (the device returns <= 8 files):
#   step_variants_experiments_<sha>.json   bench/bench_step_variants.py (copy into bench/results/)
#   fig08_experiments.png / .json          analysis/fig08_step_breakdown.py over it
#   experiments.log                        every stage's output; gpu_tests.log
#
#   SWIFTSPEC_GIT_SHA=<sha> bash scripts/gpu_experiments.sh "$OUT"
#   VARIANTS=... CASES=... ROUNDS=... PROFILE=... TESTS=0 override the defaults below.
# Variants: the runtime; the fused QKV + RoPE GEMM at 2 programs per head, released early, with its attention
# prefix_ready (qkvrope_pre_early+qkvrope_split2). (The other experiments of docs/LOG.md's ninth session are deleted.)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_experiments.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
SHA=${SWIFTSPEC_GIT_SHA:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
VARIANTS=${VARIANTS:-runtime,qkvrope_pre_early+qkvrope_split2}
CASES=${CASES:-llama3-8b:1:1,llama3-8b:8:8,llama3.2-1b:16:64,llama3.2-1b:1:1}
LOG="$OUT/experiments.log"
stage() { echo "=== $(date -u +%T) $1" | tee -a "$LOG"; }

stage "step variants: $VARIANTS on $CASES"
RES="$OUT/step_variants_experiments_$SHA.json"
timeout "${STEP_TIMEOUT_S:-420}" python3 bench/bench_step_variants.py --rounds "${ROUNDS:-12}" \
  --profile-kernels "${PROFILE:-5}" --variants "$VARIANTS" --cases "$CASES" --out "$RES" 2>&1 | grep -v USDT \
  | tee -a "$LOG" | grep -E "^\| |failed|FAILED|floor" | tail -14

if [ -f "$RES" ]; then
  stage "figure"
  python3 analysis/fig08_step_breakdown.py "$RES" --out "$OUT/fig08_experiments" >> "$LOG" 2>&1 \
    && rm -f "$OUT/fig08_experiments.pdf" || echo "figure failed (see experiments.log)"
fi

if [ "${TESTS:-1}" = 1 ]; then
  stage "single-GPU tests (the defaults)"
  timeout "${TESTS_TIMEOUT_S:-200}" python3 -m pytest -q -m "gpu and not multi_gpu" tests/gpu -k "not real" \
    -p no:cacheprovider --timeout=100 > "$OUT/gpu_tests.log" 2>&1
  tail -2 "$OUT/gpu_tests.log"
fi
chmod -R a+rX "$OUT"
stage "done"
