#!/usr/bin/env bash
# Regenerate the small example run dirs under examples/runs/ by running the real simulator (python simulate.py).
#
# One folder per figure (a Hydra multirun sweep dir each). Kept small on purpose: one request of 64 new
# tokens, per-iteration traces only where a figure draws them (fig05), no Hydra .hydra/ folders or logs.
# Every run is simulated (metrics source "sim"); no measured (runtime) run is made here, so the parity
# and timeline figures say "no measured runs" until real runtime run dirs are passed to them
# (make figures MEASURED="runs/generate/*").
#
# Usage: bash analysis/make_examples.sh [OUT_DIR]        (default: examples/runs)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${1:-examples/runs}

# Small workload, no Chrome traces, no Hydra bookkeeping; readable sub-folder names.
COMMON=(workload=default workload.num_requests=1 workload.max_new_tokens=64 workload.prompt_tokens=128
        trace.chrome=false trace.enabled=false hydra.output_subdir=null hydra/job_logging=disabled
        hydra/hydra_logging=disabled)
RUN='${model.name}_${spec.mode}_${parallel.target_gpus}x${parallel.draft_gpus}_${interconnect.name}'
SUBDIR="${RUN}_s\${acceptance.scale}_\${kernels.preset}"
# fig01 / fig02 mix drafts: their folders name the acceptance preset (and, in a top1 sweep, the top1)
DRAFT_SUBDIR="${RUN}_\${hydra:runtime.choices.acceptance}_\${kernels.preset}"
TOP1_SUBDIR="${RUN}_\${hydra:runtime.choices.acceptance}-top1-\${acceptance.top1}_\${kernels.preset}"

sweep() {  # sweep NAME OVERRIDES...: one multirun into $OUT/NAME (appends to it); sub-folders named by $SUBDIR
  local name=$1
  shift
  "$PY" simulate.py --multirun "${COMMON[@]}" "hydra.sweep.subdir=$SUBDIR" "hydra.sweep.dir=$OUT/$name" "$@" >/dev/null
}

rm -rf "${OUT:?}"/fig0{1,2,3,5,6}_*
# fig01: throughput vs GPU split on 8 GPUs, async tree, three model pairs at the default table, and the first pair
# with an EAGLE-class draft (acceptance=strong).
SUBDIR=$DRAFT_SUBDIR sweep fig01_gpu_split spec=async_tree parallel=7x1,6x2,4x4 \
  model=llama3-70b_llama3.2-1b,llama3-70b_llama3.2-3b,qwen2-72b_qwen2-0.5b
SUBDIR=$DRAFT_SUBDIR sweep fig01_gpu_split spec=async_tree parallel.target_gpus=5 parallel.draft_gpus=3 \
  model=llama3-70b_llama3.2-1b,llama3-70b_llama3.2-3b,qwen2-72b_qwen2-0.5b
SUBDIR=$DRAFT_SUBDIR sweep fig01_gpu_split spec=async_tree parallel=7x1,6x2,4x4 acceptance=strong
SUBDIR=$DRAFT_SUBDIR sweep fig01_gpu_split spec=async_tree parallel.target_gpus=5 parallel.draft_gpus=3 acceptance=strong
# fig02: draft strength per mode (the acceptance family's presets around the default table, and a top1 sweep of the
# strong preset's shape), AR baseline on all 8 GPUs.
SUBDIR=$DRAFT_SUBDIR sweep fig02_acceptance spec=chain,serial_tree,async_tree acceptance=weak,default,paper_qwen2,strong
SUBDIR=$TOP1_SUBDIR sweep fig02_acceptance spec=chain,serial_tree,async_tree acceptance=strong acceptance.top1=0.8,0.95
SUBDIR=$DRAFT_SUBDIR sweep fig02_acceptance spec=autoregressive parallel=8x0
# fig03: interconnect scenarios, serial vs async tree. Inside one node the leaders talk over the Unix socket
# (parallel.leader_channel auto, as the runtime): the link changes the all-reduces; the cross-node scenario sends the
# leader messages over the cross-group link (leader_channel dist: the 6 + 2 ranks still fill node 0 first).
sweep fig03_interconnect spec=serial_tree,async_tree interconnect=nvlink,pcie5,pcie4
sweep fig03_interconnect spec=serial_tree,async_tree interconnect=cross_node_ib parallel.leader_channel=dist
# fig06 (and fig07): the ablation ladder; reference kernels except the last step.
sweep fig06_ablation kernels=reference spec=autoregressive parallel=8x0
sweep fig06_ablation kernels=reference spec=chain,serial_tree,async_tree
sweep fig06_ablation kernels=triton spec=async_tree
# fig05 (and fig04's simulated side): one traced async-tree run.
sweep fig05_timeline spec=async_tree trace.enabled=true

find "$OUT" \( -name '*.log' -o -name multirun.yaml \) -delete
du -sh "$OUT"
