#!/usr/bin/env bash
# The other pipelines on Sokoban (docs/results.md, "Distillation, DPO and PPO on Sokoban" and
# "Asynchronous GRPO"): each starts from the recipe's SFT model (examples/sokoban_from_scratch.sh,
# runs/sokoban6/sft/final) and is evaluated greedily on the unseen levels 100000 to 100199.
#
#   bash examples/pipelines_sokoban.sh            # all of them, one after another
#   PARTS="dpo ppo" bash examples/pipelines_sokoban.sh
#
# The pairs of runs compared (distil/SFT students, sync/async GRPO) run at the same time, so they
# share the cores alike. Budgets are wall-clock (max_seconds) where the issue compares per hour.
set -euo pipefail

AGENTGYM=${AGENTGYM:-agentgym}
TEACHER=${TEACHER:-runs/sokoban6/sft/final}  # the recipe's SFT model: teacher and start model
OUT=${OUT:-runs/pipelines}
STUDENT=${STUDENT:-tiny-64x4}                # 4x fewer parameters than the teacher
STUDENT_SECONDS=${STUDENT_SECONDS:-2700}     # each student's wall-clock budget
GRPO_SECONDS=${GRPO_SECONDS:-3600}           # each GRPO mode's wall-clock budget
PPO_STEPS=${PPO_STEPS:-11}                   # as many steps (episodes) as the synchronous GRPO run took
PARTS=${PARTS:-"teacher distill dpo grpo ppo"}
ENV=(--env Sokoban-LLM-v0 -k brief=true -k show_positions=true)
EVAL=(--episodes 200 --seed-offset 100000 --concurrency 32)
# The recipe's GRPO setting (examples/sokoban_from_scratch.sh); PPO takes the same, less GRPO's own knobs.
RL=(--steps 180 --group-size 8 --episodes-per-step 128 --lr 3e-5 --turn-budget 12 --max-tokens 16 --seed 7
    -s format_warmup_episodes=0 -s lr_schedule=constant -s checkpoint_every=1000 -k format_penalty=0.1
    -s concurrency=64 -s top_entropy_quantile=0.2 -s "frozen_parameters=[model.embed_tokens.*,model.layers.0.*]")
GRPO=(--trainer grpo --backend fsdp "${RL[@]}" -s advantage=dr_grpo -s baseline=turn)
mkdir -p "$OUT"
has() { [[ " $PARTS " == *" $1 "* ]]; }
evaluate() { "$AGENTGYM" eval "${ENV[@]}" --model "$1/final" "${EVAL[@]}" --episodes-out "$1/eval.parquet"; }

if has teacher; then  # the teacher's own episodes at temperature 1: groups of 8 (DPO) and single levels (students)
  "$AGENTGYM" rollout "${ENV[@]}" --model "$TEACHER" --episodes 1024 --group-size 8 --seed 50000 --turn-budget 12 \
    --sampling-seed 1 --out "$OUT/teacher_groups.parquet" --show 0
  "$AGENTGYM" rollout "${ENV[@]}" --model "$TEACHER" --episodes 2048 --seed 60000 --turn-budget 12 \
    --sampling-seed 2 --out "$OUT/teacher_demos.parquet" --show 0
fi

if has distill; then  # the student distilled (forward KL over the full vocabulary) against SFT on the same episodes
  STUDENTS=(--model "$STUDENT" --trajectories "$OUT/teacher_demos.parquet" --steps 100000 --lr 1e-3
            -s micro_batch_size=16 -s warmup_steps=20 -s lr_schedule=constant -s max_seconds="$STUDENT_SECONDS")
  "$AGENTGYM" train --trainer distill "${STUDENTS[@]}" -s teacher="$TEACHER" -s episodes_per_step=16 \
    --out "$OUT/distill" > "$OUT/distill.log" 2>&1 &
  "$AGENTGYM" train --trainer sft "${STUDENTS[@]}" --out "$OUT/sft_student" > "$OUT/sft_student.log" 2>&1 &
  wait
  evaluate "$OUT/distill"
  evaluate "$OUT/sft_student"
fi

if has dpo; then  # pairs (best against worst) of the SFT model's own groups
  "$AGENTGYM" train --trainer dpo --trajectories "$OUT/teacher_groups.parquet" --model "$TEACHER" --steps 32 \
    -s episodes_per_step=64 -s group_size=8 --lr 3e-5 -s beta=0.1 -s format_warmup_episodes=0 \
    -s lr_schedule=constant -s checkpoint_every=1000 --out "$OUT/dpo"
  evaluate "$OUT/dpo"
fi

if has grpo; then  # synchronous and asynchronous GRPO at once
  "$AGENTGYM" train "${GRPO[@]}" "${ENV[@]}" --model "$TEACHER" -s max_seconds="$GRPO_SECONDS" \
    --out "$OUT/grpo_sync" > "$OUT/grpo_sync.log" 2>&1 &
  "$AGENTGYM" train "${GRPO[@]}" "${ENV[@]}" --model "$TEACHER" -s max_seconds="$GRPO_SECONDS" -s asynchronous=true \
    --out "$OUT/grpo_async" > "$OUT/grpo_async.log" 2>&1 &
  wait
  evaluate "$OUT/grpo_sync"
  evaluate "$OUT/grpo_async"
  "${PYTHON:-python3}" scripts/plot_runs.py "$OUT/grpo_sync" "$OUT/grpo_async" --labels synchronous asynchronous \
    --out "$OUT/async_sokoban.png"
fi

if has ppo; then  # PPO with a value head (the defaults) on the same levels and sampling seeds as GRPO
  "$AGENTGYM" train --trainer ppo --backend fsdp "${RL[@]}" --steps "$PPO_STEPS" "${ENV[@]}" --model "$TEACHER" \
    --out "$OUT/ppo"
  evaluate "$OUT/ppo"
fi
