"""The episodes a training run plays: each step's rollout, and the format warm-up's.

Every step plays new seeds (``TrainConfig.step_seeds``; or levels from a file) and seeds the
server's sampler per turn, so a rerun (or a resumed run) plays the very same
episodes. The format warm-up's episodes come from the env's own random
well-formed policy (``env.random_action``): they teach the action format,
not the answer.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from agentgym.trainers.settings import TrainConfig

from agentgym.errors import ConfigError
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policies import RandomPolicy
from agentgym.rollout.policy import OpenAIPolicy, SamplingConfig
from agentgym.rollout.rows import TrajectoryRow, first_rows

__all__ = ["OfflineGroups", "StepRollout", "collect_step", "drop_stale", "episode_stats", "format_warmup_rows",
           "play_step", "rollout_config"]

_WARMUP_SEED_OFFSET = 1_000_000  # warm-up seeds never meet the training steps' seeds


@dataclass
class StepRollout:
    """The rows of one step and what happened while playing them."""

    rows: list[TrajectoryRow]
    seconds: float
    stats: dict[str, float] = field(default_factory=dict)


def rollout_config(config: TrainConfig, step: int, **changes: Any) -> RolloutConfig:
    """The :class:`RolloutConfig` of ``step``: new seeds each step, seeded sampling.

    ``changes``: other :class:`RolloutConfig` fields (the format warm-up's episodes and seeds).
    """
    rollout = config.rollout
    if rollout.env_id is None:
        raise ConfigError("Rolling out needs an env (--env ENV).")
    values: dict[str, Any] = {
        "env_id": rollout.env_id, "env_kwargs": dict(rollout.env_kwargs), "episodes": rollout.episodes_per_step,
        "group_size": rollout.group_size, "concurrency": rollout.concurrency, "max_turns": rollout.max_turns,
        "turn_budget": rollout.turn_budget,
        "max_context_tokens": rollout.max_context_tokens, "max_tokens_per_turn": rollout.max_tokens,
        "seeds": config.step_seeds(step), "sampling_seed": config.run.seed * 7_777 + step,
    }
    return RolloutConfig(**{**values, **changes})


async def collect_step(config: TrainConfig, step: int, policy: OpenAIPolicy,
                       renderer: ChatRenderer) -> StepRollout:
    """Play ``step``'s ``episodes_per_step`` episodes with the model behind ``policy``."""
    start = time.perf_counter()
    rows = await EnvManager(rollout_config(config, step), policy, renderer=renderer).run()
    seconds = time.perf_counter() - start
    stats = episode_stats(rows)
    stats["rollout_tokens_per_s"] = stats.get("sampled_tokens", 0.0) / max(seconds, 1e-9)
    return StepRollout(rows=rows, seconds=seconds, stats=stats)


async def play_step(config: TrainConfig, step: int, base_url: str, model_name: str,
                    renderer: ChatRenderer, *, api_key: str = "EMPTY") -> StepRollout:
    """:func:`collect_step` against the server at ``base_url``, requests naming ``model_name``.

    Sampling and connections come from ``config``.
    """
    rollout = config.rollout
    sampling = SamplingConfig(temperature=rollout.temperature, top_p=rollout.top_p, max_tokens=rollout.max_tokens)
    async with OpenAIPolicy(base_url, model_name, api_key=api_key, sampling=sampling,
                            max_connections=rollout.concurrency) as policy:
        return await collect_step(config, step, policy, renderer)


async def format_warmup_rows(config: TrainConfig, renderer: ChatRenderer) -> list[TrajectoryRow]:
    """``format_warmup_episodes`` episodes of the env's random well-formed policy, as rows."""
    if config.rollout.env_id is None:
        return []
    rollout = rollout_config(
        config, 0, episodes=config.warmup.format_warmup_episodes, group_size=1,
        concurrency=1,  # one at a time: the random policy's draws stay in order
        seed=config.run.seed + _WARMUP_SEED_OFFSET, seeds=None, sampling_seed=None)
    policy = RandomPolicy(seed=config.run.seed)
    return await EnvManager(rollout, policy, renderer=renderer).run()


class OfflineGroups:
    """Whole groups of a rollout file, ``episodes_per_step`` episodes a step, round and round.

    Offline training (``--trajectories FILE``) of both backends reads its steps from here,
    so a step trains on the same rows whichever backend runs it.
    """

    def __init__(self, path: str, episodes_per_step: int, rows: list[TrajectoryRow] | None = None) -> None:
        """``rows``: the file's rows as the learner read them (None: read ``path`` as a rollout file)."""
        from agentgym.rollout.storage import read_rows

        groups: OrderedDict[tuple[str, int, int], list[TrajectoryRow]] = OrderedDict()
        for row in read_rows(path) if rows is None else rows:
            if row.error is None:
                groups.setdefault((row.env_id, row.seed, row.group_id), []).append(row)
        if not groups:
            raise ConfigError(f"{path!r} holds no usable rows (all failed, or the file is empty).")
        self.path = path
        self.groups = list(groups.values())
        self.episodes_per_step = episodes_per_step
        self._starts = [0]  # the group each step starts at, as far as walked

    def take(self, position: int) -> tuple[list[TrajectoryRow], int]:
        """The rows of the next step from group ``position`` on, and the position after them."""
        rows: list[TrajectoryRow] = []
        episodes = 0
        while episodes < self.episodes_per_step:
            group = self.groups[position % len(self.groups)]
            rows += group
            episodes += len({row.episode_id for row in group})
            position += 1
        return rows, position % len(self.groups)

    def rows_of_step(self, step: int) -> list[TrajectoryRow]:
        """The rows training step ``step`` takes (a resumed run starts at any step)."""
        while len(self._starts) <= step:
            self._starts.append(self.take(self._starts[-1])[1])
        return self.take(self._starts[step])[0]


def drop_stale(rows: list[TrajectoryRow], version: int, max_staleness: int) -> tuple[list[TrajectoryRow], int]:
    """Rows sampled at most ``max_staleness`` versions before ``version`` (unknown versions kept)."""
    kept = [row for row in rows
            if row.policy_version is None or version - row.policy_version <= max_staleness]
    return kept, len(rows) - len(kept)


def episode_stats(rows: list[TrajectoryRow]) -> dict[str, float]:
    """Mean reward, success rate, valid-action rate, turns and sampled tokens of the episodes."""
    episodes = first_rows(rows)
    if not episodes:
        return {}
    count = len(episodes)
    turns = max(sum(row.num_turns for row in episodes), 1)
    return {
        "episodes": float(count),
        "reward": sum(row.reward for row in episodes) / count,
        "success": sum(row.success for row in episodes) / count,
        "valid_actions": 1.0 - sum(row.invalid_actions for row in episodes) / turns,
        "turns": turns / count,
        "sampled_tokens": float(sum(sum(row.completion_mask) for row in rows)),
        "completion_tokens": sum(sum(row.completion_mask) for row in rows) / count,
        "errors": float(sum(row.error is not None for row in episodes)),
    }
