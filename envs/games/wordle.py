"""Wordle: find the hidden five-letter word from letter-by-letter feedback.

The answer is drawn by the seed from a shipped list of about 1,800 common
English words (``data/wordle_words.txt``). Each turn the agent guesses a word,
``<answer>crane</answer>``, and every letter is marked:

* ``G`` (green): the right letter in the right place;
* ``Y`` (yellow): the letter is in the word, in another place;
* ``X`` (gray): the letter is not in the word (or not that many times).

Repeated letters follow the standard two-pass rule: greens are marked first
and use up their letters; then, from left to right, a letter is yellow only
while the answer still has an unused copy of it. Answer ``abbey``, guess
``babes`` gives ``YYGGX``; answer ``crane``, guess ``eerie`` gives ``XXYXG``.

The observation shows the board of earlier guesses and which letters are
known to be in or out of the word (``show_letters``). With
``strict_words=True`` a guess must be in the word list; otherwise any five
letters are a guess. A guess that is not five letters, not alphabetic or (when
strict) not in the list is an invalid action and uses a turn.

Reward: 1 for finding the word (success, the episode ends); 0 per wrong guess.
With ``green_credit > 0`` the last turn's guess, if wrong, earns that much per
green letter (off by default). Running out of ``max_turns`` truncates the
episode and reveals the word.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import numpy as np

from agentgym.core import Outcome, TextEnv, check_number
from agentgym.errors import ConfigError
from agentgym.parsing import MOVE_SEPARATOR, extract_answer, normalize

__all__ = ["WordleEnv", "load_words", "score_guess"]

WORD_LENGTH = 5
_WORDS_FILE = "data/wordle_words.txt"
_LEGEND = "G = right letter, right place; Y = in the word, elsewhere; X = not in the word"


@functools.cache
def load_words() -> tuple[str, ...]:
    """The shipped word list (read once; works from an installed package)."""
    package = __name__.rpartition(".")[0]
    text = resources.files(package).joinpath(_WORDS_FILE).read_text(encoding="utf-8")
    return tuple(word for word in text.split() if word)


@functools.cache
def _word_set() -> frozenset[str]:
    return frozenset(load_words())


def score_guess(guess: str, answer: str) -> str:
    """Marks of ``guess`` against ``answer`` (same length), e.g. ``"XYGXX"``.

    >>> score_guess("babes", "abbey")
    'YYGGX'
    """
    marks = ["X"] * len(guess)
    unused: dict[str, int] = {}
    for i, (g, a) in enumerate(zip(guess, answer)):
        if g == a:
            marks[i] = "G"
        else:
            unused[a] = unused.get(a, 0) + 1
    # Second pass, left to right: a letter is yellow while an unused copy remains.
    for i, g in enumerate(guess):
        if marks[i] == "X" and unused.get(g, 0) > 0:
            marks[i] = "Y"
            unused[g] -= 1
    return "".join(marks)


class WordleEnv(TextEnv):
    """Guess the hidden word in at most ``max_turns`` tries.

    Args:
        strict_words: a guess must be in the word list (else any five letters).
        green_credit: reward per green letter of a wrong guess on the last turn
            (0 to 0.2, so a loss never pays as much as a win); 0 turns it off.
        show_letters: list the letters known to be in or out of the word.
        max_turns: guesses (and invalid answers) before truncation.
        format_penalty, render_mode: see :class:`~agentgym.core.TextEnv`.

    ``reset(options={"level": "abbey"})`` hides that word (any five letters;
    it may be guessed even if it is not in the list).
    """

    action_format = "<answer>crane</answer>"

    def __init__(
        self,
        *,
        strict_words: bool = True,
        green_credit: float = 0.0,
        show_letters: bool = True,
        max_turns: int = 6,
        format_penalty: float = 0.1,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            max_turns=max_turns, format_penalty=format_penalty, render_mode=render_mode
        )
        for name, flag in (("strict_words", strict_words), ("show_letters", show_letters)):
            if not isinstance(flag, bool):
                raise ConfigError(f"{name} must be True or False, got {flag!r}.")
        check_number("green_credit", green_credit, minimum=0, maximum=0.2, integer=False)
        self.strict_words = strict_words
        self.green_credit = float(green_credit)
        self.show_letters = show_letters
        self.words = load_words()
        self.answer = ""
        self.guesses: list[tuple[str, str]] = []

    # -- episode ---------------------------------------------------------------

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        level = (options or {}).get("level")
        if level is None:
            self.answer = self.words[int(self.np_random.integers(len(self.words)))]
        else:
            self.answer = _read_level(level)
        self.guesses = []
        return (
            f"Guess the hidden {WORD_LENGTH}-letter English word.\n{self.render_text()}\n"
            f"Answer like {self.action_format}."
        )

    # -- a turn ----------------------------------------------------------------

    def _play(self, action: str) -> Outcome:
        text = extract_answer(action)
        if text is None:
            return self._invalid(f"Write one guess inside answer tags, e.g. {self.action_format}.")
        if MOVE_SEPARATOR in text:
            return self._invalid("Guess one word per turn.")
        word = "".join(normalize(text).split())
        if len(word) != WORD_LENGTH or not (word.isascii() and word.isalpha()):
            return self._invalid(f"{text[:40]!r} is not a {WORD_LENGTH}-letter word (letters a-z).")
        if self.strict_words and word != self.answer and word not in _word_set():
            return self._invalid(f"{word!r} is not in the word list; guess a common English word.")
        marks = score_guess(word, self.answer)
        self.guesses.append((word, marks))
        info = {"guess": word, "greens": marks.count("G"), "yellows": marks.count("Y")}
        if word == self.answer:
            return Outcome(f"{word.upper()} is right: solved!\n{self.render_text()}", 1.0,
                           terminated=True, success=True, info=info)
        last = self.turn >= self.max_turns
        reward = self.green_credit * marks.count("G") if last else 0.0
        return Outcome(f"{word.upper()} -> {marks}\n{self.render_text()}{self._reveal()}",
                       reward, info=info)

    def _invalid(self, message: str) -> Outcome:
        return Outcome(
            f"Invalid guess: {message}\n{self.render_text()}{self._reveal()}\n"
            f"Answer like {self.action_format}.",
            action_valid=False,
        )

    def _reveal(self) -> str:
        return f"\nThe word was {self.answer.upper()}." if self.turn >= self.max_turns else ""

    # -- text ------------------------------------------------------------------

    def render_text(self) -> str:
        if not self.guesses:
            lines = ["No guesses yet."]
        else:
            lines = [f"Board ({_LEGEND}):"]
            for number, (word, marks) in enumerate(self.guesses, start=1):
                lines.append(f"{number}. {' '.join(word.upper())}")
                lines.append(f"{' ' * len(str(number))}  {' '.join(marks)}")
            if self.show_letters:
                lines += self._letter_lines()
        lines.append(f"Guesses left: {max(self.max_turns - self.turn, 0)}")
        return "\n".join(lines)

    def _letter_lines(self) -> list[str]:
        # A letter's best mark over all guesses: gray twice but green once is in the word.
        best: dict[str, int] = {}
        for word, marks in self.guesses:
            for letter, mark in zip(word, marks):
                best[letter] = max(best.get(letter, 0), "XYG".index(mark))
        inside = sorted(letter for letter, rank in best.items() if rank > 0)
        outside = sorted(letter for letter, rank in best.items() if rank == 0)
        return [
            f"Letters in the word: {', '.join(inside) or 'none yet'}",
            f"Letters not in the word: {', '.join(outside) or 'none yet'}",
        ]

    def _describe(self) -> str:
        words = ("It must be a word from the game's list of common English words."
                 if self.strict_words else "Any five letters are a guess.")
        credit = (f" If your last guess is wrong it earns {self.green_credit:g} per green letter."
                  if self.green_credit else "")
        return (
            f"Wordle. Find the hidden {WORD_LENGTH}-letter English word. Each turn, guess "
            f"one {WORD_LENGTH}-letter word. {words} Every letter of the guess is marked: "
            f"{_LEGEND}. A letter repeated in the guess is marked G or Y only as many times "
            "as it appears in the hidden word (greens first).\n"
            f"Answer with the guess inside answer tags, e.g. {self.action_format}\n"
            f"Rewards: 1 for finding the word (the episode ends), 0 for a wrong guess.{credit}"
        )

    def random_action(self, rng: np.random.Generator) -> str:
        return self.format_action(self.words[int(rng.integers(len(self.words)))])


def _read_level(level: Any) -> str:
    word = level.strip().lower() if isinstance(level, str) else ""
    if len(word) != WORD_LENGTH or not (word.isascii() and word.isalpha()):
        raise ConfigError(
            f'options["level"] must be the hidden word, {WORD_LENGTH} letters a-z, got {level!r}.'
        )
    return word
