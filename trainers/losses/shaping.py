"""Reward shaping before the advantages: DAPO's soft overlong punishment.

Yu et al. 2025 ("DAPO: An Open-Source LLM Reinforcement Learning System at Scale", Eq. 13): with a
length limit L_max and a cache L_cache, a response of ``length`` tokens loses

    0                                   if length <= L_max - L_cache
    ((L_max - L_cache) - length) / L_cache   if L_max - L_cache < length <= L_max
    1                                   beyond L_max

times ``penalty`` (DAPO: 1, the scale of its +-1 reward). A cache of 0 is the hard limit: nothing up
to L_max, the whole penalty past it.

Departure, on purpose: an episode of several turns is one response here, its length the tokens the
policy sampled over all its turns (env replies are not the policy's length).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentgym.rollout.rows import TrajectoryRow

__all__ = ["episode_sampled_tokens", "overlong_penalty"]


def overlong_penalty(length: int, max_tokens: int, cache_tokens: int, penalty: float = 1.0) -> float:
    """The reward a response of ``length`` tokens loses (DAPO's soft overlong punishment, above), as a
    value to add: 0 or below."""
    start = max_tokens - cache_tokens
    if length <= start:
        return 0.0
    if length > max_tokens:
        return -penalty
    return penalty * (start - length) / cache_tokens


def episode_sampled_tokens(rows: Sequence[TrajectoryRow]) -> dict[str, int]:
    """The tokens the policy sampled in each episode, over all its rows, by episode id."""
    lengths: dict[str, int] = {}
    for row in rows:
        lengths[row.episode_id] = lengths.get(row.episode_id, 0) + sum(1 for m in row.completion_mask if m)
    return lengths
