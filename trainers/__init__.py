"""Trainers that learn from trajectories: GRPO and SFT, on a native FSDP backend or on TRL.

``agentgym train`` runs them through one run skeleton (:mod:`~agentgym.trainers.run`); a
trainer is a learner (:mod:`~agentgym.trainers.learner`) on an engine (the backend);
:mod:`~agentgym.trainers.settings` holds their settings, in sections;
:mod:`~agentgym.trainers.registry` maps trainer names to learners.
"""
