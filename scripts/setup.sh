#!/usr/bin/env bash
# Create .venv and install ulorl with its test dependencies (CPU torch pinned: no multi-GB CUDA download).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
echo "ulorl installed in .venv ($(.venv/bin/python -c 'import ulorl; print(ulorl.__version__)'))"
