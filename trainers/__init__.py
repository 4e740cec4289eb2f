"""Trainers that learn from trajectories: GRPO, PPO, DPO, SFT and distillation, on two engines.

The folders are the architecture::

    loop/       the run skeleton every trainer runs in: rows in, learner step, weight push, logs,
                checkpoints, budget, report
    learners/   what each trainer does with a step's rows (grpo, ppo, dpo, sft, distill)
    losses/     the pure arithmetic: advantages, policy loss, KL, value loss, DPO, distillation
    engines/    the backends that compute it: native PyTorch (FSDP2) and TRL, and what they share

:mod:`~agentgym.trainers.settings` holds the run's settings, in sections;
:mod:`~agentgym.trainers.registry` maps trainer names to learners.
"""
