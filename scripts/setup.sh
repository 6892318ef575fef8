#!/usr/bin/env bash
# Create .venv with CPU torch and the project (editable) with dev extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements-cpu.txt
.venv/bin/python -m pip install -q -e ".[dev]"
