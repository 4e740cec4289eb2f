#!/usr/bin/env bash
# Fill .device/ (ignored by git, carried by the device tool) for scripts/device_sokoban.sh:
#   - wheels for Python 3.12 on x86-64 of what agentgym's recipe imports beyond that machine's
#     image (PyTorch, numpy, pyarrow, accelerate, safetensors... are there), at this checkout's
#     versions, and agentgym's own wheel;
#   - the solver's demonstrations (DEMOS, made here with the recipe's settings) and the hash of
#     the tokenizer that made them, so the run there can tell whether their token ids still hold.
#
#   bash scripts/device_prepare.sh runs/gpu/demos.parquet
#
# The list below was read off a run of the recipe here (QUICK=1) with every imported module
# traced, less the image's packages (the device tool's KINDS.md lists them).
set -euo pipefail
DEMOS=${1:?give the demonstrations: a demos.parquet written by the recipe (step 1)}
PY=${PY:-.venv/bin/python}
WHEELS=(gymnasium farama-notifications pydantic pydantic-core annotated-types typing-inspection
        typing-extensions fastapi starlette opentelemetry-api uvicorn openai httpx2 httpcore2 truststore
        jiter sniffio orjson trl datasets dill multiprocess transformers tokenizers huggingface-hub peft
        typer rich)

mkdir -p .git/info
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
rm -rf .device && mkdir -p .device/wheels
pins=()
for name in "${WHEELS[@]}"; do
  version=$("$PY" -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')
  [[ -n "$version" ]] || { echo "$name is not installed in $PY's environment: run scripts/setup.sh test." >&2; exit 1; }
  pins+=("$name==$version")
done
platforms=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1 manylinux_2_24 \
           manylinux_2_31 manylinux_2_34 manylinux_2_35; do
  platforms+=(--platform "${tag}_x86_64")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d .device/wheels "${pins[@]}"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w .device/wheels .
cp "$DEMOS" .device/demos.parquet
"$PY" -c "from agentgym.models import resolve_model; print(resolve_model('tiny'))" \
  | xargs -I{} sha256sum {}/tokenizer.json | cut -d' ' -f1 > .device/tokenizer.sha256
du -sh .device
