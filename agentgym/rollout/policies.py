"""Policies that need no model: for testing envs and as baselines.

A policy turns the latest observation into the next action. Model-backed
policies (an OpenAI-compatible server) arrive with the env manager.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from agentgym.core import TextEnv
from agentgym.errors import PolicyError

__all__ = ["Policy", "RandomPolicy", "ScriptedPolicy"]


class Policy(Protocol):
    """Anything that can pick an action for an env."""

    def act(self, observation: str, env: TextEnv) -> str:
        """The next action, given the latest observation and the (unwrapped) env."""
        ...


class RandomPolicy:
    """A random well-formed move (the env's ``random_action``), from its own seeded RNG."""

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def for_episode(self, *key: int) -> RandomPolicy:
        """A copy whose RNG is drawn from this seed and ``key`` (the episode's seed and index).

        The rollout manager plays many episodes at once; one shared RNG would
        hand out draws in scheduling order, so a rerun with the same seed
        would play different moves. Unseeded policies stay unseeded.
        """
        if self.seed is None:
            return RandomPolicy()
        return RandomPolicy(seed=int(np.random.SeedSequence([self.seed, *key]).generate_state(1)[0]))

    def act(self, observation: str, env: TextEnv) -> str:
        return env.random_action(self.rng)


class ScriptedPolicy:
    """Plays a fixed list of actions in order, or asks ``script(observation)``.

    >>> ScriptedPolicy(["<answer>Up</answer>"]).act("...", env=None)
    '<answer>Up</answer>'
    """

    def __init__(self, script: Sequence[str] | Callable[[str], str]) -> None:
        self.script = script
        self.position = 0

    def act(self, observation: str, env: TextEnv | None) -> str:
        if callable(self.script):
            return self.script(observation)
        if self.position >= len(self.script):
            raise PolicyError(
                f"ScriptedPolicy ran out of actions after {len(self.script)}; "
                "give it more actions or a function."
            )
        self.position += 1
        return self.script[self.position - 1]
