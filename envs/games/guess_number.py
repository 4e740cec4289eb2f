"""GuessNumber: find a hidden integer from "higher" / "lower" hints.

A number is drawn uniformly from ``[low, high]`` (inclusive). Each turn the
agent guesses one integer; the env answers "higher" (the hidden number is
greater than the guess), "lower" (it is smaller) or "correct", which ends the
episode. Binary search needs at most ``ceil(log2(high - low + 2))`` guesses;
the default turn limit, ``ceil(log2(high - low + 1)) + 3``, leaves it a little
slack.

Rewards: 1 for the right number, 0 for a wrong guess; a guess that is not an
integer, or lies outside ``[low, high]``, is invalid and costs
``format_penalty``.

A chosen hidden number loads with ``reset(options={"level": 37})``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from agentgym.core import Outcome, TextEnv, check_number
from agentgym.errors import ConfigError
from agentgym.parsing import extract_answer, normalize

__all__ = ["CORRECT_REWARD", "MAX_ABS_BOUND", "GuessNumberEnv", "parse_guess"]

CORRECT_REWARD = 1.0
#: Bounds of ``low`` and ``high``: far beyond any useful game, well inside int64.
MAX_ABS_BOUND = 10**12
# An integer, optionally signed, optionally with thousands separators ("1,000").
_MAX_GUESS_CHARS = 40
_INTEGER = re.compile(r"[+-]?(?:\d+|\d{1,3}(?:,\d{3})+)")


def parse_guess(text: str) -> int | None:
    """The integer in an answer such as ``" 42 "``, ``"42."`` or ``"1,000"``; else None.

    Over 40 characters reads as None too: no allowed range holds such a number.
    """
    token = normalize(text)
    # Length cap first: int() refuses strings of over 4300 digits with a ValueError.
    if len(token) > _MAX_GUESS_CHARS or not _INTEGER.fullmatch(token):
        return None
    return int(token.replace(",", ""))


class GuessNumberEnv(TextEnv):
    """Find the hidden number in ``[low, high]`` from higher / lower hints.

    Args:
        low, high: the hidden number's range, inclusive (``high > low``); the
            width of the range is the difficulty.
        max_turns: turn limit; default ``ceil(log2(high - low + 1)) + 3``
            (10 for 1..100), enough for binary search.
        format_penalty, render_mode: see :class:`~agentgym.core.TextEnv`.
    """

    action_format = "<answer>42</answer>"

    def __init__(
        self,
        *,
        low: int = 1,
        high: int = 100,
        max_turns: int | None = None,
        format_penalty: float = 0.1,
        render_mode: str | None = None,
    ) -> None:
        check_number("low", low, minimum=-MAX_ABS_BOUND, maximum=MAX_ABS_BOUND)
        check_number("high", high, minimum=-MAX_ABS_BOUND, maximum=MAX_ABS_BOUND)
        if high <= low:
            raise ConfigError(
                f"high must be greater than low, got low={low} and high={high}; "
                "raise high or lower low."
            )
        if max_turns is None:
            # (n - 1).bit_length() == ceil(log2(n)) for n >= 1, without float error.
            max_turns = (high - low).bit_length() + 3
        super().__init__(
            max_turns=max_turns, format_penalty=format_penalty, render_mode=render_mode
        )
        self.low, self.high = low, high
        self.target = low
        self.guesses: list[tuple[int, str]] = []

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        options = dict(options or {})
        level = options.pop("level", None)
        if options:
            raise ConfigError(
                f"Unknown reset options {sorted(options)}; GuessNumber takes 'level'."
            )
        if level is None:
            self.target = int(self.np_random.integers(self.low, self.high + 1))
        else:
            check_number("options['level']", level, minimum=self.low, maximum=self.high)
            self.target = level
        self.guesses = []
        return (
            f"I am thinking of an integer between {self.low} and {self.high} (inclusive). "
            "Guess it: after each guess I say whether it is higher or lower. "
            f"You have {self.max_turns} guesses. Answer e.g. <answer>{self._example()}</answer>."
        )

    def _play(self, action: str) -> Outcome:
        answer = extract_answer(action)
        if answer is None:
            return self._invalid(
                f"No <answer>...</answer> found. Write one integer, e.g. "
                f"<answer>{self._example()}</answer>."
            )
        guess = parse_guess(answer)
        if guess is None:
            return self._invalid(
                f"{answer[:80]!r} is not a whole number from {self.low} to {self.high}. "
                f"Write one, e.g. <answer>{self._example()}</answer>."
            )
        if not self.low <= guess <= self.high:
            return self._invalid(
                f"{guess} is outside the range; guess between {self.low} and {self.high}."
            )
        if guess == self.target:
            self.guesses.append((guess, "correct"))
            return Outcome(
                f"{guess} is correct! You found the number in {len(self.guesses)} guesses.",
                reward=CORRECT_REWARD,
                terminated=True,
                success=True,
                info={"guess": guess, "hint": "correct"},
            )
        hint = "higher" if self.target > guess else "lower"
        self.guesses.append((guess, hint))
        bigger = "greater" if hint == "higher" else "smaller"
        return Outcome(
            f"{hint.capitalize()}: the hidden number is {bigger} than {guess}.\n"
            f"{self.render_text()}",
            info={"guess": guess, "hint": hint},
        )

    def _invalid(self, why: str) -> Outcome:
        return Outcome(f"Invalid action: {why}\n{self.render_text()}", action_valid=False)

    def _example(self) -> int:
        return (self.low + self.high) // 2

    def render_text(self) -> str:
        tried = ", ".join(f"{guess} ({hint})" for guess, hint in self.guesses) or "none yet"
        left = max(self.max_turns - self.turn, 0)
        return (
            f"Range: {self.low} to {self.high}. Your guesses: {tried}. "
            f"Turns left: {left}."
        )

    def _describe(self) -> str:
        return (
            f"Find a hidden integer between {self.low} and {self.high} (inclusive). Each turn, "
            "guess one integer inside answer tags, e.g. "
            f"<answer>{self._example()}</answer>. I reply \"higher\" if the hidden number is "
            "greater than your guess, \"lower\" if it is smaller, or \"correct\", which ends "
            "the game. A guess that is not a whole number, or lies outside the range, is "
            "invalid.\n"
            f"Rewards: {CORRECT_REWARD:g} for guessing the number, 0 for a wrong guess."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        return self.format_action(str(int(rng.integers(self.low, self.high + 1))))
