#!/usr/bin/env bash
# One device call (2 x H200, ~3 min): where the eager runtime's host time goes, and a GPU smoke of train_draft.
#
#   bash scripts/gpu_probe.sh "$OUT"
#
# 1. bench/profile_step.py: one Llama-3-8B verify forward (bs 8, ctx 1024) and one Llama-3.2-1B expand
#    forward, bf16, Triton and reference attention: wall vs device time, launches, top host ops.
# 2. An async_tree engine run (Llama-3-8B + 1B shapes, oracle acceptance) with every rank under cProfile
#    (SWIFTSPEC_CPROFILE): the engine's own host time per function.
# 3. train_draft.py with a random-weight 135M teacher for 40 s: GPU throughput (tokens/s) of distillation.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_probe.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
if ! python3 -c "import hydra, omegaconf, gguf, simpy" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD
stage() { echo "=== $(date -u +%T) $1"; }

stage "profile_step"
for args in "--preset llama3-8b --backend triton --rows 8 --ctx 1024" \
            "--preset llama3-8b --backend reference --rows 8 --ctx 1024" \
            "--preset llama3-8b --backend triton --rows 1 --ctx 1024" \
            "--preset llama3.2-1b --backend triton --rows 8 --ctx 1024"; do
  # shellcheck disable=SC2086
  timeout 120 python3 bench/profile_step.py $args --out "$OUT/profile_step" 2>&1 | tail -22
done

stage "engine under cProfile"
SWIFTSPEC_CPROFILE="$OUT/cprofile" timeout 150 python3 generate.py workload=default model=llama3-8b_llama3.2-1b kernels=triton \
  spec=async_tree spec.oracle=true workload.prompt_tokens=1024 workload.max_new_tokens=128 \
  workload.num_requests=1 workload.max_seq_len_tokens=2048 parallel=1x1 trace.chrome=false \
  hydra.run.dir=/tmp/probe_run 2>&1 | tail -3
for f in "$OUT"/cprofile/rank*.txt; do echo "--- $f"; sed -n 1,45p "$f"; done
rm -f "$OUT"/cprofile/*.prof

stage "train_draft smoke (random 135M teacher, 40 s)"
timeout 200 python3 train_draft.py teacher=random:smollm2-135m max_train_s=40 generate_max_s=15 \
  generate_samples=512 out_dir=/tmp/td export_dir=/tmp/td/export 2>&1 \
  | grep -v -E "Writing model shards|Loading weights" | tail -30
cp /tmp/td/summary.json "$OUT/train_smoke_summary.json" 2>/dev/null || true
stage "done"
