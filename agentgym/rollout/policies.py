"""Policies that need no model: for testing envs, as baselines and as teachers.

A policy turns the latest observation into the next action. Model-backed
policies (an OpenAI-compatible server) arrive with the env manager.

An action may be a :class:`PlayOnly`: the env plays it and the row records
its tokens, masked out of the loss. :class:`NoisyExpert` plays its random
moves that way, so a demonstration shows the expert recovering from a
mistake without teaching the mistake; :class:`ExpertCorrection` plays a
model's own mistakes that way (DAgger).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, Protocol, Self

import numpy as np

from agentgym.core import TextEnv
from agentgym.errors import ConfigError, PolicyError

__all__ = ["ExpertCorrection", "NoisyExpert", "PlayOnly", "Policy", "RandomPolicy", "ScriptedPolicy",
           "expert_can_go_on"]


class PlayOnly(str):
    """An action the env plays but a model should not learn: recorded with mask 0.

    A plain ``str`` everywhere else (the env, the messages, the row's text).
    """

    __slots__ = ()


def _episode_rng(seed: int | None, key: tuple[int, ...]) -> np.random.Generator:
    """An RNG drawn from ``seed`` and an episode's key, so that concurrent episodes,
    scheduled in any order, repeat their draws on a rerun; unseeded stays unseeded."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng(int(np.random.SeedSequence([seed, *key]).generate_state(1)[0]))


class Policy(Protocol):
    """Anything that can pick an action for an env."""

    def act(self, observation: str, env: TextEnv) -> str:
        """The next action, given the latest observation and the (unwrapped) env."""
        ...


class _RngPerEpisode:
    """``for_episode`` for anything that draws from ``self.rng`` and keeps its ``seed``."""

    seed: int | None
    rng: np.random.Generator

    def for_episode(self, *key: int) -> Self:
        """A copy whose RNG is drawn from this seed and ``key`` (the episode's seed and index).

        The rollout manager plays many episodes at once; one shared RNG would
        hand out draws in scheduling order, so a rerun with the same seed
        would play different moves. Unseeded policies stay unseeded.
        """
        episode_copy = copy.copy(self)
        episode_copy.rng = _episode_rng(self.seed, key)
        return episode_copy


class RandomPolicy(_RngPerEpisode):
    """A random well-formed move (the env's ``random_action``), from its own seeded RNG."""

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)

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


class NoisyExpert(_RngPerEpisode):
    """An expert that, with probability ``noise`` each turn, plays a random move instead.

    Imitation of clean demonstrations compounds its errors: the learner never
    saw a state off the expert's path, so one wrong move leads to states it
    cannot handle (it loops, it bumps into walls). Injecting noise into the
    expert while recording it (DART, Laskey et al. 2017) puts such states in
    the data with the expert's way back as the label. The random moves are
    :class:`PlayOnly`, so they are played and kept in the context but never
    imitated.

    A random move after which the expert could no longer act (a Sokoban box
    pushed into a corner) is not played: up to ``tries`` draws are checked on
    a copy of the env, then the expert moves. The data holds only states the
    expert can still label.
    """

    def __init__(self, expert: Any, noise: float, seed: int | None = None, tries: int = 4) -> None:
        if not 0.0 <= noise < 1.0:
            raise ConfigError(f"The expert's noise is a probability below 1 (1 would never show "
                              f"the expert), got {noise}.")
        self.expert, self.noise, self.seed, self.tries = expert, noise, seed, tries
        self.rng = _episode_rng(seed, ())

    def act(self, observation: str, env: TextEnv) -> str:
        if self.noise and self.rng.random() < self.noise:
            move = self._recoverable_random_move(env)
            if move is not None:
                return PlayOnly(move)
        return self.expert.act(observation, env)

    def _recoverable_random_move(self, env: TextEnv) -> str | None:
        for _ in range(self.tries):
            move = env.random_action(self.rng)
            if expert_can_go_on(self.expert, env, move):
                return move
        return None


def expert_can_go_on(expert: Any, env: TextEnv, action: str) -> bool:
    """Whether ``expert`` could still play after ``action``, tried on a copy of ``env``
    (True too when the action ends the game: nothing is left to label)."""
    trial = copy.deepcopy(env)
    observation, _, terminated, _, _ = trial.step(action)
    if terminated:
        return True
    try:
        expert.act(observation, trial)
    except PolicyError:
        return False
    return True


class ExpertCorrection(_RngPerEpisode):
    """DAgger (Ross et al. 2011): a model plays, an expert says what it should have played.

    Imitation learned from the expert's states alone fails in the states the
    model's own mistakes lead to (a tiny Sokoban model loops against a wall
    it never saw the expert face). Here the model plays and every turn is
    checked against the expert's move from the same position:

    - they agree: the model's turn stands and is learned (it is the expert's move);
    - they disagree: with probability ``model_share`` the model's move is
      played as :class:`PlayOnly` (kept in the context, never learned), so
      the episode goes on into the states its mistakes lead to, where the
      expert's later moves are the labels; otherwise the expert's move is
      played and learned, a label in a state the model reached itself.

    A model move after which the expert could not go on (a box pushed into a
    corner) is never played: the expert's is, and learned.
    """

    def __init__(self, expert: Any, model_share: float, seed: int | None = None) -> None:
        if not 0.0 <= model_share <= 1.0:
            raise ConfigError(f"The model's share of the disagreeing turns is a probability in [0, 1], "
                              f"got {model_share}.")
        self.expert, self.model_share, self.seed = expert, model_share, seed
        self.rng = _episode_rng(seed, ())

    def review(self, action: str, env: TextEnv) -> str | None:
        """None when the model's ``action`` stands (learned); otherwise what to play instead:
        the expert's move (learned) or the model's own as a :class:`PlayOnly`."""
        try:
            expert_action = self.expert.act("", env)
        except PolicyError:  # the expert cannot label this position: play on, learn nothing
            return PlayOnly(action)
        if _same_move(env, action, expert_action):
            return None
        if self.rng.random() < self.model_share and expert_can_go_on(self.expert, env, action):
            return PlayOnly(action)
        return expert_action


def _same_move(env: TextEnv, action: str, other: str) -> bool:
    """Whether two actions are the same move: the same text, or valid actions that
    leave copies of ``env`` in the same state (``<answer> up </answer>`` is ``<answer>Up</answer>``)."""
    if action.strip() == other.strip():
        return True
    states = []
    for move in (action, other):
        trial = copy.deepcopy(env)
        _, _, _, _, info = trial.step(move)
        if not info.get("action_valid", True):
            return False
        states.append(trial.render_text())
    return states[0] == states[1]
