"""Rewards beyond an env's own rules: an LLM judge, and the cache it keeps.

``from agentgym.rewards import JudgeReward`` (see :mod:`agentgym.rewards.judge`).
"""

from __future__ import annotations

from agentgym.rewards.cache import CachedScore, ScoreCache
from agentgym.rewards.judge import DEFAULT_RUBRIC, JudgeResult, JudgeReward, parse_score

__all__ = ["DEFAULT_RUBRIC", "CachedScore", "JudgeResult", "JudgeReward", "ScoreCache", "parse_score"]
