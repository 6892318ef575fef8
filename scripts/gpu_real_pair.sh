#!/usr/bin/env bash
# One device call (2 x H200, < 10 min): distil the draft (scripts/gpu_train_draft.sh), then the real-pair
# benchmark against transformers (plain + assisted) and DeepSpeed, then the GPU tests on the real weights.
#
#   bash scripts/gpu_real_pair.sh "$OUT"        (TRAIN_S, BENCH_BUDGET_S override the budgets)
#   SKIP_TRAIN=1 BENCH_BUDGET_S=400 bash scripts/gpu_real_pair.sh "$OUT"   (the shipped draft; peers get time)
#
# Needs the GGUF at .cache/models/ (or its parts, staged by earlier calls of the same warm machine:
# see scripts/gpu_train_draft.sh). $OUT gets: train/ (results.tar.part-*, smollm2.json, summary.json, logs),
# runtime_real_pair_<date>.json, BENCH_real_pair.md (the new section for docs/BENCHMARKS_RUNTIME.md),
# tests_real.log.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_real_pair.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export TRITON_INTERPRET=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
stage() { echo "=== $(date -u +%T) $1"; }

if [ "${SKIP_TRAIN:-0}" = 1 ]; then  # benchmark the shipped draft: only the GGUF and the wheels are needed
  if ! python3 -c "import hydra, omegaconf, gguf" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  fi
  bash scripts/assemble_gguf.sh || exit 2
else
  stage "train the draft + acceptance report"
  timeout 450 bash scripts/gpu_train_draft.sh "$OUT/train" max_train_s="${TRAIN_S:-180}" 2>&1 | grep -v "^step" | tail -25
fi
export PYTHONPATH=/tmp/site:$PWD

stage "real-pair benchmark"
# bench_runtime checks its budget between phases and items, so a peer item started just before the deadline runs
# to its end (transformers' greedy or assisted pass over the prompts: ~40-90 s on the H200). The 2026-12-01 call
# with 30 s of slack killed transformers mid-run; 120 s lets it finish, and the next item is skipped by the budget.
timeout $((${BENCH_BUDGET_S:-120} + 120)) python3 bench/bench_runtime.py preset=real_pair budget_s="${BENCH_BUDGET_S:-120}" \
  out_dir="$OUT" doc="$OUT/BENCH_real_pair.md" hydra.run.dir=/tmp/bench_real 2>&1 \
  | grep -v -E "USDT|Loading weights" | tail -14

stage "GPU tests on the real weights"
timeout 240 python3 -m pytest -q -m "gpu or multi_gpu" tests/gpu -k real -p no:cacheprovider --timeout=120 \
  > "$OUT/tests_real.log" 2>&1
tail -3 "$OUT/tests_real.log"
stage "done"
