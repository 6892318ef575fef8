#!/usr/bin/env bash
# GPU tests of the CUDA-graph fast path, per-step times against the byte floor, the tree attention's split
# sweep, leader-channel round trips, the async engine under cProfile, and the runtime benchmark (workload a,
# shape-realistic) against transformers and DeepSpeed, plus its trees over the unix leader channel.
# All of it exceeds one 10-minute device call: run the two parts in two calls (~5 min each).
#
#   bash scripts/gpu_fastpath.sh "$OUT" probe    tests, profile_step, attention splits, channel, cProfile
#   bash scripts/gpu_fastpath.sh "$OUT" bench    workload a (leader channel auto: unix) + serial/async trees over dist
#   bash scripts/gpu_fastpath.sh "$OUT" [all]    both (BENCH_BUDGET_S bounds the benchmark, default 240)
#
# $OUT gets (flat: the device tool returns at most 8 files): fastpath_<part>.tar.gz (logs/{tests,profile_step,
# cprofile,bench}.log, profile_step/*.json with per-kernel device times, cprofile/rank*.txt: the async engine's
# host time per function in graph mode), runtime_shape_realistic_<date>.json (+ _dist: serial and async trees
# over parallel.leader_channel=dist), channel_gpu_<date>.json (leader round trips, dist vs unix),
# attention_splits_gpu_<date>.json (tree attention vs min_blocks_per_split),
# BENCHMARKS_RUNTIME.md (docs/ with the new dated section appended): copy them over the checkout.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_fastpath.sh OUTDIR [probe|bench|all]}
PART=${2:-all}
case "$PART" in probe|bench|all) ;; *) echo "part must be probe, bench or all, got $PART"; exit 2 ;; esac
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
WORK=$(mktemp -d)
mkdir -p "$WORK/logs" "$WORK/profile_step" "$WORK/results"
stage() { flush_out; echo "=== $(date -u +%T) $1"; }
flush_out() {  # before every stage and at the end: a call killed at its time limit still returns what finished
  mkdir -p "$WORK/cprofile" "$WORK/results_dist"
  for f in "$WORK"/results_dist/*.json; do [ -f "$f" ] && cp "$f" "$OUT/$(basename "${f%.json}")_dist.json"; done
  cp "$WORK"/results/*.json "$OUT"/ 2>/dev/null
  tar czf "$OUT/fastpath_$PART.tar.gz" -C "$WORK" logs profile_step cprofile
}

if [ "$PART" != bench ]; then
stage "GPU tests (gpu, multi_gpu markers)"
timeout 270 python3 -m pytest -q -m "gpu or multi_gpu" tests/gpu -p no:cacheprovider --timeout=120 2>&1 \
  | tee "$WORK/logs/tests.log" | tail -25

stage "per-step time vs byte floor (fused kernels, CUDA graph)"
for args in "--preset llama3-8b --rows 8" "--preset llama3-8b --rows 1" "--preset llama3.2-1b --rows 8"; do
  # shellcheck disable=SC2086
  timeout 120 python3 bench/profile_step.py $args --ctx 1024 --backend triton --fused --graph \
    --out "$WORK/profile_step" 2>&1 | grep -v USDT | head -30
done 2>&1 | tee "$WORK/logs/profile_step.log"
rm -f "$WORK"/profile_step/*.trace.json

stage "async engine (graphs) under cProfile: host time per function"
SWIFTSPEC_CPROFILE="$WORK/cprofile" timeout 150 python3 generate.py workload=default model=llama3-8b_llama3.2-1b \
  kernels=graphs spec=async_tree spec.oracle=true acceptance=smollm2 workload.prompt_tokens=1024 \
  workload.max_new_tokens=256 workload.num_requests=1 workload.max_seq_len_tokens=2048 parallel=1x1 \
  trace.chrome=false hydra.run.dir=/tmp/cprof_run 2>&1 | grep -v -E "USDT|Loading weights" | tail -4 \
  | tee "$WORK/logs/cprofile.log"
rm -f "$WORK"/cprofile/*.prof
for f in "$WORK"/cprofile/rank*.txt; do echo "--- $f"; sed -n 1,30p "$f"; done 2>&1 | cut -c1-150 | head -70

stage "tree attention: min blocks per split (graph-sized splits, prefix in a device tensor)"
timeout 120 python3 bench/bench_attention_splits.py --device cuda --out "$WORK/results" 2>&1 | grep -v USDT \
  | tee "$WORK/logs/attention_splits.log" | tail -24

stage "leader channel round trips: dist (NCCL) vs unix socket"
timeout 90 python3 bench/bench_channel.py --device cuda --out "$WORK/results" 2>&1 | grep -v USDT | tail -8 \
  | tee "$WORK/logs/channel.log"
fi

if [ "$PART" != probe ]; then
stage "runtime benchmark, workload a (shape-realistic)"
cp docs/BENCHMARKS_RUNTIME.md "$OUT/BENCHMARKS_RUNTIME.md"
timeout $((${BENCH_BUDGET_S:-240} + 60)) python3 bench/bench_runtime.py preset=shape_realistic \
  budget_s="${BENCH_BUDGET_S:-240}" out_dir="$WORK/results" doc="$OUT/BENCHMARKS_RUNTIME.md" \
  hydra.run.dir=/tmp/bench_a 2>&1 | grep -v -E "USDT|Loading weights" | tee "$WORK/logs/bench.log" | tail -40
stage "workload a again, serial + async trees over parallel.leader_channel=dist (the default auto picks unix)"
timeout 200 python3 bench/bench_runtime.py preset=shape_realistic 'modes=[serial_tree,async_tree]' \
  'presets.shape_realistic.peers=[]' \
  'presets.shape_realistic.experiment_overrides=["acceptance=smollm2","spec.oracle_belief=table","parallel.leader_channel=dist"]' \
  budget_s=150 out_dir="$WORK/results_dist" doc="$WORK/logs/bench_dist.md" hydra.run.dir=/tmp/bench_dist 2>&1 \
  | grep -v -E "USDT|Loading weights" | tee "$WORK/logs/bench_dist.log" | tail -12
fi
flush_out
ls -la "$OUT"
echo "=== $(date -u +%T) done"
