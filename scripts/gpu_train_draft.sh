#!/usr/bin/env bash
# One device command (one H200): distil the SmolLM2 draft, measure the pair's acceptance, bundle the results.
#
#   bash scripts/gpu_train_draft.sh "$OUT" [train_draft.py overrides, e.g. max_train_s=400]
#   (REPORT_ARGS="max_prompts=2 ..." passes overrides to the acceptance report; for smoke runs)
#
# Budget: train_draft.py < 5 min (model load + stdlib tokenisation ~20 s, teacher generation <= 60 s, then
# max_train_s = 180 s of optimisation, eval + save ~10 s), acceptance report < 1.5 min. No internet needed.
# Needs there: .cache/models/smollm2-135m-instruct.gguf (or its parts, see below), and hydra-core, omegaconf,
# antlr4-python3-runtime, gguf importable (if not, wheels in .whl/ are installed into /tmp/site).
# The GGUF (94 MiB) is larger than what one call carries (64 MiB): it may arrive as parts named
# smollm2-135m-instruct.gguf.part-* in .cache/models/ or /tmp/gguf-parts/ (for example staged by an earlier
# call of the same warm machine); they are joined and checked against runtime/fetch_smollm2.py's SHA-256.
#
# $OUT gets (at most 8 files of <= 16 MiB, the device tool's limits):
#   results.tar.part-00, -01  models/smollm2-draft/ + profiles/acceptance/smollm2.json + the run dir's
#                             loss.csv, loss.png, summary.json, train.log, report.log (split at 15 MiB);
#                             back here: cat results.tar.part-* | tar -x   (from the repository root)
#   smollm2.json, summary.json   small copies to read without unpacking (the logs are in the tar: with
#   scripts/gpu_real_pair.sh's three files the call stays within 8)
set -euo pipefail
OUT=${1:?usage: scripts/gpu_train_draft.sh OUT_DIR [train_draft.py overrides]}
shift
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=true

if ! python3 -c "import hydra, omegaconf, gguf" 2>/dev/null; then
  ls .whl/*.whl >/dev/null 2>&1 || { echo "hydra/omegaconf/gguf missing and no .whl/ to install from"; exit 2; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

bash scripts/assemble_gguf.sh

nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
RUN=runs/train_draft/gpu
rm -rf "$RUN" && mkdir -p "$(dirname "$RUN")"
t0=$(date +%s)
python3 train_draft.py out_dir="$RUN" "$@" 2>&1 | grep --line-buffered -v -E "Writing model shards|Loading weights" \
  | tee "$RUN.train.log"
t1=$(date +%s)
# shellcheck disable=SC2086
python3 -m runtime.acceptance_report ${REPORT_ARGS:-} 2>&1 | grep --line-buffered -v -E "Loading weights" | tee "$RUN.report.log"
t2=$(date +%s)
echo "train_draft.py: $((t1 - t0)) s, acceptance report: $((t2 - t1)) s"
python3 - <<'EOF'
import json
r = json.load(open("profiles/acceptance/smollm2.json"))["by_domain"]
for domain, need in (("code", 3.0), ("instruction", 2.5)):
    got = r[domain]["tree"]["8"]
    print(f"done-criterion {domain}: tree bs=8 {got:.3f} tokens/verify (need >= {need}): "
          f"{'PASS' if got >= need else 'FAIL'}")
EOF

cp "$RUN.train.log" "$RUN/train.log"
cp "$RUN.report.log" "$RUN/report.log"
tar -cf /tmp/results.tar models/smollm2-draft profiles/acceptance/smollm2.json \
  "$RUN/loss.csv" "$RUN/loss.png" "$RUN/summary.json" "$RUN/train.log" "$RUN/report.log"
split -b 15m -d /tmp/results.tar "$OUT/results.tar.part-"
cp profiles/acceptance/smollm2.json "$RUN/summary.json" "$OUT/"
ls -la "$OUT"
