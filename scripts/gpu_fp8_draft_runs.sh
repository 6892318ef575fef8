#!/usr/bin/env bash
# The fp8 draft end to end on one GPU (one device call, ~4 min): the 8B / 1B colocated chain and serial_tree runs of
# scripts/gpu_colocated_runs.sh, the bf16 draft against the draft with fp8 weights (model.draft.weight_bits=8) in
# bf16 (fp8) and in fp16 (fp8_fp16). VARIANTS: which of bf16 fp8 fp8_fp16 to run (all three by default).
#   bash scripts/gpu_fp8_draft_runs.sh OUTDIR   -> OUTDIR/{runs.log, runs.tar.gz} (run dirs large_<mode>_<variant>)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_fp8_draft_runs.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
WORK=$(mktemp -d)
for v in ${VARIANTS:-bf16 fp8 fp8_fp16}; do
  case $v in
    bf16) D="model.draft.dtype=bfloat16" ;;
    fp8) D="model.draft.dtype=bfloat16 model.draft.weight_bits=8" ;;
    fp8_fp16) D="model.draft.dtype=float16 model.draft.weight_bits=8" ;;
    *) echo "gpu_fp8_draft_runs: unknown variant $v (bf16, fp8, fp8_fp16)" >&2; exit 2 ;;
  esac
  for mode in chain serial_tree; do
    if [ $mode = chain ]; then S="spec=chain spec.gamma=4"; else S="spec=serial_tree spec.bs=8 spec.w=8 spec.d=auto"; fi
    timeout 240 python3 generate.py model=llama3-8b_llama3.2-1b model.target.dtype=bfloat16 $D $S parallel=1x0 \
      kernels=graphs kernels.fused_allreduce=false spec.oracle=true spec.oracle_belief=table "workload.prompts=[]" \
      workload.num_requests=2 workload.prompt_tokens=512 workload.max_new_tokens=256 workload.max_seq_len_tokens=1024 \
      trace.enabled=true trace.chrome=false run_name=large_${mode}_$v hydra.run.dir=$WORK/large_${mode}_$v 2>&1 | tail -1 | tee -a $OUT/runs.log
  done
done
tar czf $OUT/runs.tar.gz -C $WORK .
