#!/usr/bin/env bash
# Traced runs of the colocated one-GPU loop (the draft in the target's process, parallel=1x0), for checking the
# profile's `colocated_*` host costs on runs they were not fitted on (one device call, 1 GPU, ~4-6 min):
#   1. the real pair's shapes (SmolLM2-135M + the draft's shape, random bf16 weights, the instruction acceptance
#      table as oracle), 5 requests of 38 prompt + 128 new tokens: autoregressive, chain (gamma 4), serial_tree
#      (bs 8 w 8 d auto), as scripts/gpu_request_overhead.sh runs them (kernels=graphs, prefill graphs on);
#   2. the validation pair's shapes (Llama-3-8B + Llama-3.2-1B, random bf16 weights, the default acceptance table
#      as oracle, the draft growing by the table's belief), 2 requests of 512 prompt + 256 new tokens: chain (gamma
#      4) and serial_tree (bs 8 w 8 d auto), both models on the one GPU.
#   bash scripts/gpu_colocated_runs.sh OUTDIR      -> OUTDIR/{runs.log, runs.tar.gz}  (run dirs <pair>_<mode>)
# MODES_SMALL / MODES_LARGE: the modes of each part (space-separated; empty skips the part). EXTRA: more
# generate.py overrides for every run (e.g. trace.graph_events=true: each span's device time; later ones win, e.g.
# model.draft.dtype=float16); TAG: a suffix of the run dir names. The fp8 draft against the bf16 one (2026-12-02):
#   for v in bf16: fp8:model.draft.weight_bits=8 "fp8_fp16:model.draft.weight_bits=8 model.draft.dtype=float16"; do
#     MODES_SMALL= EXTRA="${v#*:}" TAG="_${v%%:*}" bash scripts/gpu_colocated_runs.sh "$OUT/${v%%:*}"; done
set -uo pipefail
OUT=${1:?usage: scripts/gpu_colocated_runs.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
PY=${PY:-python3}
WORK=$(mktemp -d)
spec_of() {  # the spec overrides of a mode
  case "$1" in
    chain) echo "spec=chain spec.gamma=4" ;;
    serial_tree) echo "spec=serial_tree spec.bs=8 spec.w=8 spec.d=auto" ;;
    *) echo "spec=$1" ;;
  esac
}
for mode in ${MODES_SMALL-autoregressive chain serial_tree}; do
  # shellcheck disable=SC2046
  timeout 150 $PY generate.py model=smollm2 model.target.checkpoint=null model.draft.checkpoint=null \
    model.tokenizer=null model.target.dtype=bfloat16 model.draft.dtype=bfloat16 $(spec_of "$mode") parallel=1x0 \
    kernels=graphs spec.oracle=true acceptance=smollm2_instruction "workload.prompts=[]" \
    workload.num_requests=5 workload.prompt_tokens=38 workload.max_new_tokens=128 \
    workload.max_seq_len_tokens=1024 trace.enabled=true trace.chrome=false ${EXTRA:-} run_name="small_$mode${TAG:-}" \
    hydra.run.dir="$WORK/small_$mode${TAG:-}" 2>&1 | tail -1 | tee -a "$OUT/runs.log"
done
for mode in ${MODES_LARGE-chain serial_tree}; do
  # shellcheck disable=SC2046
  timeout 240 $PY generate.py model=llama3-8b_llama3.2-1b model.target.dtype=bfloat16 model.draft.dtype=bfloat16 \
    $(spec_of "$mode") parallel=1x0 kernels=graphs kernels.fused_allreduce=false spec.oracle=true \
    spec.oracle_belief=table "workload.prompts=[]" workload.num_requests=2 workload.prompt_tokens=512 \
    workload.max_new_tokens=256 workload.max_seq_len_tokens=1024 trace.enabled=true trace.chrome=false ${EXTRA:-} \
    run_name="large_$mode${TAG:-}" hydra.run.dir="$WORK/large_$mode${TAG:-}" 2>&1 | tail -1 | tee -a "$OUT/runs.log"
done
tar czf "$OUT/runs.tar.gz" -C "$WORK" .
chmod -R a+rX "$OUT"
ls -la "$OUT"
