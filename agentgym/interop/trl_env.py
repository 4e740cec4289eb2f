"""Any agentgym env in TRL's ``GRPOTrainer``, through its ``environment_factory``.

TRL (1.x) takes ``environment_factory``: a callable returning an environment object whose
``reset(**row)`` starts an episode (its returned text is appended to the prompt's last
user message), whose public methods are tools the model calls, and whose optional
``get_reward()`` scores the finished rollout. :func:`trl_environment` makes such a class
for an agentgym env; its one tool, ``act``, plays a move::

    from trl import GRPOConfig, GRPOTrainer
    from agentgym.interop.trl_env import trl_dataset, trl_environment

    trainer = GRPOTrainer(model=..., args=GRPOConfig(..., num_generations=4),
                          train_dataset=trl_dataset("Sokoban-LLM-v0", episodes=64),
                          environment_factory=trl_environment("Sokoban-LLM-v0", dim_room=6))

The data set's rows carry the system prompt (the env's instructions) and a ``seed``:
TRL repeats each row ``num_generations`` times, so a GRPO group plays one level. The
reward is the episode's total; the model must call ``act`` in the tool-call format its
chat template parses (TRL's ``response_template``), as with any TRL tool.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import agentgym

__all__ = ["AgentGymTRLEnv", "trl_dataset", "trl_environment"]


class AgentGymTRLEnv:
    """One agentgym env, shaped as TRL's environment: ``reset``, the ``act`` tool, ``get_reward``.

    Subclasses made by :func:`trl_environment` set :attr:`env_id` and :attr:`env_kwargs`.
    """

    env_id: ClassVar[str] = ""
    env_kwargs: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        self.env = agentgym.make(self.env_id, **self.env_kwargs)
        self.total_reward = 0.0
        self.over = True
        self.moves: list[str] = []  # the episode's actions, for reading what the model did

    def reset(self, seed: int | None = None, **row: Any) -> str:
        """Start an episode (of ``seed``, a column of the data set); return its first observation."""
        observation, _ = self.env.reset(seed=seed)
        self.total_reward, self.over, self.moves = 0.0, False, []
        return observation

    def act(self, action: str) -> str:
        """Play one move in the environment and read its reply.

        Args:
            action: The move, written as the instructions say (for example <answer>Up</answer>).

        Returns:
            What the environment answers.
        """
        if self.over:
            return "The episode is over: no more moves are played."
        self.moves.append(action)
        observation, reward, terminated, truncated, _ = self.env.step(action)
        self.total_reward += float(reward)
        self.over = bool(terminated or truncated)
        return f"{observation}\n(The episode is over.)" if self.over else observation

    def get_reward(self) -> float:
        """The episode's total reward so far (TRL calls it once the rollout ends)."""
        return self.total_reward


def trl_environment(env_id: str, **env_kwargs: Any) -> type[AgentGymTRLEnv]:
    """A class for ``GRPOTrainer(environment_factory=...)`` that plays ``env_id`` with ``env_kwargs``.

    The env is built once here, so a bad id or argument fails now, not in the trainer.
    """
    agentgym.make(env_id, **env_kwargs).close()
    name = re.sub(r"\W", "", env_id.replace("-", "_")) or "Env"
    return type(name, (AgentGymTRLEnv,), {"env_id": env_id, "env_kwargs": dict(env_kwargs),
                                           "__doc__": f"{env_id} as a TRL environment."})


def trl_dataset(env_id: str, episodes: int, *, seed: int = 0, **env_kwargs: Any) -> Any:
    """A ``datasets.Dataset`` of ``episodes`` rows for :func:`trl_environment`'s class: each a
    conversational prompt (the env's instructions as the system message, an empty user
    message that ``reset`` fills) and a ``seed`` (``seed``, ``seed + 1``, ...)."""
    from datasets import Dataset

    env = agentgym.make(env_id, **env_kwargs)
    env.reset(seed=seed)
    instructions = env.get_wrapper_attr("instructions")
    env.close()
    prompt = [{"role": "system", "content": instructions}, {"role": "user", "content": ""}]
    return Dataset.from_dict({"prompt": [prompt] * episodes, "seed": [seed + i for i in range(episodes)]})
