"""The episodes a training run plays: each step's rollout, and the format warm-up's.

Every step plays new seeds (``TrainConfig.step_seeds``; or levels from a file) and seeds the
server's sampler per turn, so a rerun (or a resumed run) plays the very same
episodes. A step's extra rounds (DAPO's dynamic sampling, ``round`` 1, 2, ...) play seeds of their
own (``TrainConfig.refill_seeds``), their groups numbered after the step's. The format warm-up's episodes come from the env's own random
well-formed policy (``env.random_action``): they teach the action format,
not the answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentgym.errors import ConfigError
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policies import RandomPolicy
from agentgym.rollout.policy import OpenAIPolicy, SamplingConfig
from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.loop.sources import episode_stats

__all__ = ["StepRollout", "collect_step", "format_warmup_rows", "play_step", "rollout_config", "round_rows"]

_WARMUP_SEED_OFFSET = 1_000_000  # warm-up seeds never meet the training steps' seeds


@dataclass
class StepRollout:
    """The rows of one step and what happened while playing them."""

    rows: list[TrajectoryRow]
    seconds: float
    stats: dict[str, float] = field(default_factory=dict)


def rollout_config(config: Any, step: int, round: int = 0, **changes: Any) -> RolloutConfig:
    """The :class:`RolloutConfig` of ``step`` (its extra ``round``, for dynamic sampling): new seeds each
    step and round, seeded sampling.

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
        "seeds": config.refill_seeds(step, round) if round else config.step_seeds(step),
        "sampling_seed": config.run.seed * 7_777 + step + round * 1_000_003,
    }
    return RolloutConfig(**{**values, **changes})


def round_rows(rows: list[TrajectoryRow], round: int, groups_per_step: int) -> list[TrajectoryRow]:
    """An extra round's rows, their groups numbered after the step's earlier rounds' (and their episode
    ids marked), so no two groups of a step share a key even when a level comes twice."""
    if not round:
        return rows
    return [row.model_copy(update={"group_id": row.group_id + round * groups_per_step,
                                   "episode_id": f"{row.episode_id}/r{round}"}) for row in rows]


async def collect_step(config: Any, step: int, policy: OpenAIPolicy,
                       renderer: ChatRenderer, round: int = 0) -> StepRollout:
    """Play ``step``'s ``episodes_per_step`` episodes (of its extra ``round``) with the model behind ``policy``."""
    start = time.perf_counter()
    rows = await EnvManager(rollout_config(config, step, round), policy, renderer=renderer).run()
    rows = round_rows(rows, round, config.rollout.groups_per_step)
    seconds = time.perf_counter() - start
    stats = episode_stats(rows)
    stats["rollout_tokens_per_s"] = stats.get("sampled_tokens", 0.0) / max(seconds, 1e-9)
    return StepRollout(rows=rows, seconds=seconds, stats=stats)


async def play_step(config: Any, step: int, base_url: str, model_name: str,
                    renderer: ChatRenderer, *, api_key: str = "EMPTY",
                    weights_version: Callable[[], int] | None = None, round: int = 0) -> StepRollout:
    """:func:`collect_step` against the server at ``base_url``, requests naming ``model_name``.

    Sampling and connections come from ``config``; ``weights_version``: the version of the weights the
    server has (the weight push knows it), for servers whose answers do not say.
    """
    rollout = config.rollout
    sampling = SamplingConfig(temperature=rollout.temperature, top_p=rollout.top_p, max_tokens=rollout.max_tokens)
    async with OpenAIPolicy(base_url, model_name, api_key=api_key, sampling=sampling,
                            max_connections=rollout.concurrency, weights_version=weights_version) as policy:
        return await collect_step(config, step, policy, renderer, round)


async def format_warmup_rows(config: Any, renderer: ChatRenderer) -> list[TrajectoryRow]:
    """``format_warmup_episodes`` episodes of the env's random well-formed policy, as rows."""
    if config.rollout.env_id is None:
        return []
    rollout = rollout_config(
        config, 0, episodes=config.warmup.episodes_for(config.model.model), group_size=1,
        concurrency=1,  # one at a time: the random policy's draws stay in order
        seed=config.run.seed + _WARMUP_SEED_OFFSET, seeds=None, sampling_seed=None)
    policy = RandomPolicy(seed=config.run.seed)
    return await EnvManager(rollout, policy, renderer=renderer).run()
