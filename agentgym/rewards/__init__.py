"""Rewards beyond an env's own rules: an LLM judge and the cache it keeps, and a trained reward model.

``from agentgym.rewards import JudgeReward`` (see :mod:`agentgym.rewards.judge`);
``RewardModelReward`` and ``RewardModelWrapper`` (see :mod:`agentgym.rewards.model`), served by
:mod:`agentgym.rewards.server`.
"""

from __future__ import annotations

from agentgym.rewards.cache import CachedScore, ScoreCache
from agentgym.rewards.judge import DEFAULT_RUBRIC, JudgeResult, JudgeReward, parse_score
from agentgym.rewards.model import RewardModelReward, RewardModelWrapper

__all__ = ["DEFAULT_RUBRIC", "CachedScore", "JudgeResult", "JudgeReward", "RewardModelReward", "RewardModelWrapper",
           "ScoreCache", "parse_score"]
