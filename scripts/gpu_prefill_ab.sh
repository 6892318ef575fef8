#!/usr/bin/env bash
# kernels.prefill_graph A/B at the real pair's shapes on one GPU (bench_runtime preset real_pair_shapes, the draft
# colocated: parallel=1x0), interleaved off / on ROUNDS times; every results JSON into OUTDIR/ab.tar.gz and their
# summary (bench/ab_rounds.py: medians, ratio, time outside decode) into OUTDIR/prefill_graph_ab_<date>_<sha>.json.
#   bash scripts/gpu_prefill_ab.sh OUTDIR          (ROUNDS=2, MODES=[autoregressive,chain,serial_tree])
set -uo pipefail
OUT=${1:?usage: scripts/gpu_prefill_ab.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
PY=${PY:-python3}
WORK=$(mktemp -d)
EO="['acceptance=smollm2_instruction','spec.oracle_belief=table','model.target.checkpoint=null','model.draft.checkpoint=null','model.tokenizer=null'"
for r in $(seq 1 "${ROUNDS:-2}"); do
  for pg in false true; do
    timeout 150 $PY bench/bench_runtime.py preset=real_pair_shapes presets.real_pair_shapes.parallel=1x0 \
      "presets.real_pair_shapes.experiment_overrides=$EO,'kernels.prefill_graph=$pg']" \
      "modes=${MODES:-[autoregressive,chain,serial_tree]}" out_dir="$WORK/r${r}_pg$pg" doc=null \
      hydra.run.dir="$WORK/hydra_r${r}_pg$pg" 2>&1 | grep "^\[bench\] swiftspec  " | sed "s/^/round $r prefill_graph=$pg /"
  done
done
mkdir -p "$WORK/results"
for f in "$WORK"/r*/runtime_*.json; do cp "$f" "$WORK/results/$(basename "$(dirname "$f")").json"; done
tar czf "$OUT/ab.tar.gz" -C "$WORK/results" .
$PY bench/ab_rounds.py "$WORK/results" --off pgfalse --on pgtrue --name prefill_graph_ab --out "$OUT" \
  --command "ROUNDS=${ROUNDS:-2} bash scripts/gpu_prefill_ab.sh OUT (bench_runtime preset=real_pair_shapes, parallel=1x0)"
ls -la "$OUT"
