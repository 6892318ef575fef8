#!/usr/bin/env bash
# One device call: Nsight Compute over the first layer of one decode step (bench/ncu_step.py), per row count.
# Results flat in OUTDIR: ncu_<preset>_r<rows>.csv (ncu --csv --page details), ncu_<preset>_r<rows>.md (the table).
#   bash scripts/gpu_ncu.sh "$OUT"        (ROWS="1 8", PRESET=llama3-8b, CTX=1024)
#   STEP_ARGS=--rope-attention-all ...   extra bench/ncu_step.py arguments (tag suffix TAG)
#   SOURCE=1 bash scripts/gpu_ncu.sh "$OUT"   also the SASS source page of the first attention launch (KERNEL regex):
#                                         ncu_<preset>_r<rows>_sass.csv.gz + _sass.md (bench/ncu_step.py --sass;
#                                         WARPS=<total warps of the launch> for per-warp figures). The device returns
#                                         at most 8 files: use one row count per call with SOURCE=1.
# ncu reads the hardware counters on the Firecracker machines with --clock-control none (library device/KINDS.md).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_ncu.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
PRESET=${PRESET:-llama3-8b}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "gpu_ncu: no ncu on this machine"; exit 2; }
STALLS=$(python3 -c "from bench.ncu_step import STALL_METRICS_REGEX as s; print(s)")
for rows in ${ROWS:-1 8}; do
  tag="${PRESET}_r${rows}${TAG:-}"
  echo "=== $(date -u +%T) ncu, $PRESET, $rows rows"
  timeout "${NCU_TIMEOUT_S:-180}" "$NCU" --profile-from-start off --clock-control none \
    -k regex:'_skinny|_swiglu|_tree_attention|_add_rmsnorm|_rope_kv' --launch-count 9 \
    --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy --metrics "$STALLS" \
    --csv --page details python3 bench/ncu_step.py --preset "$PRESET" --rows "$rows" --ctx "${CTX:-1024}" ${STEP_ARGS:-} \
    > "$OUT/ncu_$tag.csv" 2> "$OUT/ncu_$tag.log" || { echo "ncu failed:"; tail -5 "$OUT/ncu_$tag.log"; tail -3 "$OUT/ncu_$tag.csv"; }
  python3 bench/ncu_step.py --summarize "$OUT/ncu_$tag.csv" | tee "$OUT/ncu_$tag.md"
  if [ "${SOURCE:-0}" = 1 ]; then  # executed instructions and stall samples per SASS line of one launch
    timeout "${NCU_TIMEOUT_S:-180}" "$NCU" --profile-from-start off --clock-control none \
      -k regex:"${KERNEL:-_tree_attention}" --launch-count 1 --section SourceCounters --import-source yes \
      -o "/tmp/ncu_src_$tag" -f python3 bench/ncu_step.py --preset "$PRESET" --rows "$rows" --ctx "${CTX:-1024}" ${STEP_ARGS:-} \
      > "$OUT/ncu_${tag}_sass.log" 2>&1 || { echo "ncu (source) failed:"; tail -3 "$OUT/ncu_${tag}_sass.log"; continue; }
    "$NCU" --import "/tmp/ncu_src_$tag.ncu-rep" --page source --print-source sass --csv > "/tmp/ncu_src_$tag.csv" \
      || { echo "ncu --import failed"; continue; }
    # per-warp figures: WARPS=<programs x warps per program of the launch> (e.g. 32 x 8 = 256)
    python3 bench/ncu_step.py --sass "/tmp/ncu_src_$tag.csv" ${WARPS:+--warps "$WARPS"} | tee "$OUT/ncu_${tag}_sass.md"
    gzip -c "/tmp/ncu_src_$tag.csv" > "$OUT/ncu_${tag}_sass.csv.gz"
  fi
done
chmod -R a+rX "$OUT"
