"""Trainers that learn from trajectories: GRPO, SFT; TRL and FSDP backends (arrive with the trainer issue)."""
