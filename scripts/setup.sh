#!/usr/bin/env bash
# Install agentgym into ./.venv (created if missing).
#
#   scripts/setup.sh            the package and its light dependencies
#   scripts/setup.sh test       plus what the test suite needs
#   scripts/setup.sh train,test extras, comma separated (see pyproject.toml)
#
# Extras that need PyTorch (train, serve, test, all) get the CPU build (torch==2.13.0) first when the
# machine has no NVIDIA GPU: an unpinned torch would pull gigabytes of CUDA.
# Set PYTHON to choose the interpreter (3.11 or newer), VENV to choose the folder.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="${1:-}"
python="${PYTHON:-python3}"
venv="${VENV:-.venv}"

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "agentgym needs Python 3.11 or newer; $python is $("$python" --version 2>&1)." >&2
    echo "Set PYTHON=/path/to/python3.11 and run this again." >&2
    exit 1
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet)

if [[ ",$extras," =~ ,(train|serve|test|all|vllm|bench), ]] && ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "No NVIDIA GPU here: installing the CPU build of PyTorch first."
    "${pip[@]}" "torch==2.13.0"
fi

target="."
[ -n "$extras" ] && target=".[$extras]"
"${pip[@]}" -e "$target"
echo "agentgym installed in $venv${extras:+ with extras: $extras}."
