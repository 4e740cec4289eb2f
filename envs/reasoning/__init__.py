"""Adapters to other collections of reasoning tasks: ``ReasoningGym-LLM-v0`` (reasoning-gym)."""

from __future__ import annotations

from agentgym.envs.reasoning.adapter import ReasoningGymEnv, reasoning_gym_tasks

__all__ = ["ReasoningGymEnv", "reasoning_gym_tasks"]
