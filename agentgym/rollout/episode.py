"""Play one episode with a policy and keep a typed record of every turn.

This is the plain loop for model-free policies; the asynchronous env manager,
which records token ids for training, arrives with the rollout issue.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym

from agentgym.core import TextEnv
from agentgym.rollout.policies import Policy

__all__ = ["EpisodeRecord", "TurnRecord", "play_episode"]


@dataclass(slots=True)
class TurnRecord:
    """One action and what the env said back."""

    action: str
    observation: str
    reward: float
    action_valid: bool


@dataclass(slots=True)
class EpisodeRecord:
    """An episode from reset to its end."""

    env_id: str
    seed: int | None
    instructions: str
    first_observation: str
    turns: list[TurnRecord] = field(default_factory=list)
    success: bool = False
    terminated: bool = False
    truncated: bool = False

    @property
    def total_reward(self) -> float:
        return sum(turn.reward for turn in self.turns)

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def invalid_actions(self) -> int:
        return sum(not turn.action_valid for turn in self.turns)


def play_episode(env: gym.Env, policy: Policy, *, seed: int | None = None) -> EpisodeRecord:
    """Reset ``env`` with ``seed`` and let ``policy`` play until the episode ends."""
    game: TextEnv = env.unwrapped  # type: ignore[assignment]
    observation, _ = env.reset(seed=seed)
    record = EpisodeRecord(
        env_id=env.spec.id if env.spec else type(game).__name__,
        seed=seed,
        instructions=env.get_wrapper_attr("instructions"),  # a wrapper may extend them (tools)
        first_observation=observation,
    )
    while not (record.terminated or record.truncated):
        action = policy.act(observation, game)
        observation, reward, terminated, truncated, info = env.step(action)
        record.turns.append(TurnRecord(action, observation, float(reward), bool(info["action_valid"])))
        record.terminated, record.truncated = terminated, truncated
        record.success = bool(info["success"])
    return record
