#!/usr/bin/env bash
# Create .venv with CPU torch and the project (editable) with dev extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/python -m pip install -q --upgrade pip
# requirements-lock.txt pins every package (direct and transitive) to the versions the suite was run with;
# bash scripts/lock.sh refreshes it
.venv/bin/python -m pip install -q -c requirements-lock.txt -r requirements-cpu.txt
.venv/bin/python -m pip install -q -c requirements-lock.txt -e ".[dev]"
# Hugging Face's `kernels` distribution (pulled by transformers >= 5.25 into a .venv made before the pin in
# pyproject.toml) makes transformers import from our own top-level `kernels` package: remove it
if .venv/bin/python -m pip show -q kernels >/dev/null 2>&1; then .venv/bin/python -m pip uninstall -q -y kernels; fi
