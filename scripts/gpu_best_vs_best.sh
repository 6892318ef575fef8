#!/usr/bin/env bash
# One device call (2 x H200, ~2 min): workload a's serial_tree at the simulator's best serial configuration
# (bs 16 w 4 d 1, bench/results/ratio_bounds_*.json) next to async_tree at its pick (bs 8 w 16 d 3) and the
# default serial (bs 8 w 8 d auto), so the async / serial ratio compares each mode at its best, measured.
#
#   bash scripts/gpu_best_vs_best.sh OUTDIR     -> OUTDIR/runtime_shape_realistic_<date>_<name>.json, BENCHMARKS_RUNTIME.md
set -uo pipefail
OUT=${1:?usage: scripts/gpu_best_vs_best.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
cp docs/BENCHMARKS_RUNTIME.md "$OUT/BENCHMARKS_RUNTIME.md"
run() {  # NAME MODE BS W D BUDGET_S
  echo "=== $(date -u +%T) $2 bs $3 w $4 d $5"
  timeout $(($6 + 60)) python3 bench/bench_runtime.py preset=shape_realistic "modes=[$2]" 'presets.shape_realistic.peers=[]' \
    "presets.shape_realistic.experiment_overrides=[\"acceptance=smollm2\",\"spec.oracle_belief=table\",\"spec.bs=$3\",\"spec.w=$4\",\"spec.d=$5\"]" \
    budget_s="$6" warmup_new_tokens=512 out_dir="/tmp/bvb_$1" doc="$OUT/BENCHMARKS_RUNTIME.md" hydra.run.dir="/tmp/bvb_hydra_$1" 2>&1 \
    | grep -E "^\[bench\] swiftspec (serial|async)_tree: tokens/s|^\| swiftspec" | tail -3
  for f in /tmp/bvb_"$1"/*.json; do [ -f "$f" ] && cp "$f" "$OUT/$(basename "${f%.json}")_$1.json"; done
}
run serial_best serial_tree 16 4 1 45
run serial_default serial_tree 8 8 auto 45
run async_pick async_tree 8 16 3 45
echo "=== $(date -u +%T) done"
