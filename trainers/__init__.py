"""Trainers that learn from trajectories: GRPO and SFT, on a native FSDP backend or on TRL.

``agentgym train`` runs them; :mod:`~agentgym.trainers.config` holds their
settings, :mod:`~agentgym.trainers.loop` the online loop of the fsdp backend,
:mod:`~agentgym.trainers.registry` maps trainer names to implementations.
"""
