#!/usr/bin/env bash
# The policy losses and the reward model on Sokoban (docs/results.md, "Policy losses and a reward
# model on Sokoban"): the recipe's SFT model (examples/sokoban_from_scratch.sh's first two stages,
# no DAgger), then the recipe's GRPO setting with each loss for the same wall-clock budget, on the
# same levels and sampling seeds (`--seed 7`), and GRPO against a reward model trained on pairs of
# the SFT model's own groups. Each model is evaluated greedily on the unseen levels 100000 to 100199.
#
#   bash examples/losses_sokoban.sh                    # all of it (about 2 h 40 min on 2 cores)
#   PARTS="losses" START=runs/sokoban6/sft/final bash examples/losses_sokoban.sh
#
# The runs go two at a time, each pinned to its own core with one torch thread (taskset,
# OMP_NUM_THREADS=1), so that two runs compared share the machine alike.
set -euo pipefail

AGENTGYM=${AGENTGYM:-agentgym}
OUT=${OUT:-runs/losses}
START=${START:-$OUT/sft/final}   # the start model of every RL run (built by the "sft" part)
SFT_STEPS=${SFT_STEPS:-1200}
SECONDS_EACH=${SECONDS_EACH:-1800}  # each RL run's wall-clock budget (max_seconds: it ends after the step that runs out)
DS_ROUNDS=${DS_ROUNDS:-3}        # dynamic sampling: extra rounds of groups a step may play
PARTS=${PARTS:-"sft losses"}
ENV=(--env Sokoban-LLM-v0 -k brief=true -k show_positions=true)
EVAL=(--episodes 200 --seed-offset 100000 --concurrency 32)
MINI_BATCHES=${MINI_BATCHES:-4}  # optimiser steps a GRPO step (the recipe takes 1; see below)
# The recipe's GRPO setting (examples/sokoban_from_scratch.sh), but for its optimiser steps a step: the
# recipe takes one, so pi_old is pi and every ratio is 1, where the clip, GSPO and CISPO take the very
# same step (tests/trainers/losses/test_algorithms.py). With 4 the last three see ratios off 1.
GRPO=(--trainer grpo --backend fsdp --steps 1000 --group-size 8 --episodes-per-step 128 --lr 3e-5 --turn-budget 12
      --max-tokens 16 --seed 7 -s format_warmup_episodes=0 -s lr_schedule=constant -s checkpoint_every=1000
      -k format_penalty=0.1 -s concurrency=64 -s top_entropy_quantile=0.2 -s advantage=dr_grpo -s baseline=turn
      -s "frozen_parameters=[model.embed_tokens.*,model.layers.0.*]" -s max_seconds="$SECONDS_EACH"
      -s mini_batches="$MINI_BATCHES")
mkdir -p "$OUT"
has() { [[ " $PARTS " == *" $1 "* ]]; }
on_core() { local core=$1; shift; OMP_NUM_THREADS=1 taskset -c "$core" "$@"; }
evaluate() { "$AGENTGYM" eval "${ENV[@]}" --model "$1/final" "${EVAL[@]}" --episodes-out "$1/eval.parquet"; }
# A GRPO run in the background on core $2, its settings (words) after: NAME CORE SETTINGS...
launch() {
  local name=$1 core=$2
  shift 2
  on_core "$core" "$AGENTGYM" train "${GRPO[@]}" "${ENV[@]}" --model "$START" "$@" --out "$OUT/$name" \
    > "$OUT/$name.log" 2>&1 &
}
if has sft; then  # the recipe's first two stages: noisy solver demonstrations, SFT of tiny-128x4 on them
  "$AGENTGYM" rollout "${ENV[@]}" --policy solver --expert-noise 0.25 --model tiny-128x4 --episodes 20000 \
    --out "$OUT/demos.parquet" --show 1
  "$AGENTGYM" train --trainer sft --trajectories "$OUT/demos.parquet" --model tiny-128x4 --steps "$SFT_STEPS" \
    --lr 1e-3 -s micro_batch_size=16 -s warmup_steps=20 -s lr_schedule=cosine --out "$OUT/sft"
  evaluate "$OUT/sft"
fi

if has losses; then
  # The baseline on core 0 while core 1 makes the reward model: the SFT model's groups of 8
  # (temperature 1), a reward model on their pairs (its final/ scores GRPO's episodes below).
  launch grpo 0
  on_core 1 "$AGENTGYM" rollout "${ENV[@]}" --model "$START" --episodes 2048 --group-size 8 --seed 50000 \
    --turn-budget 12 --sampling-seed 1 --out "$OUT/groups.parquet" --show 0
  # best against worst of each group (every pair of a group, pairs=all, took 20 s a step on one core)
  on_core 1 "$AGENTGYM" train --trainer rm --trajectories "$OUT/groups.parquet" --model "$START" --steps 100 \
    -s pairs=best_worst -s pair_margin=0.5 -s eval_fraction=0.2 -s eval_every=10 --lr 3e-4 -s max_seconds=1200 \
    --out "$OUT/rm"
  wait
  evaluate "$OUT/grpo"
  # GSPO at its paper's clip (3e-4 / 4e-4 on the sequence's ratio); CISPO at the defaults (0.2 / 0.28)
  launch gspo 0 -s policy_loss=gspo -s clip_low=3e-4 -s clip_high=4e-4
  launch cispo 1 -s policy_loss=cispo
  wait
  evaluate "$OUT/gspo"
  evaluate "$OUT/cispo"
  launch grpo_dynamic 0 -s filter_zero_variance=true -s dynamic_sampling_rounds="$DS_ROUNDS"
  launch grpo_rm 1 --env rm:Sokoban-LLM-v0 -k reward_model="$OUT/rm/final"
  wait
  evaluate "$OUT/grpo_dynamic"
  evaluate "$OUT/grpo_rm"
  "${PYTHON:-python3}" scripts/plot_runs.py "$OUT/grpo" "$OUT/gspo" "$OUT/cispo" "$OUT/grpo_dynamic" "$OUT/grpo_rm" \
    --labels GRPO GSPO CISPO "GRPO + dynamic sampling" "GRPO, reward model" --out "$OUT/losses_sokoban.png"
fi
