#!/usr/bin/env bash
# One device call (2 x H200, ~4-7 min): do draft expansions slow down while the target verifies, and is it the
# host's CPU threads? The validation configurations (the autoconfig pick first) run under each environment
# variant, then bench/expand_positions.py prints each run's refill vs overlapped expansion medians.
#
#   SWIFTSPEC_GIT_SHA=<sha> bash scripts/gpu_overlap_probe.sh OUTDIR
#   PROBE_VARIANTS="share default share_b" PROBE_BUDGET_S=45 MULTI_GPU_TESTS=0 override the defaults.
# Variants (a trailing _<tag> repeats one, for an A-B-A order): default (parallel.host_threads auto: one intra-op
# thread per GPU rank, runtime/launch.py); omp1 (OMP_NUM_THREADS=1); share (OMP_NUM_THREADS = cores / 2, what
# each of the two ranks took before host_threads); events (trace.graph_events: each replayed expansion's device
# time in its span, which expand_positions.py reports per phase). OUTDIR gets probe_<variant>.tar.gz (run dirs),
# expand_positions_<variant>.json, probe.log and, with MULTI_GPU_TESTS=1, multi_gpu_tests.log.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_overlap_probe.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
LOG="$OUT/probe.log"
stage() { echo "=== $(date -u +%T) $1" | tee -a "$LOG"; }
WORK=$(mktemp -d)
for v in ${PROBE_VARIANTS:-share default share_b}; do
  extra=()
  case "${v%%_*}" in
    default) envs=() ;;
    omp1) envs=(OMP_NUM_THREADS=1) ;;
    share) envs=("OMP_NUM_THREADS=$(( $(nproc) / 2 ))") ;;
    events) envs=() ; extra=(--override trace.graph_events=true) ;;
    *) echo "gpu_overlap_probe: unknown variant $v (expected default, omp1, share or events[_tag])" | tee -a "$LOG"; exit 2 ;;
  esac
  stage "variant $v: ${envs[*]:-(no extra env)}"
  timeout $(( ${PROBE_BUDGET_S:-60} + 60 )) env "${envs[@]}" python3 bench/validate.py run --out "$WORK/$v" \
    --budget-s "${PROBE_BUDGET_S:-60}" --no-tp2 --profile profiles/h200.json "${extra[@]}" >> "$LOG" 2>&1
  python3 bench/expand_positions.py "$WORK/$v/runtime" --json "$OUT/expand_positions_$v.json" 2>&1 | tee -a "$LOG"
  tar czf "$OUT/probe_$v.tar.gz" -C "$WORK" "$v" 2>/dev/null
done
if [ "${MULTI_GPU_TESTS:-0}" = 1 ]; then
  stage "multi-GPU tests (random weights)"
  timeout "${TESTS_TIMEOUT_S:-200}" python3 -m pytest -q -m multi_gpu tests/gpu -k "not real" -p no:cacheprovider \
    --timeout=150 > "$OUT/multi_gpu_tests.log" 2>&1
  tail -2 "$OUT/multi_gpu_tests.log" | tee -a "$LOG"
fi
chmod -R a+rX "$OUT"
stage "done"
