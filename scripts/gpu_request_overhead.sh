#!/usr/bin/env bash
# Where a real-pair request's time goes besides its decode iterations (one device call, 1 GPU, ~3 min):
#   1. bench/prefill_probe.py: prefill host / wall / device time (KERNELS_PROBE: graph = kernels.prefill_graph,
#      triton = eager fused kernels, reference = torch), SmolLM2 and Llama shapes, 37..1024 tokens;
#   2. generate.py at the real pair's shapes (random bf16 weights, the instruction acceptance table as oracle),
#      5 requests of 38 prompt tokens, 128 new tokens, kernels=graphs, traces on: autoregressive, and chain /
#      serial_tree with the draft colocated (parallel=1x0: one GPU), each with kernels.prefill_graph in PREFILL
#      (default: true false; run dirs <mode>_pg<value>); EXTRA: more generate.py overrides (e.g.
#      trace.graph_events=true).
#   bash scripts/gpu_request_overhead.sh OUTDIR     -> OUTDIR/{prefill_probe_*.json, probe.log, runs.tar.gz}
set -uo pipefail
OUT=${1:?usage: scripts/gpu_request_overhead.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
PY=${PY:-python3}
WORK=$(mktemp -d)
PRESETS=${PRESETS:-smollm2-135m,smollm2-draft,llama3-8b,llama3.2-1b}
timeout 240 $PY bench/prefill_probe.py --presets "$PRESETS" --lengths "${LENGTHS:-37,128,512,1024}" \
  --kernels "${KERNELS_PROBE:-graph,triton,reference}" --out "$OUT" 2>&1 | tee "$OUT/probe.log"
for mode in ${MODES:-autoregressive serial_tree chain}; do
 for pg in ${PREFILL:-true false}; do
  timeout 150 $PY generate.py kernels.prefill_graph=$pg model=smollm2 model.target.checkpoint=null model.draft.checkpoint=null \
    model.tokenizer=null model.target.dtype=bfloat16 model.draft.dtype=bfloat16 spec=$mode parallel=1x0 \
    kernels="${KERNELS:-graphs}" spec.oracle=true acceptance=smollm2_instruction "workload.prompts=[]" \
    workload.num_requests=5 workload.prompt_tokens=38 workload.max_new_tokens="${NEW_TOKENS:-128}" \
    workload.max_seq_len_tokens=1024 trace.enabled=true ${EXTRA:-} run_name="${mode}_pg$pg" hydra.run.dir="$WORK/${mode}_pg$pg" \
    2>&1 | tail -1 | tee -a "$OUT/probe.log"
 done
done
tar czf "$OUT/runs.tar.gz" -C "$WORK" .
chmod -R a+rX "$OUT"
ls -la "$OUT"
