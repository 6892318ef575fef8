#!/usr/bin/env bash
# Calibration + validation in ONE device call (2 x H200), no internet; typically ~5 min, at most ~10 min
# (every stage is bounded by `timeout`: 225 + 60 + 200 + 90 s):
#   profile operators (<= ~3 min) -> calibrate (CPU, seconds) -> measured validation runs (<= ~4 min)
#   -> simulate them + validation table (CPU, < 1 min) -> everything into OUTDIR.
#
#   PYTHONPATH=/tmp/site bash scripts/gpu_calibrate.sh "$OUT"      # hydra-core, omegaconf, simpy wheels in /tmp/site
#
# OUTDIR gets 8 flat files at most (the device tool returns no more than 8, and nothing from deep folders:
# the first calibration call of 2026-11-29 lost its profile that way):
#   profile_traces_<date>.jsonl, profile_traces_<date>.meta.json   operator traces -> bench/results/
#   h200.json, h200.report.json                                    fitted profile + fit report -> profiles/
#   validation_<date>.json, VALIDATION.md                          validation table -> bench/results/, docs/
#   validation_runs.tar.gz   measured (runtime/) and simulated (sim/) run dirs + the parity plot (figures/)
#   logs.tar.gz              every stage's output
# (then, locally: python bench/validate.py compare ... --figure docs/figures/fig04_parity_h200 redraws the plot)
# The profile written here has operators only (the in-graph ones from the step_graphs section included). The shipped
# one adds a runtime block: calibrate.py runs=[...] over some of these validation runs and the colocated runs of
# scripts/gpu_colocated_runs.sh (1 GPU), fitted per runtime loop (docs/FIGURES.md has the command).
# A failing stage is logged and the next one still runs (without a profile, validation uses the analytic prior).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_calibrate.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
if ! python3 -c "import hydra, omegaconf, simpy" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then  # a fresh machine
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PY:-python}
DATE=$(date -u +%F)
PROFILE_BUDGET_S=${PROFILE_BUDGET_S:-190}
VALIDATE_BUDGET_S=${VALIDATE_BUDGET_S:-170}
# CPU test of this script: PROFILE_EXTRA="--device cpu --quick" VALIDATE_EXTRA=--smoke bash scripts/gpu_calibrate.sh /tmp/o
read -r -a PROFILE_EXTRA <<< "${PROFILE_EXTRA:-}"
read -r -a VALIDATE_EXTRA <<< "${VALIDATE_EXTRA:-}"
WORK=$(mktemp -d)  # everything is built here; OUTDIR gets the flat files at the end
mkdir -p "$WORK/logs"
TRACE="$OUT/profile_traces_${DATE}.jsonl"
PROFILE="$OUT/h200.json"
stage() { echo "=== $(date -u +%T) $1"; }

stage "environment"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; $PY -c \
  "import torch, triton, hydra, simpy; print(torch.__version__, torch.version.cuda, triton.__version__)"; } \
  2>&1 | tee "$WORK/logs/env.log"

stage "1/4 profile operators (budget ${PROFILE_BUDGET_S} s)"
timeout $((PROFILE_BUDGET_S + 35)) $PY bench/profile_ops.py --out "$TRACE" --budget-s "$PROFILE_BUDGET_S" \
  "${PROFILE_EXTRA[@]}" 2>&1 | tee "$WORK/logs/profile_ops.log"

stage "2/4 calibrate"
timeout 60 $PY calibrate.py "traces=[$TRACE]" output="$PROFILE" hydra.run.dir="$WORK/logs/calibrate_hydra" \
  2>&1 | tee "$WORK/logs/calibrate.log"
PROFILE_ARGS=()
[ -f "$PROFILE" ] && PROFILE_ARGS=(--profile "$PROFILE")

stage "3/4 validation runs (budget ${VALIDATE_BUDGET_S} s)"
timeout $((VALIDATE_BUDGET_S + 30)) $PY bench/validate.py run --out "$WORK/validation" \
  --budget-s "$VALIDATE_BUDGET_S" "${PROFILE_ARGS[@]}" "${VALIDATE_EXTRA[@]}" 2>&1 | tee "$WORK/logs/validate_run.log"

stage "4/4 simulate the measured runs, validation table"
timeout 90 $PY bench/validate.py compare --runs "$WORK/validation/runtime" "${PROFILE_ARGS[@]}" \
  --results "$OUT/validation_${DATE}.json" --doc "$OUT/VALIDATION.md" \
  --figure "$WORK/validation/figures/fig04_parity_h200" 2>&1 | tee "$WORK/logs/validate_compare.log"

stage "pack"
[ -d "$WORK/validation" ] && tar czf "$OUT/validation_runs.tar.gz" -C "$WORK" validation
tar czf "$OUT/logs.tar.gz" -C "$WORK" logs
chmod -R a+rX "$OUT"
ls -la "$OUT"
stage "done"
