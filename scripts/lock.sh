#!/usr/bin/env bash
# Refresh requirements-lock.txt: resolve requirements-cpu.txt and the project's dependencies with its dev extra in a
# fresh, throw-away venv (no lock applied), then record the exact version of every installed distribution.
# scripts/setup.sh installs with this file as a pip constraints file, so every clean machine gets the same versions.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --upgrade pip
"$tmp/venv/bin/python" -m pip install -q -r requirements-cpu.txt
"$tmp/venv/bin/python" -m pip install -q -e ".[dev]"
{
  echo "# Exact versions of every package the CPU setup installs (direct and transitive). Refresh: bash scripts/lock.sh"
  # torch's local label (+cpu) names the build, not the version: `torch==2.13.0` admits the local CPU build
  "$tmp/venv/bin/python" -m pip freeze --exclude-editable --all | grep -v -E '^(pip|setuptools|wheel)==' \
    | sed -E 's/^(torch==[^+]+)\+.*/\1/' | LC_ALL=C sort -f
} > requirements-lock.txt.tmp
mv requirements-lock.txt.tmp requirements-lock.txt
echo "wrote requirements-lock.txt ($(grep -vc '^#' requirements-lock.txt) packages)"
