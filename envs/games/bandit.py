"""Bandit: choose one of two described arms; the simplest env to learn.

A single-turn decision, the "hello world" of RL for language models. The
agent reads what each arm pays and names one::

    1. Phoenix: pays 0.3 every time.
    2. Dragon: pays 1 with probability 70%, otherwise 0.
    <answer>Dragon</answer>

An arm pays ``payout`` with probability ``probability`` and 0 otherwise, so
its expected payoff is ``payout * probability``. The defaults make the choice
clear: a steady arm paying 0.3 and a risky one paying 1 seven times in ten
(expected 0.7).

The answer is the arm's name, case, spaces and punctuation at the ends
ignored, or its number in the list as shown (``1`` or ``2``; the numbers
follow the shown order, which ``shuffle_order`` draws from the seed). Names
that are only digits are refused so the two readings never clash.

Reward: one draw from the chosen arm's payoff (through ``self.np_random``),
and the episode ends. ``info["success"]`` is True when the chosen arm has the
highest expected payoff; ``info`` also holds ``best_arm``, ``chosen_arm`` and
``expected_reward`` (the chosen arm's mean, a low-variance signal). An
unknown arm is an invalid action (``-format_penalty``) and costs a turn.

Turns: one by default, so an episode is one answer (an unreadable one ends
it too, with the format penalty). With ``max_turns`` above 1, a valid answer
still ends the episode at once and the extra turns only let an agent recover
from an unreadable answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agentgym.core import Outcome, TextEnv, check_number
from agentgym.errors import ConfigError
from agentgym.parsing import extract_answer, match_choice, normalize

__all__ = ["BanditEnv"]

_MAX_ARMS = 10


class BanditEnv(TextEnv):
    """Pick the arm with the best expected payoff from its description.

    Args:
        arm_names: names of the arms (2 to 10, distinct, not only digits).
        payouts: what each arm pays when it pays (same length as ``arm_names``).
        probabilities: chance in [0, 1] that each arm pays.
        shuffle_order: list the arms in an order drawn from the seed.
        shuffle_payoffs: deal the payoffs to the names at random each episode,
            so the name alone does not tell the best arm (harder).
        max_turns: answers allowed; only invalid answers use more than one.
        format_penalty, render_mode: see :class:`~agentgym.core.TextEnv`.

    ``reset(options={"level": ["Dragon", "Phoenix"]})`` lists the arms in that
    order, each with its configured payoff.
    """

    action_format = "<answer>NAME</answer>"

    def __init__(
        self,
        *,
        arm_names: Sequence[str] = ("Phoenix", "Dragon"),
        payouts: Sequence[float] = (0.3, 1.0),
        probabilities: Sequence[float] = (1.0, 0.7),
        shuffle_order: bool = True,
        shuffle_payoffs: bool = False,
        max_turns: int = 1,
        format_penalty: float = 0.1,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            max_turns=max_turns, format_penalty=format_penalty, render_mode=render_mode
        )
        self.arm_names = _check_names(arm_names)
        self.payouts = _check_floats("payouts", payouts, len(self.arm_names), -1e6, 1e6)
        self.probabilities = _check_floats(
            "probabilities", probabilities, len(self.arm_names), 0.0, 1.0
        )
        for name, flag in (("shuffle_order", shuffle_order), ("shuffle_payoffs", shuffle_payoffs)):
            if not isinstance(flag, bool):
                raise ConfigError(f"{name} must be True or False, got {flag!r}.")
        means = [p * q for p, q in zip(self.payouts, self.probabilities)]
        if means.count(max(means)) > 1:
            raise ConfigError(
                f"Two arms share the best expected payoff (payout * probability = {means}): "
                "change payouts or probabilities so one arm is best."
            )
        self.shuffle_order = shuffle_order
        self.shuffle_payoffs = shuffle_payoffs
        self._keys = {normalize(name): i for i, name in enumerate(self.arm_names)}
        #: Arm indices in the order shown; payoff index of each arm.
        self._order: list[int] = []
        self._payoff_of: list[int] = list(range(len(self.arm_names)))
        self._chosen: int | None = None

    # -- episode ---------------------------------------------------------------

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        n = len(self.arm_names)
        level = (options or {}).get("level")
        self._payoff_of = list(range(n))
        if level is not None:
            self._order = self._read_level(level)
        else:
            if self.shuffle_payoffs:
                self._payoff_of = [int(i) for i in self.np_random.permutation(n)]
            self._order = (
                [int(i) for i in self.np_random.permutation(n)] if self.shuffle_order
                else list(range(n))
            )
        self._chosen = None
        example = self.format_action(self.arm_names[self._order[0]])
        return (
            f"Choose one arm; it pays out once.\n{self.render_text()}\n"
            f"Answer with the arm's name, e.g. {example}."
        )

    def _read_level(self, level: Any) -> list[int]:
        if not isinstance(level, (list, tuple)) or not all(isinstance(x, str) for x in level):
            raise ConfigError(f'options["level"] must be a list of arm names, got {level!r}.')
        order = [self._keys.get(normalize(name), -1) for name in level]
        if sorted(order) != list(range(len(self.arm_names))):
            raise ConfigError(
                f'options["level"] must name every arm of {list(self.arm_names)} once, '
                f"got {list(level)!r}."
            )
        return order

    # -- a turn ----------------------------------------------------------------

    def _play(self, action: str) -> Outcome:
        best = self.arm_names[self._best_arm()]
        answer = extract_answer(action)
        arm = None if answer is None else self._match(answer)
        if arm is None:
            said = "no <answer></answer> tag" if answer is None else f"{answer[:50]!r}"
            return Outcome(
                f"Invalid answer ({said}): name one of the arms.\n{self.render_text()}\n"
                f"Answer like {self.format_action(self.arm_names[self._order[0]])}.",
                action_valid=False,
                info={"best_arm": best, "chosen_arm": ""},
            )
        self._chosen = arm
        payoff = self._payoff_of[arm]
        mean = self.payouts[payoff] * self.probabilities[payoff]
        # Draw even for a sure arm, so the random stream does not depend on the choice.
        paid = self.np_random.random() < self.probabilities[payoff]
        reward = self.payouts[payoff] if paid else 0.0
        name = self.arm_names[arm]
        return Outcome(
            f"You chose {name}. It paid {reward:g}.",
            reward,
            terminated=True,
            success=name == best,
            info={"best_arm": best, "chosen_arm": name, "expected_reward": mean},
        )

    def _match(self, answer: str) -> int | None:
        key = normalize(answer)
        # ASCII and short: int() refuses other scripts' digits and huge numbers.
        if key.isascii() and key.isdigit() and len(key) <= 3:
            position = int(key) - 1
            return self._order[position] if 0 <= position < len(self._order) else None
        return match_choice(key, self._keys)

    def _best_arm(self) -> int:
        means = [self.payouts[p] * self.probabilities[p] for p in self._payoff_of]
        return means.index(max(means))

    # -- text ------------------------------------------------------------------

    def _arm_text(self, arm: int) -> str:
        payoff = self._payoff_of[arm]
        payout, chance = self.payouts[payoff], self.probabilities[payoff]
        if chance == 1.0:
            return f"pays {payout:g} every time"
        if chance == 0.0:
            return "never pays"
        return f"pays {payout:g} with probability {chance * 100:.4g}%, otherwise 0"

    def render_text(self) -> str:
        lines = [
            f"{position}. {self.arm_names[arm]}: {self._arm_text(arm)}."
            for position, arm in enumerate(self._order, start=1)
        ]
        if self._chosen is not None:
            lines.append(f"Chosen: {self.arm_names[self._chosen]}")
        return "\n".join(lines)

    def _describe(self) -> str:
        low = min(0.0, *self.payouts)
        high = max(0.0, *self.payouts)
        return (
            f"Bandit. There are {len(self.arm_names)} arms; each pays a fixed amount with "
            "some probability, as described. Choose the arm with the highest expected "
            "payoff (amount times probability).\n"
            "Answer with the arm's name (or its number in the list) inside answer tags, "
            f"e.g. {self.format_action(self.arm_names[0])}\n"
            f"Reward: one payout drawn from the chosen arm, between {low:g} and {high:g}; "
            "the episode then ends."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        return self.format_action(self.arm_names[int(rng.integers(len(self.arm_names)))])

    def _reset_info(self) -> dict[str, Any]:
        return {"best_arm": self.arm_names[self._best_arm()]}


def _check_names(names: Any) -> tuple[str, ...]:
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise ConfigError(f"arm_names must be a list of names, got {names!r}.")
    if not 2 <= len(names) <= _MAX_ARMS:
        raise ConfigError(f"arm_names must hold 2 to {_MAX_ARMS} names, got {len(names)}.")
    keys = []
    for name in names:
        key = normalize(name) if isinstance(name, str) else ""
        if not key or key.isdigit():
            raise ConfigError(
                f"Each arm name must be text with a letter in it (numbers pick arms by "
                f"position), got {name!r}."
            )
        keys.append(key)
    if len(set(keys)) != len(keys):
        raise ConfigError(f"arm_names must differ (ignoring case), got {list(names)!r}.")
    return tuple(names)


def _check_floats(
    name: str, values: Any, count: int, low: float, high: float
) -> tuple[float, ...]:
    if isinstance(values, str) or not isinstance(values, Sequence) or len(values) != count:
        raise ConfigError(
            f"{name} must be a list of {count} numbers (one per arm), got {values!r}."
        )
    for value in values:
        check_number(f"{name} item", value, minimum=low, maximum=high, integer=False)
    return tuple(float(v) for v in values)
