#!/usr/bin/env bash
# One device call (2 x H200, ~4-8 min): an A/B(/C/D) of Hydra overrides on the validation configurations, in an
# interleaved order a_1 b_1 [c_1 ...] a_2 b_2 [c_2 ...] (within a call, the first variant's runs tend to come out
# slower; docs/LOG.md, tenth session).
#
#   SWIFTSPEC_GIT_SHA=<sha> bash scripts/gpu_override_ab.sh OUTDIR "kernels.draft_head=false" "kernels.draft_head=true"
#   SWIFTSPEC_GIT_SHA=<sha> bash scripts/gpu_override_ab.sh OUTDIR "spec.d=3" "spec.d=4" "spec.d=3 spec.w=32"
# A variant is one or more space-separated overrides (each passed as its own --override); 2 to 6 variants.
# AB_BUDGET_S=35 (each variant's validate.py budget) overrides the default; AB_REPEATS=2 the rounds.
# OUTDIR gets ab.tar.gz (per variant and round, e.g. a_1: the run dirs), ab.log and ab.json (tokens/s per run and
# variant, with the overrides, git SHA and date); the table (each variant's mean over rounds / variant a's) last.
set -uo pipefail
# shellcheck source=scripts/ab_args.sh
source "$(dirname "$0")/ab_args.sh" "$@"  # OUT, VARIANTS, LABELS, WORK; cwd: the repository root
for r in $(seq 1 "${AB_REPEATS:-2}"); do
  for i in "${!VARIANTS[@]}"; do
    v=${LABELS[$i]}_$r
    args=()
    for ov in ${VARIANTS[$i]}; do args+=(--override "$ov"); done
    echo "=== $(date -u +%T) variant $v: ${VARIANTS[$i]// /,}" | tee -a "$OUT/ab.log"
    timeout $(( ${AB_BUDGET_S:-35} + 90 )) python3 bench/validate.py run --out "$WORK/$v" \
      --budget-s "${AB_BUDGET_S:-35}" --no-tp2 --profile profiles/h200.json "${args[@]}" >> "$OUT/ab.log" 2>&1
  done
done
tar czf "$OUT/ab.tar.gz" -C "$WORK" .
python3 - "$OUT" "${VARIANTS[@]}" <<'PY'
import datetime, json, os, re, sys
import torch
out, variants = sys.argv[1], sys.argv[2:]
labels = "abcdef"[:len(variants)]
log = open(f"{out}/ab.log").read()
parts = re.split(r"=== \S+ variant (\S+): \S+", log)
tok: dict = {}
for v, body in zip(parts[1::2], parts[2::2]):
    for m in re.finditer(r"\[validate\] (\S+): \d+ tokens, ([\d.]+) tok/s", body):
        tok.setdefault(m.group(1), {})[v] = float(m.group(2))
rounds = int(os.environ.get("AB_REPEATS", 2))
rec = {"benchmark": "override_ab", "git_sha": os.environ.get("SWIFTSPEC_GIT_SHA", ""),
       "date": datetime.date.today().isoformat(),
       "device": (f"{torch.cuda.device_count()} x {torch.cuda.get_device_name()}" if torch.cuda.is_available()
                  else "cpu (no CUDA device)"),
       "config": {"order": " ".join(f"{lab}_{r}" for r in range(1, rounds + 1) for lab in labels),
                  "budget_s": float(os.environ.get("AB_BUDGET_S", 35)),
                  "runs": "bench/validate.py run --no-tp2 (validation configurations)"},
       "overrides": dict(zip(labels, variants)), "tokens_per_s": tok}
if len(variants) == 2:  # the two-variant record's field names, as earlier results have them
    rec["override_a"], rec["override_b"] = variants
json.dump(rec, open(f"{out}/ab.json", "w"), indent=1)
for lab, v in zip(labels, variants):
    print(f"{lab}: {v}")
cols = [f"{lab}_{r}" for r in range(1, rounds + 1) for lab in labels]
print("| run | " + " | ".join(cols) + " | " + " | ".join(f"{lab} / a" for lab in labels[1:]) + " |")
print("|---" * (1 + len(cols) + len(labels) - 1) + "|")
for run, d in tok.items():
    mean = {lab: [d[f"{lab}_{r}"] for r in range(1, rounds + 1) if f"{lab}_{r}" in d] for lab in labels}
    ratios = [f"{(sum(mean[lab]) / len(mean[lab])) / (sum(mean['a']) / len(mean['a'])):.3f}"
              if mean[lab] and mean["a"] else "-" for lab in labels[1:]]
    print(f"| {run} | " + " | ".join(str(d.get(c, "-")) for c in cols) + " | " + " | ".join(ratios) + " |")
PY
chmod -R a+rX "$OUT"
