#!/usr/bin/env bash
# The README's test command: set up, then run the default (CPU) test suite on 2 workers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=1
.venv/bin/python -m pytest -q -n 2 "$@"
