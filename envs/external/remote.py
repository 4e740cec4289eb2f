"""The text env whose game lives elsewhere (another process, another framework's loop).

:class:`RemoteTextEnv` keeps agentgym's env contract (text in, text out, ``info`` with
``action_valid``, ``success`` and ``turn``; only valid UTF-8; a finished episode refuses
to step) and leaves two calls to its subclass: start an episode there, and play one
move there. What goes wrong over there raises :class:`~agentgym.errors.RemoteEnvError`,
which ends the episode: the rollout manager records it as failed, with the reason.

It is not a :class:`~agentgym.core.TextEnv`: the other side decides the reward (its
penalties included), and when the episode ends, in Gymnasium's two ways.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np

from agentgym.core import MAX_OBSERVATION_CHARS, check_number, clean_observation, cut_action
from agentgym.errors import EnvUsageError, ResetNeeded
from agentgym.spaces import TextSpace

__all__ = ["MAX_REMOTE_ACTION_CHARS", "RemoteStep", "RemoteTextEnv"]

#: The longest action sent: the other side cuts to its own limit (agentgym's: 64k characters).
MAX_REMOTE_ACTION_CHARS = 1_000_000


@dataclass(slots=True)
class RemoteStep:
    """One move as the other side answered it."""

    observation: str
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class RemoteTextEnv(gym.Env[str, str], abc.ABC):
    """A Gymnasium text env played elsewhere; subclasses implement ``_start`` and ``_move``.

    Args:
        max_turns: cut the episode off (truncated) after this many moves, whatever the
            other side says; None leaves the end to it.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    action_format: ClassVar[str] = "plain text"
    #: Bad moves cost what the other side says; agentgym adds nothing (its tool wrapper reads this).
    format_penalty: float = 0.0
    max_action_chars: int = MAX_REMOTE_ACTION_CHARS

    def __init__(self, *, max_turns: int | None = None) -> None:
        if max_turns is not None:
            check_number("max_turns", max_turns, minimum=1)
        self.max_turns = max_turns
        self.observation_space = TextSpace(MAX_OBSERVATION_CHARS)
        self.action_space = TextSpace(self.max_action_chars)
        self.turn = 0
        self._episode_over = True
        self._instructions = ""

    @abc.abstractmethod
    def _start(self, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any], str]:
        """Start an episode there: (first observation, info, instructions)."""

    @abc.abstractmethod
    def _move(self, action: str) -> RemoteStep:
        """Play ``action`` (valid UTF-8) there and say what happened."""

    @property
    def instructions(self) -> str:
        """The system prompt, as the other side gave it at the last reset."""
        return self._instructions

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._episode_over = True  # until the other side has answered
        observation, info, self._instructions = self._start(seed, options)
        self.turn, self._episode_over = 0, False
        return clean_observation(observation), {"turn": 0, "success": False, **info}

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._episode_over:
            raise ResetNeeded(f"{type(self).__name__}.step() needs reset() first, and again after an "
                              "episode ends or fails.")
        if not isinstance(action, str):
            raise EnvUsageError(f"Actions are text: step() needs a str, got {type(action).__name__}.")
        self.turn += 1
        action, _ = cut_action(action, self.max_action_chars)
        self._episode_over = True  # an error there (RemoteEnvError) ends the episode here
        move = self._move(action)
        terminated, truncated = move.terminated, move.truncated
        observation = move.observation
        if not (terminated or truncated) and self.max_turns is not None and self.turn >= self.max_turns:
            truncated = True
            observation += f"\nThe turn limit ({self.max_turns}) is reached: the episode is over."
        self._episode_over = terminated or truncated
        info = {"action_valid": True, "success": False, "turn": self.turn, **move.info}
        return clean_observation(observation), float(move.reward), terminated, truncated, info

    def format_action(self, move: str) -> str:
        """Moves are sent as they are written."""
        return move

    def random_action(self, rng: np.random.Generator) -> str:
        """Random text: the other side's moves are not known here."""
        return TextSpace(64, seed=rng).sample()

    def render(self) -> None:  # type: ignore[override]
        return None
