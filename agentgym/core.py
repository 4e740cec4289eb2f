"""The env contract: a Gymnasium env whose observations and actions are text.

Subclass :class:`TextEnv`, set :attr:`TextEnv.action_format`, and implement
three methods; the base class does the bookkeeping every env needs (turn
counting, max-turn truncation, the format penalty, ``info["action_valid"]``
and ``info["success"]`` on every step, cutting overlong actions, making the
text it passes on valid UTF-8, capping observations, rendering, refusing to
step a finished episode)::

    class Echo(TextEnv):
        def _new_episode(self, options):      # -> first observation (the task)
            return "Say hello."
        def _play(self, action):               # -> Outcome of one turn
            answer = extract_answer(action)
            if answer is None:
                return Outcome("Write <answer>...</answer>.", action_valid=False)
            won = answer.lower() == "hello"
            return Outcome("Well done." if won else "No.", float(won), terminated=won, success=won)
        def _describe(self):                   # -> instructions (system prompt)
            return "Say hello inside <answer></answer>."

Randomness only through ``self.np_random``, seeded by ``reset(seed=...)``.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np

from agentgym.errors import ConfigError, EnvUsageError, ResetNeeded
from agentgym.spaces import TextSpace

__all__ = [
    "MAX_ACTION_CHARS",
    "MAX_OBSERVATION_CHARS",
    "Outcome",
    "TextEnv",
    "check_number",
    "clean_observation",
    "cut_action",
    "utf8_safe",
]

#: Longest observation an env returns; longer text is cut with a marker.
MAX_OBSERVATION_CHARS = 65_536
#: Default of :attr:`TextEnv.max_action_chars`: the longest action a game reads.
#: 64k characters is about 16k tokens: four times the rollout manager's whole
#: default context (4,096 tokens), and far above any move, answer or tool call
#: the envs read. Longer text is cut, so a 10 MB action costs what 64k do. An
#: env whose actions can be longer raises it for itself (Code-LLM-v0, which
#: runs programs of up to 100,000 characters, reads 200,000).
MAX_ACTION_CHARS = 65_536
_CUT_MARKER = "\n[... observation cut ...]"


def utf8_safe(text: str) -> str:
    """``text`` with its surrogates made encodable: ``text.encode("utf-8")`` then never raises.

    A surrogate pair (as a JSON ``\\ud83d\\ude00`` escape decodes) becomes the
    character it stands for; a lone surrogate, which no UTF-8 text can hold,
    becomes U+FFFD, as a decoder with ``errors="replace"`` would make it. Other
    text, control characters and NUL included, is returned unchanged.

    >>> utf8_safe("ok \\ud800 \\ud83d\\ude00") == "ok \\ufffd \\U0001f600"
    True
    """
    if text.isascii():  # the usual case, and free: str knows whether it is ASCII
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Through UTF-16: pairs join into their character, lone halves become U+FFFD.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def clean_observation(text: str, limit: int = MAX_OBSERVATION_CHARS) -> str:
    """``text`` cut to ``limit`` characters (with a marker) and made valid UTF-8."""
    if len(text) > limit:
        text = text[: limit - len(_CUT_MARKER)] + _CUT_MARKER
    return utf8_safe(text)


def cut_action(action: str, limit: int) -> tuple[str, str | None]:
    """``action`` cut to its first ``limit`` characters and made valid UTF-8, with a note.

    The note (None when nothing was cut) tells the agent what was read, for
    the start of the next observation.

    >>> cut_action("abcdef", 4)
    ('abcd', '[Your action was 6 characters long; only the first 4 were read.]')
    """
    note = None
    if len(action) > limit:
        note = (f"[Your action was {len(action):,} characters long; only the first "
                f"{limit:,} were read.]")
        action = action[:limit]
    return utf8_safe(action), note


@dataclass(slots=True)
class Outcome:
    """What a game makes of one action; :class:`TextEnv` adds the bookkeeping.

    ``reward`` is what the action earned in the game; when ``action_valid`` is
    False the env subtracts its ``format_penalty`` on top.
    """

    observation: str
    reward: float = 0.0
    terminated: bool = False
    success: bool = False
    action_valid: bool = True
    info: dict[str, Any] = field(default_factory=dict)


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    integer: bool = True,
) -> None:
    """Raise :class:`ConfigError` naming ``name`` unless ``value`` is in range."""
    kind = "an integer" if integer else "a number"
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or not math.isfinite(value):
        raise ConfigError(f"{name} must be {kind}, got {value!r} ({type(value).__name__}).")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}.")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum}, got {value}.")


class TextEnv(gym.Env[str, str], abc.ABC):
    """Base class of every agentgym environment.

    Args:
        max_turns: turns before the episode is truncated. With 1, the env is
            single-turn: the episode terminates after the one answer.
        format_penalty: subtracted from the reward of a turn whose action could
            not be read or was illegal (a positive number).
        render_mode: ``"ansi"`` (``render()`` returns the state as text),
            ``"human"`` (prints it) or ``None``.
        max_action_chars: the longest action the game reads; ``step`` cuts a
            longer one to its first ``max_action_chars`` characters and says so
            at the start of the observation (``info["action_cut"]`` holds the
            length it had). None: the class's :attr:`max_action_chars`.

    ``step`` hands the game only valid UTF-8 (a lone surrogate becomes U+FFFD)
    and returns only valid UTF-8, so no text an agent writes can make an
    observation, or ``info`` built from the action, fail to encode.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 4}
    #: How an action must be written, in a few words, e.g. ``"<answer>Up</answer>"``.
    action_format: ClassVar[str] = "<answer>...</answer>"
    #: The longest action the game reads (characters); see ``max_action_chars`` above.
    max_action_chars: int = MAX_ACTION_CHARS

    def __init__(
        self,
        *,
        max_turns: int,
        format_penalty: float = 0.1,
        render_mode: str | None = None,
        max_action_chars: int | None = None,
    ) -> None:
        check_number("max_turns", max_turns, minimum=1)
        if max_action_chars is not None:
            check_number("max_action_chars", max_action_chars, minimum=1)
            self.max_action_chars = max_action_chars
        check_number("format_penalty", format_penalty, minimum=0, integer=False)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, "
                f"got {render_mode!r}."
            )
        self.max_turns = max_turns
        self.format_penalty = float(format_penalty)
        self.render_mode = render_mode
        self.observation_space = TextSpace(MAX_OBSERVATION_CHARS)
        self.action_space = TextSpace(self.max_action_chars)
        self.turn = 0
        self._episode_over = True
        self._started = False

    # -- what a game implements ------------------------------------------------

    @abc.abstractmethod
    def _new_episode(self, options: dict[str, Any] | None) -> str:
        """Set up a new episode from ``self.np_random``; return the task text."""

    @abc.abstractmethod
    def _play(self, action: str) -> Outcome:
        """Apply one action (any ``str``) and say what happened. Never raise on text."""

    @abc.abstractmethod
    def _describe(self) -> str:
        """The instructions: the task, the legend, how to write an action, the rewards."""

    def render_text(self) -> str:
        """The current state as text (used by ``render``); games override it."""
        return ""

    def format_action(self, move: str) -> str:
        """Write ``move`` the way this env reads actions (used by ``agentgym play``)."""
        return f"<answer>{move}</answer>"

    def random_action(self, rng: np.random.Generator) -> str:
        """A well-formed random action for the current state (the random policy's move).

        Games override this to pick among their legal moves; the default is
        random text, which most envs will reject as unreadable.
        """
        return TextSpace(64, seed=rng).sample()

    def _reset_info(self) -> dict[str, Any]:
        """Extra ``info`` returned by ``reset``; games may override it."""
        return {}

    # -- the Gymnasium API -----------------------------------------------------

    @property
    def instructions(self) -> str:
        """System prompt: what the task is, how to write an action, turn limit."""
        return (
            f"{self._describe().strip()}\n\n"
            f"You have at most {self.max_turns} turn(s). An action that cannot be read "
            f"or is not allowed is not played and costs {self.format_penalty:g} reward."
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.turn = 0
        self._episode_over = False
        self._started = True
        observation = self._cap(self._new_episode(options))
        if self.render_mode == "human":
            self.render()
        return observation, {"turn": 0, "success": False, **self._reset_info()}

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._episode_over:
            why = "reset()" if not self._started else "reset() after an episode ends"
            raise ResetNeeded(f"{type(self).__name__}.step() needs {why}.")
        if not isinstance(action, str):
            raise EnvUsageError(
                f"Actions are text: step() needs a str, got {type(action).__name__}. "
                "Decode model output to str before stepping."
            )
        self.turn += 1
        original_length = len(action)
        action, cut_note = cut_action(action, self.max_action_chars)
        outcome = self._play(action)
        reward = outcome.reward - (0.0 if outcome.action_valid else self.format_penalty)
        terminated = outcome.terminated
        truncated = not terminated and self.turn >= self.max_turns
        if truncated and self.max_turns == 1:
            # A single-turn task is one answer: after it the episode has truly
            # ended (nothing is cut off), whatever the answer was.
            terminated, truncated = True, False
        observation = outcome.observation
        if cut_note is not None:
            observation = f"{cut_note}\n{observation}"
        if truncated:
            observation += f"\nThe turn limit ({self.max_turns}) is reached: the episode is over."
        self._episode_over = terminated or truncated
        info = {
            "action_valid": outcome.action_valid,
            "success": outcome.success,
            "turn": self.turn,
            **outcome.info,
        }
        if cut_note is not None:
            info["action_cut"] = original_length
        if self.render_mode == "human":
            self.render()
        return self._cap(observation), float(reward), terminated, truncated, info

    def render(self) -> str | None:  # type: ignore[override]
        if self.render_mode is None:
            return None
        text = self.render_text()
        if self.render_mode == "human":
            print(text)
            return None
        return text

    @staticmethod
    def _cap(text: str) -> str:
        return clean_observation(text, MAX_OBSERVATION_CHARS)
