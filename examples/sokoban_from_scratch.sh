#!/usr/bin/env bash
# Sokoban from scratch: a randomly initialised tiny model learns Sokoban from the solver's
# demonstrations (SFT), improves by RL against the built-in server (GRPO), and is evaluated on
# levels it never saw (seeds 100000 to 100199; demonstrations use seeds 0 to 7599, GRPO 0 to 31).
#
#   bash examples/sokoban_from_scratch.sh                 # 6x6 rooms, 1 box (the measured recipe)
#   ROOM='[7,7]' BOXES=2 OUT=runs/sokoban7 bash examples/sokoban_from_scratch.sh
#   QUICK=1 bash examples/sokoban_from_scratch.sh         # every piece, tiny sizes: a smoke test (minutes)
#
# Everything runs on the CPU; docs/results.md has the numbers it gave on 2 shared cores.
# Departures from the usual LLM recipe, and why:
# - one move per turn (the solver re-plans every turn), so every demonstration turn is one
#   "this grid -> this move" example, and the model plays closed-loop;
# - from-scratch learning rates (1e-3 for SFT), far above fine-tuning rates;
# - no format warm-up before GRPO: SFT already taught the format, random moves would unteach it.
set -euo pipefail

AGENTGYM=${AGENTGYM:-agentgym}
ROOM=${ROOM:-[6,6]}
BOXES=${BOXES:-1}
OUT=${OUT:-runs/sokoban6}
MODEL=${MODEL:-tiny-192x4}
DEMOS=${DEMOS:-6000}             # solver episodes for the first SFT stage (about 4.7 moves each on 6x6)
DEMOS2=${DEMOS2:-1600}           # fresh episodes for the second stage
SFT_STEPS=${SFT_STEPS:-200}      # first stage: batches of 16 episodes, cosine decay
SFT2_STEPS=${SFT2_STEPS:-150}    # second stage: batches of 8, constant rate
GRPO_STEPS=${GRPO_STEPS:-8}      # each: 32 episodes (4 levels x 8), one optimiser step, a weight sync
EVAL_EPISODES=${EVAL_EPISODES:-200}
if [[ -n "${QUICK:-}" ]]; then
  MODEL=tiny DEMOS=16 DEMOS2=8 SFT_STEPS=2 SFT2_STEPS=1 GRPO_STEPS=1 EVAL_EPISODES=4
fi
ENV=(--env Sokoban-LLM-v0 -k "dim_room=$ROOM" -k "num_boxes=$BOXES")
EVAL=(--episodes "$EVAL_EPISODES" --seed-offset 100000)
GRPO=(--trainer grpo --backend fsdp --steps "$GRPO_STEPS" --group-size 8 --episodes-per-step 32 --lr 3e-4
      --max-turns 20 --max-tokens 16 -s format_warmup_episodes=0 -s lr_schedule=constant -s checkpoint_every=1000)
mkdir -p "$OUT"

# 1. Demonstrations: the solver's episodes, in the tokens the model would have produced.
"$AGENTGYM" rollout "${ENV[@]}" --policy solver --model "$MODEL" --episodes "$DEMOS" \
  --out "$OUT/demos.parquet" --show 1
"$AGENTGYM" rollout "${ENV[@]}" --policy solver --model "$MODEL" --episodes "$DEMOS2" --seed "$DEMOS" \
  --out "$OUT/demos2.parquet" --show 0

# 2. SFT of a random-init model on them (loss on the moves only), in two stages.
"$AGENTGYM" train --trainer sft --backend trl --trajectories "$OUT/demos.parquet" --model "$MODEL" \
  --steps "$SFT_STEPS" --lr 1e-3 -s micro_batch_size=16 -s warmup_steps=10 -s lr_schedule=cosine \
  --out "$OUT/sft1"
"$AGENTGYM" train --trainer sft --backend trl --trajectories "$OUT/demos2.parquet" --model "$OUT/sft1/final" \
  --steps "$SFT2_STEPS" --lr 1e-3 -s micro_batch_size=8 -s warmup_steps=5 -s lr_schedule=constant -s seed=1 \
  --out "$OUT/sft"
"$AGENTGYM" eval "${ENV[@]}" --model "$OUT/sft/final" "${EVAL[@]}"

# 3. GRPO from the SFT checkpoint, online against the built-in server.
"$AGENTGYM" train "${GRPO[@]}" "${ENV[@]}" --model "$OUT/sft/final" --out "$OUT/grpo"
"$AGENTGYM" eval "${ENV[@]}" --model "$OUT/grpo/final" "${EVAL[@]}"

# 4. The bounds: random moves and the solver, on the same unseen levels.
"$AGENTGYM" eval "${ENV[@]}" --policy random "${EVAL[@]}"
"$AGENTGYM" eval "${ENV[@]}" --policy solver "${EVAL[@]}"
"$AGENTGYM" report "$OUT/grpo"
