#!/usr/bin/env bash
# One device call (2 x H200, ~4-5 min): an A/B of one Hydra override on the validation configurations, in an
# A-B-A-B order (within a call, the first variant's runs tend to come out slower; docs/LOG.md, tenth session).
#
#   SWIFTSPEC_GIT_SHA=<sha> bash scripts/gpu_override_ab.sh OUTDIR "kernels.draft_head=false" "kernels.draft_head=true"
#   AB_BUDGET_S=35 (each variant's validate.py budget) overrides the default.
# OUTDIR gets ab.tar.gz (per variant a_1, b_1, a_2, b_2: the run dirs), ab.log and ab.json (tokens/s per run and
# variant, with the overrides, git SHA and date); the table is printed last.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_override_ab.sh OUTDIR OVERRIDE_A OVERRIDE_B}
A=${2:?override A, e.g. kernels.draft_head=false}
B=${3:?override B, e.g. kernels.draft_head=true}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
WORK=$(mktemp -d)
for v in a_1 b_1 a_2 b_2; do
  ov=$A; [ "${v%%_*}" = b ] && ov=$B
  echo "=== $(date -u +%T) variant $v: $ov" | tee -a "$OUT/ab.log"
  timeout $(( ${AB_BUDGET_S:-35} + 90 )) python3 bench/validate.py run --out "$WORK/$v" --budget-s "${AB_BUDGET_S:-35}" \
    --no-tp2 --profile profiles/h200.json --override "$ov" >> "$OUT/ab.log" 2>&1
done
tar czf "$OUT/ab.tar.gz" -C "$WORK" .
python3 - "$OUT" "$A" "$B" <<'PY'
import json, re, subprocess, sys, datetime, os
out, a, b = sys.argv[1:4]
log = open(f"{out}/ab.log").read()
parts = re.split(r"=== \S+ variant (\S+): \S+", log)
tok = {}
for v, body in zip(parts[1::2], parts[2::2]):
    for m in re.finditer(r"\[validate\] (\S+): \d+ tokens, ([\d.]+) tok/s", body):
        tok.setdefault(m.group(1), {})[v] = float(m.group(2))
import torch
rec = {"benchmark": "override_ab", "git_sha": os.environ.get("SWIFTSPEC_GIT_SHA", ""), "date": datetime.date.today().isoformat(),
       "device": f"{torch.cuda.device_count()} x {torch.cuda.get_device_name()}",
       "config": {"order": "a_1 b_1 a_2 b_2", "budget_s": float(os.environ.get("AB_BUDGET_S", 35)),
                  "runs": "bench/validate.py run --no-tp2 (validation configurations)"},
       "override_a": a, "override_b": b, "tokens_per_s": tok}
json.dump(rec, open(f"{out}/ab.json", "w"), indent=1)
print(f"| run | a_1 | b_1 | a_2 | b_2 | b / a |\n|---|---|---|---|---|---|")
for run, d in tok.items():
    va = [d[k] for k in ("a_1", "a_2") if k in d]; vb = [d[k] for k in ("b_1", "b_2") if k in d]
    ratio = f"{(sum(vb) / len(vb)) / (sum(va) / len(va)):.3f}" if va and vb else "-"
    print(f"| {run} | " + " | ".join(str(d.get(k, "-")) for k in ("a_1", "b_1", "a_2", "b_2")) + f" | {ratio} |")
PY
chmod -R a+rX "$OUT"
