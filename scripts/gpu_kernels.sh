#!/usr/bin/env bash
# One device call: the decode step's kernel variants (bench/bench_step_variants.py: base, PDL, skinny GEMMs, both)
# side by side in CUDA graphs, after the GPU tests. Results flat in OUTDIR:
#   step_variants_<date>.json, kernels_session.tar.gz (logs), attention_splits_gpu_<date>.json (ATTENTION=1)
#   bash scripts/gpu_kernels.sh "$OUT"            (GPU_TESTS=0 skips the tests; GPU_TEST_K="rope or ..." selects some;
#                                                  ATTENTION=1 also sweeps the tree attention's tiles;
#                                                  VARIANT_ARGS="--variants a,b" picks the step variants)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_kernels.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
WORK=$(mktemp -d)
mkdir -p "$WORK/logs"
pack() { tar czf "$OUT/kernels_session.tar.gz" -C "$WORK" logs; }
if [ "${GPU_TESTS:-1}" = 1 ]; then
  echo "=== $(date -u +%T) GPU tests"
  select=(); [ -n "${GPU_TEST_K:-}" ] && select=(-k "$GPU_TEST_K")
  timeout 240 python3 -m pytest -q -m "gpu or multi_gpu" tests/gpu ${select[@]+"${select[@]}"} -p no:cacheprovider \
    --timeout=120 2>&1 \
    | tee "$WORK/logs/tests.log" | tail -12
  pack
fi
if [ "${ATTENTION:-0}" = 1 ]; then
  echo "=== $(date -u +%T) tree attention tiles"
  timeout 240 python3 bench/bench_attention_splits.py --device cuda --out "$OUT" 2>&1 | tee "$WORK/logs/attention.log" \
    | grep -E "llama3-8b \| (1|8) \| 1024|llama3.2-1b \| 16 \| 1024|json"
  pack
fi
echo "=== $(date -u +%T) step variants"
timeout "${VARIANTS_TIMEOUT_S:-300}" python3 bench/bench_step_variants.py ${VARIANT_ARGS:-} \
  --out "$OUT/step_variants_$(date -u +%F).json" 2>&1 | grep -v USDT | tee "$WORK/logs/variants.log" | tail -30
pack
chmod -R a+rX "$OUT"
echo "=== $(date -u +%T) done"
