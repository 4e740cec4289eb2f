#!/usr/bin/env bash
# SmolLM2-135M-Instruct learning single-turn arithmetic, two hours each: agentgym GRPO and TRL's own
# GRPOTrainer (examples/trl_grpo_baseline.py), at the same time, each pinned to one of the two cores
# with one torch thread. Same prompts (seeds 0, 1, 2, ... in groups of 8), reward, 32 samples of at
# most 64 tokens a step at temperature 0.7 (at 1, 3% of the samples were right: see docs/results.md),
# learning rate 1e-5 held constant, AdamW (0.9, 0.999), no KL, the token-mean
# loss, one update a step. Then the greedy success of each on the 200 held-out seeds 100000..100199.
# docs/results.md ("SmolLM2-135M-Instruct learning arithmetic") has the table this produced.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/real}
MINUTES=${MINUTES:-120}
ENV=(--env Math-LLM-v0 -k 'kinds=[arithmetic]' -k 'levels=[1,2]' -k answer_format=last_number)
mkdir -p "$OUT"

agentgym_eval() {  # MODEL RUN_DIR; the episodes too, for scripts/compare_evals.py
    .venv/bin/agentgym eval "${ENV[@]}" --model "$1" --max-tokens 64 --out "$2" --episodes-out "$2/eval.parquet"
}

[ -f "$OUT/base/eval.json" ] || agentgym_eval smollm2-135m "$OUT/base"

OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/agentgym train --trainer grpo "${ENV[@]}" --model smollm2-135m \
    --steps 100000 --episodes-per-step 32 --group-size 8 --max-tokens 64 --temperature 0.7 --lr 1e-5 --out "$OUT/agentgym" \
    -s optim.lr_schedule=constant -s 'optim.adam_betas=[0.9,0.999]' -s warmup.format_warmup_episodes=0 \
    -s run.max_seconds=$((MINUTES * 60)) > "$OUT/agentgym.log" 2>&1 &
ours=$!
OMP_NUM_THREADS=1 taskset -c 1 .venv/bin/python examples/trl_grpo_baseline.py "${ENV[@]}" --model smollm2-135m \
    --prompts 4 --group-size 8 --max-tokens 64 --temperature 0.7 --lr 1e-5 --minutes "$MINUTES" --out "$OUT/trl" \
    > "$OUT/trl.log" 2>&1 &
theirs=$!
wait "$ours"
wait "$theirs"

agentgym_eval "$OUT/agentgym/final" "$OUT/agentgym"
agentgym_eval "$OUT/trl/final" "$OUT/trl"
for run in agentgym trl; do .venv/bin/python scripts/compare_evals.py "$OUT/base/eval.parquet" "$OUT/$run/eval.parquet"; done
