# Sourced by the A/B device scripts (scripts/gpu_override_ab.sh, scripts/gpu_colocated_ab.sh) with their arguments:
#   source "$(dirname "$0")/ab_args.sh" "$@"
# Reads OUTDIR and 2 to 6 variants (each one or more space-separated Hydra overrides) into OUT (absolute, created),
# VARIANTS and LABELS (a b c ...), moves to the repository root, sources the device environment and makes WORK (a
# temporary folder for the runs).
AB_NAME=$(basename "$0" .sh)
OUT=${1:?usage: scripts/$AB_NAME.sh OUTDIR OVERRIDES_A OVERRIDES_B [OVERRIDES_C ...]}
shift
[ $# -ge 2 ] && [ $# -le 6 ] || { echo "$AB_NAME: 2 to 6 variants expected, got $#" >&2; exit 2; }
VARIANTS=("$@")
LABELS=(a b c d e f)
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.." || exit 2
source scripts/device_env.sh
WORK=$(mktemp -d)
