#!/usr/bin/env bash
# The Sokoban recipe (examples/sokoban_from_scratch.sh) with larger models on a lent GPU machine,
# in one call of the device tool, whose machine holds PyTorch but none of agentgym's other needs
# and reaches no package index. Prepared here by scripts/device_prepare.sh, which puts in .device/
# the wheels (agentgym's own too), the solver's demonstrations and the hash of the tokenizer they
# were made with; run there as
#
#   bash scripts/device_sokoban.sh          (carry: .device; OUT set by the tool)
#
# One model by default (two side by side halved each one's speed in the first session's run; the
# built-in server and the trainers pick the GPU by themselves: device auto), SFT_STEPS steps with
# SFT_SECONDS as a safety net, then GRPO for GRPO_SECONDS: the whole recipe fits one call, whose
# 15 minutes of device time a machine's start eats into. GRPO runs beside its lr-0 control
# (GRPO_CONTROL=0: alone), so its training curve pairs with one that cannot learn; its turns are
# compared with the episodes still playing them (GRPO_BASELINE=turn, the recipe's default since
# 2026-11-28, with its other GRPO settings; docs/log.md). float32
# matmuls run as TF32 (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE): SFT took 2.7 times less per step
# than in float32. Every stage writes into $OUT as it ends and DEADLINE seconds stop whatever
# is left, so a run cut short still brings back what it finished.
set -uo pipefail
OUT=${OUT:?set OUT: the folder results go to}
DEADLINE=${DEADLINE:-520}
PIPELINES=${PIPELINES:-"a:tiny-512x8:5e-4"}  # NAME:MODEL:SFT_LR ... (side by side)
RECIPE_ENV=${RECIPE_ENV:-}  # more recipe settings, VAR=VALUE ..., over the ones below (a shorter probe)
began=$SECONDS
exec > >(tee -a "$OUT/log.txt") 2>&1

if [[ -z "${LOCAL:-}" ]]; then  # LOCAL=1: a smoke test of this script here, in the project's .venv
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .device/wheels/*.whl || exit 1
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH AGENTGYM=/tmp/site/bin/agentgym
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
# PYTHONSAFEPATH: `python -m agentgym.serve` run from the checkout would otherwise import the
# source folder agentgym/ (the cwd comes first), which lacks the envs, trainers... mapped into it.
export PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1 TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=${TF32:-1}
python3 -c "import torch, transformers, trl; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
'transformers', transformers.__version__, 'trl', trl.__version__)" || exit 1

# The demonstrations hold token ids: reuse them only if this machine's tokenizer is the same.
demos=()
tokenizer=$(python3 -c "from agentgym.models import resolve_model; print(resolve_model('tiny'))")/tokenizer.json
if [[ "$(sha256sum < "$tokenizer" | cut -d' ' -f1)" == "$(cat .device/tokenizer.sha256)" ]]; then
  demos=(DEMOS_FROM=.device/demos.parquet)
else
  echo "The tokenizer built here differs from the one the demonstrations were made with: making them again."
  demos=(DEMOS=8000)  # fewer: each pipeline makes its own, side by side
fi

pipeline() {  # NAME MODEL SFT_LR: the recipe, SFT then GRPO, no DAgger round, EVAL_EPISODES eval levels
  local name=$1 model=$2 lr=$3 left=$((DEADLINE - (SECONDS - began)))
  echo "[$((SECONDS - began)) s] $name: $model, SFT lr $lr, $left s left"
  env "${demos[@]}" OUT="runs/gpu/$name" MODEL="$model" SFT_LR="$lr" DAGGER_EPISODES=0 BOUNDS=0 \
    EVAL_EPISODES=${EVAL_EPISODES:-400} CONCURRENCY=200 SFT_STEPS=${SFT_STEPS:-800} SFT_SECONDS=${SFT_SECONDS:-240} \
    GRPO_EPISODES=128 GRPO_CONCURRENCY=128 GRPO_STEPS=40 GRPO_SECONDS=${GRPO_SECONDS:-110} \
    GRPO_CONTROL=${GRPO_CONTROL:-1} GRPO_BASELINE=${GRPO_BASELINE:-turn} $RECIPE_ENV \
    timeout -s TERM "$left" bash -c 'PS4="+ [\$SECONDS s] "; set -x; . examples/sokoban_from_scratch.sh' \
    > "$OUT/$name.log" 2>&1  # (bash run as root takes no PS4 from the environment)
  echo "[$((SECONDS - began)) s] $name ended with status $?"
}

jobs_started=()
for spec in $PIPELINES; do
  IFS=: read -r name model lr <<< "$spec"
  pipeline "$name" "$model" "$lr" &
  jobs_started+=($!)
  sleep 5  # the first builds its model's cache folder; let it start alone
done
wait "${jobs_started[@]}"  # by pid: a bare wait would also wait for the tee above, which never ends

# Each pipeline's models on the same unseen levels: the first 200 are the issue's eval.
for spec in $PIPELINES; do
  name=${spec%%:*}
  sft=runs/gpu/$name/eval_sft.parquet grpo=runs/gpu/$name/eval_grpo.parquet
  if [[ -s $sft && -s $grpo ]]; then
    echo "== $name: SFT (A) against SFT + GRPO (B), the first 200 levels, then all of them"
    python3 scripts/compare_evals.py "$sft" "$grpo" --first 200
    python3 scripts/compare_evals.py "$sft" "$grpo" --turns
  fi
done
tar czf "$OUT/runs.tar.gz" --exclude='*.safetensors' --exclude='*.pt' --exclude='optimizer*' \
  --exclude='demos.parquet' --exclude='checkpoint*' runs/gpu
echo "[$((SECONDS - began)) s] done"
