#!/usr/bin/env bash
# One device call (2 x H200, ~4-7 min): do draft expansions slow down while the target verifies, and is it the
# host's CPU threads or a code change? The validation configurations (the autoconfig pick first) run under each
# variant, then bench/expand_positions.py prints each run's refill vs overlapped expansion medians and
# bench/bench_host_path.py times the tree's host pieces on this host.
#
#   SWIFTSPEC_GIT_SHA=<sha> bash scripts/gpu_overlap_probe.sh OUTDIR
#   PROBE_VARIANTS="share default share_b" PROBE_BUDGET_S=45 PROBE_EVENTS=1 MULTI_GPU_TESTS=0 override the defaults.
# Variants (a trailing _<tag> repeats one, for an A-B-A order): default (parallel.host_threads auto: one intra-op
# thread per GPU rank, runtime/launch.py); omp1 (OMP_NUM_THREADS=1); share (OMP_NUM_THREADS = cores / 2, what
# each of the two ranks took before host_threads); events (trace.graph_events: each replayed expansion's device
# time in its span, which expand_positions.py reports per phase; PROBE_EVENTS=1 turns it on in every variant);
# base (the files under PROBE_BASE, a folder laid out as the repo, replace the working tree's for this variant
# and are put back after it: an A/B of a code change in one call). OUTDIR gets probe.tar.gz (per variant: run
# dirs, expand_positions.json, host_path.json), probe.log and, with MULTI_GPU_TESTS=1, multi_gpu_tests.log
# (the device returns at most 8 files).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_overlap_probe.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
LOG="$OUT/probe.log"
stage() { echo "=== $(date -u +%T) $1" | tee -a "$LOG"; }
WORK=$(mktemp -d)
overlay() {  # overlay DIR SAVE: copy DIR's files over the repo's, the replaced ones to SAVE
  (cd "$1" && find . -type f) | while read -r f; do
    mkdir -p "$2/$(dirname "$f")" && cp "$f" "$2/$f" && cp "$1/$f" "$f"
  done
}
for v in ${PROBE_VARIANTS:-share default share_b}; do
  extra=() ; saved=""
  [ "${PROBE_EVENTS:-0}" = 1 ] && extra=(--override trace.graph_events=true)
  case "${v%%_*}" in
    default) envs=() ;;
    omp1) envs=(OMP_NUM_THREADS=1) ;;
    share) envs=("OMP_NUM_THREADS=$(( $(nproc) / 2 ))") ;;
    events) envs=() ; extra=(--override trace.graph_events=true) ;;
    base) envs=()
      [ -d "${PROBE_BASE:-}" ] || { echo "gpu_overlap_probe: variant $v needs PROBE_BASE, a folder of files laid out as the repo (got '${PROBE_BASE:-}')" | tee -a "$LOG"; exit 2; }
      saved=$(mktemp -d); overlay "$PROBE_BASE" "$saved" ;;
    *) echo "gpu_overlap_probe: unknown variant $v (expected default, omp1, share, events or base[_tag])" | tee -a "$LOG"; exit 2 ;;
  esac
  stage "variant $v: ${envs[*]:-(no extra env)} ${extra[*]:-} ${saved:+(files of $PROBE_BASE)}"
  mkdir -p "$WORK/$v"
  timeout $(( ${PROBE_BUDGET_S:-60} + 60 )) env "${envs[@]}" python3 bench/validate.py run --out "$WORK/$v" \
    --budget-s "${PROBE_BUDGET_S:-60}" --no-tp2 --profile profiles/h200.json "${extra[@]}" >> "$LOG" 2>&1
  python3 bench/expand_positions.py "$WORK/$v/runtime" --json "$WORK/$v/expand_positions.json" 2>&1 | tee -a "$LOG"
  env "${envs[@]}" python3 bench/bench_host_path.py --reps 1000 --out "$WORK/$v" 2>&1 | grep draft | tee -a "$LOG"
  if [ -n "$saved" ]; then overlay "$saved" "$(mktemp -d)"; fi
done
tar czf "$OUT/probe.tar.gz" -C "$WORK" . 2>/dev/null
if [ "${MULTI_GPU_TESTS:-0}" = 1 ]; then
  stage "multi-GPU tests (random weights)"
  timeout "${TESTS_TIMEOUT_S:-200}" python3 -m pytest -q -m multi_gpu tests/gpu -k "not real" -p no:cacheprovider \
    --timeout=150 > "$OUT/multi_gpu_tests.log" 2>&1
  tail -2 "$OUT/multi_gpu_tests.log" | tee -a "$LOG"
fi
chmod -R a+rX "$OUT"
stage "done"
