#!/usr/bin/env bash
# One device call per part (2 x H200, ~6-8 min each), results flat in OUTDIR (the device returns <= 8 files):
#
#   bash scripts/gpu_session.sh "$OUT" check   GPU tests, per-kernel step profile (8B rows 1 and 8), skinny-GEMM
#                                              sweep vs cuBLAS, async engine under cProfile
#   bash scripts/gpu_session.sh "$OUT" bench   workload a (shape-realistic): autoregressive, chain, serial_tree,
#                                              async_tree (bs 8 w 8 d auto), the peers (transformers, DeepSpeed),
#                                              the simulator's pick (bs 8 w 16 d 3) and bs 8 w 16 d 2 (draft hidden)
#                                              (BENCH_PEERS=0: without the peers; BENCH_TESTS=1: GPU tests first;
#                                              BENCH_BUDGET_S: the four modes' budget, default 270 s;
#                                              BENCH_ASYNC="pick:16:3 w24:24:3": the async runs NAME:W:D after
#                                              them, ASYNC_BUDGET_S each, default 90 s; ASYNC_EXTRA="a=b c=d":
#                                              more experiment overrides of those runs, e.g.
#                                              ASYNC_EXTRA=model.draft.weight_bits=8 for the fp8 draft)
#
# Files: session_<part>.tar.gz (logs, profile_step json, cprofile text), skinny_<date>.json,
# runtime_shape_realistic_<date>.json, runtime_shape_realistic_<date>{_pick,_hidden}.json, BENCHMARKS_RUNTIME.md (the doc
# with the new dated sections appended: copy it over docs/).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_session.sh OUTDIR check|bench}
PART=${2:?part: check or bench}
case "$PART" in check|bench) ;; *) echo "part must be check or bench, got $PART"; exit 2 ;; esac
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
WORK=$(mktemp -d)
mkdir -p "$WORK/logs" "$WORK/profile_step" "$WORK/cprofile" "$WORK/results"
pack() {  # before every stage and at the end: a call killed at its limit still returns what finished
  cp "$WORK"/results/*.json "$OUT"/ 2>/dev/null
  tar czf "$OUT/session_$PART.tar.gz" -C "$WORK" logs profile_step cprofile
}
stage() { pack; echo "=== $(date -u +%T) $1"; }

if [ "$PART" = check ]; then
stage "GPU tests (gpu, multi_gpu markers)"
timeout 240 python3 -m pytest -q -x -m "gpu or multi_gpu" tests/gpu -p no:cacheprovider --timeout=120 2>&1 \
  | tee "$WORK/logs/tests.log" | tail -15

stage "skinny GEMM sweep vs cuBLAS (Llama-3-8B and 3.2-1B decode projections)"
timeout 150 python3 bench/bench_skinny.py --out "$WORK/results/skinny_$(date -u +%F).json" 2>&1 | grep -v USDT \
  | tee "$WORK/logs/skinny.log" | tail -40

stage "per-step time vs byte floor (fused kernels, CUDA graph)"
for args in "--preset llama3-8b --rows 8" "--preset llama3-8b --rows 1"; do
  # shellcheck disable=SC2086
  timeout 100 python3 bench/profile_step.py $args --ctx 1024 --backend triton --fused --graph \
    --out "$WORK/profile_step" 2>&1 | grep -v USDT | head -30
done 2>&1 | tee "$WORK/logs/profile_step.log"
rm -f "$WORK"/profile_step/*.trace.json

stage "async engine (graphs, unix channel) under cProfile: host time per function"
SWIFTSPEC_CPROFILE="$WORK/cprofile" timeout 120 python3 generate.py workload=default model=llama3-8b_llama3.2-1b \
  kernels=graphs spec=async_tree spec.oracle=true acceptance=smollm2 spec.oracle_belief=table spec.w=16 spec.d=3 \
  workload.prompt_tokens=1024 workload.max_new_tokens=256 workload.num_requests=1 workload.max_seq_len_tokens=2048 \
  parallel=1x1 trace.chrome=false hydra.run.dir="$WORK/cprofile/run" 2>&1 | grep -v -E "USDT|Loading weights" \
  | tail -4 | tee "$WORK/logs/cprofile.log"
rm -f "$WORK"/cprofile/*.prof "$WORK"/cprofile/run/*.jsonl
for f in "$WORK"/cprofile/rank*.txt; do echo "--- $f"; sed -n 1,28p "$f"; done 2>&1 | cut -c1-150 | head -64
fi

if [ "$PART" = bench ]; then
if [ "${BENCH_TESTS:-0}" = 1 ]; then  # the GPU tests first (random weights; ~200 s)
  stage "GPU tests (gpu, multi_gpu markers)"
  timeout 260 python3 -m pytest -q -x -m "gpu or multi_gpu" tests/gpu -p no:cacheprovider --timeout=120 2>&1 \
    | tee "$WORK/logs/tests.log" | tail -6
fi
stage "runtime benchmark, workload a (shape-realistic), four modes"
cp docs/BENCHMARKS_RUNTIME.md "$OUT/BENCHMARKS_RUNTIME.md"
PEERS=()
[ "${BENCH_PEERS:-1}" = 1 ] || PEERS=('presets.shape_realistic.peers=[]')
BUDGET=${BENCH_BUDGET_S:-270}
timeout $((BUDGET + 60)) python3 bench/bench_runtime.py preset=shape_realistic "${PEERS[@]}" \
  budget_s="$BUDGET" out_dir="$WORK/results" doc="$OUT/BENCHMARKS_RUNTIME.md" hydra.run.dir=/tmp/bench_a 2>&1 \
  | grep -v -E "USDT|Loading weights" | tee "$WORK/logs/bench.log" | tail -24
async_run() {  # NAME W D TIMEOUT_S BUDGET_S "WHAT": async_tree at bs 8 w W d D -> runtime_shape_realistic_<date>_NAME.json
  stage "workload a, async_tree bs 8 w $2 d $3: $6 ${ASYNC_EXTRA:-}"
  mkdir -p "$WORK/$1"
  local extra="" o
  for o in ${ASYNC_EXTRA:-}; do extra="$extra,\"$o\""; done
  timeout "$4" python3 bench/bench_runtime.py preset=shape_realistic 'modes=[async_tree]' \
    'presets.shape_realistic.peers=[]' \
    "presets.shape_realistic.experiment_overrides=[\"acceptance=smollm2\",\"spec.oracle_belief=table\",\"spec.bs=8\",\"spec.w=$2\",\"spec.d=$3\"$extra]" \
    budget_s="$5" warmup_new_tokens=512 out_dir="$WORK/$1" doc="$OUT/BENCHMARKS_RUNTIME.md" hydra.run.dir="/tmp/bench_$1" 2>&1 \
    | grep -v -E "USDT|Loading weights" | tee "$WORK/logs/bench_$1.log" | tail -8
  for f in "$WORK/$1"/*.json; do [ -f "$f" ] && cp "$f" "$OUT/$(basename "${f%.json}")_$1.json"; done
}
# BENCH_ASYNC: the async_tree runs after the four modes, "NAME:W:D ..." (budget ASYNC_BUDGET_S each, default 90 s)
AB=${ASYNC_BUDGET_S:-90}
for spec in ${BENCH_ASYNC:-pick:16:3 hidden:16:2}; do
  IFS=: read -r name w d <<< "$spec"
  case "$name" in pick) what="the simulator's pick" ;; hidden) what="the draft hidden (two expansions fit in one verify)" ;;
    *) what="w $w d $d" ;; esac
  async_run "$name" "$w" "$d" $((AB + 50)) "$AB" "$what"
done
fi
pack
chmod -R a+rX "$OUT"
ls -la "$OUT"
echo "=== $(date -u +%T) done"
