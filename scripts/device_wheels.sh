#!/usr/bin/env bash
# The wheels the GPU machine lacks (it has torch, triton, transformers and the like, no package index), built here
# into .whl/ (ignored by git) at the versions of requirements-lock.txt; a device call carries them
# (`carry: [".whl"]`, ~6 MB) and scripts/device_env.sh installs them into /tmp/site. The device's Python is 3.12:
# pydantic_core, the one compiled wheel, is fetched for cp312 manylinux.
set -euo pipefail
cd "$(dirname "$0")/.."
PURE=(hydra-core omegaconf antlr4-python3-runtime hydra-joblib-launcher joblib simpy gguf deepspeed hjson pydantic
      annotated-types typing-inspection)
pin() { grep -i "^$1==" requirements-lock.txt || { echo "device_wheels: $1 is not in requirements-lock.txt" >&2; exit 2; }; }
mkdir -p .whl
python -m pip wheel -q --no-deps -w .whl $(for p in "${PURE[@]}"; do pin "$p"; done)
python -m pip download -q --no-deps -d .whl --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 "$(pin pydantic_core)"
ls .whl
