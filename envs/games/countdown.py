"""Countdown: reach a target number with the given numbers and + - * /.

The numbers game of the TV show, as TinyZero trains on it. The agent sees a
few numbers and a target and answers with one arithmetic expression::

    Numbers: 25 5 3 7
    Target: 67
    <answer>(25 - 5) * 3 + 7</answer>

Rules: only the given numbers, ``+ - * /``, unary minus and parentheses.
Each given number may be used at most once (a number listed twice may be used
twice); with ``use_all=True`` every number must be used exactly once.
Division is exact: ``7 / 2`` is ``7/2`` and fractions may appear in
intermediate steps, as long as the whole expression equals the target.

The answer is checked by a safe evaluator: it is parsed with :mod:`ast` and
only integer literals, the four operators and unary minus are evaluated, in
exact :class:`~fractions.Fraction` arithmetic (never ``eval``). Its length,
nesting depth and intermediate magnitudes are capped.

Generation: numbers are drawn (uniformly from ``1..max_number``, or as cards
of the TV show's pool of 20 small and 4 large numbers), then combined at
random, two at a time, with operators whose result stays a positive integer
(subtraction larger minus smaller, division only when exact). The result is
the target, kept when it lies in ``[min_target, max_target]`` and is not one
of the numbers; otherwise the draw is repeated. Every puzzle is therefore
solvable; the generator's expression is kept in :attr:`CountdownEnv.solution`
(not shown to the agent).

Reward: 1 for an expression equal to the target (success, the episode ends);
0 for a readable expression with another value (its value is shown and the
agent tries again, up to ``max_turns``); an unreadable expression, a
character or operator that is not allowed, or a number that is not available
is an invalid action (``-format_penalty``).
"""

from __future__ import annotations

import ast
from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np

from agentgym.core import Outcome, TextEnv, check_number
from agentgym.errors import ConfigError
from agentgym.parsing import extract_answer

__all__ = ["CountdownEnv", "ExpressionError", "evaluate_expression", "random_expression"]

#: Longest expression read; longer answers are invalid before parsing, which
#: also bounds the parser's and the evaluator's work.
MAX_EXPRESSION_CHARS = 300
#: Deepest nesting of operators the evaluator follows (it recurses).
MAX_DEPTH = 40
#: Largest numerator or denominator of any intermediate value.
MAX_MAGNITUDE = 10**15

NUMBER_POOLS = ("uniform", "tv")
#: The TV show's cards: two of each small number and four large ones.
_TV_CARDS = tuple(list(range(1, 11)) * 2 + [25, 50, 75, 100])
_ALLOWED_CHARS = frozenset("0123456789+-*/() ")
# Typographic operators that models write; mapped to ASCII before parsing.
_TYPOGRAPHY = str.maketrans({"×": "*", "·": "*", "÷": "/", "−": "-", "–": "-",
                             "\t": " ", "\n": " ", "\r": " "})
_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
# Operators made of allowed characters, refused with a message of their own.
_FORBIDDEN_OPERATORS = {ast.Pow: "powers (**)", ast.FloorDiv: "floor division (//)"}
# Precedence of a generated sub-expression, to print only needed parentheses.
_ATOM, _PRODUCT, _SUM = 3, 2, 1
_MAX_TRIES = 1000


class ExpressionError(ValueError):
    """An answer that is not an allowed expression; the message says why."""


def evaluate_expression(text: str) -> tuple[Fraction, list[int]]:
    """Value of an arithmetic expression and the integers it uses, safely.

    Only integer literals, ``+ - * /``, unary minus and parentheses are
    allowed; ``×``, ``÷`` and ``−`` are read as ``*``, ``/`` and ``-``, and an
    ``= value`` tail is ignored. Raises :class:`ExpressionError` (never
    anything else) when the text is not such an expression.

    >>> evaluate_expression("(25 - 5) * 3 + 7 = 67")
    (Fraction(67, 1), [25, 5, 3, 7])
    """
    text = text.translate(_TYPOGRAPHY).split("=", 1)[0].strip()
    if not text:
        raise ExpressionError("The expression is empty.")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"The expression is longer than {MAX_EXPRESSION_CHARS} characters.")
    bad = sorted(set(text) - _ALLOWED_CHARS)
    if bad:
        shown = " ".join(repr(char) for char in bad[:10])
        raise ExpressionError(
            f"These characters are not allowed: {shown}. Use only whole numbers, "
            "+ - * / and parentheses."
        )
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ExpressionError(
            "The expression could not be read (unbalanced parentheses, a missing number "
            "or operator, or a number with a leading zero?)."
        ) from None
    used: list[int] = []
    return _evaluate(tree.body, used, 0), used


def _evaluate(node: ast.expr, used: list[int], depth: int) -> Fraction:
    if depth > MAX_DEPTH:
        raise ExpressionError(f"The expression is nested more than {MAX_DEPTH} levels deep.")
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, used, depth + 1)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left = _evaluate(node.left, used, depth + 1)
        right = _evaluate(node.right, used, depth + 1)
        return _apply(type(node.op), left, right)
    if isinstance(node, ast.BinOp) and type(node.op) in _FORBIDDEN_OPERATORS:
        raise ExpressionError(
            f"{_FORBIDDEN_OPERATORS[type(node.op)]} are not allowed: use only + - * /."
        )
    if isinstance(node, ast.Call):
        raise ExpressionError("Write * between a number and a parenthesis: 2 * (3 + 4).")
    raise ExpressionError("Only whole numbers, + - * /, unary minus and parentheses are allowed.")


def _apply(op: type[ast.operator], left: Fraction, right: Fraction) -> Fraction:
    if op is ast.Add:
        value = left + right
    elif op is ast.Sub:
        value = left - right
    elif op is ast.Mult:
        value = left * right
    elif right == 0:
        raise ExpressionError("The expression divides by zero.")
    else:
        value = left / right
    if abs(value.numerator) > MAX_MAGNITUDE or value.denominator > MAX_MAGNITUDE:
        raise ExpressionError("An intermediate value is too large.")
    return value


def _show(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value} (a fraction)"


def random_expression(
    numbers: list[int], rng: np.random.Generator
) -> tuple[int, str]:
    """Combine all ``numbers`` at random; return the value and the expression.

    Every intermediate value is a positive integer: subtraction takes the
    larger minus the smaller (never equal), division only divides exactly
    (and never by 1).
    """
    items = [(n, str(n), _ATOM) for n in numbers]
    while len(items) > 1:
        a = items.pop(int(rng.integers(len(items))))
        b = items.pop(int(rng.integers(len(items))))
        if a[0] < b[0]:
            a, b = b, a  # a is the larger: needed by - and /
        ops = ["+", "*"]
        if a[0] != b[0]:
            ops.append("-")
        if b[0] > 1 and a[0] % b[0] == 0:
            ops.append("/")
        items.append(_combine(a, b, ops[int(rng.integers(len(ops)))]))
    return items[0][0], items[0][1]


def _combine(a: tuple[int, str, int], b: tuple[int, str, int], op: str) -> tuple[int, str, int]:
    # Parenthesise a side only where precedence or associativity needs it.
    need_left = _SUM if op in "+-" else _PRODUCT
    need_right = {"+": _SUM, "-": _PRODUCT, "*": _PRODUCT, "/": _ATOM}[op]
    left = a[1] if a[2] >= need_left else f"({a[1]})"
    right = b[1] if b[2] >= need_right else f"({b[1]})"
    value = {"+": a[0] + b[0], "-": a[0] - b[0], "*": a[0] * b[0], "/": a[0] // max(b[0], 1)}[op]
    return value, f"{left} {op} {right}", _SUM if op in "+-" else _PRODUCT


class CountdownEnv(TextEnv):
    """Write an expression over the given numbers that equals the target.

    Args:
        num_numbers: how many numbers are given (2 to 8).
        number_pool: ``"uniform"`` (each number from ``1..max_number``) or
            ``"tv"`` (cards from the TV show: 1..10 twice, 25, 50, 75, 100).
        max_number: largest number of the ``"uniform"`` pool.
        min_target, max_target: range of the target.
        use_all: every number must be used exactly once (else at most once).
        max_turns: attempts before the episode is truncated.
        format_penalty, render_mode: see :class:`~agentgym.core.TextEnv`.

    ``reset(options={"level": {"numbers": [25, 5, 3, 7], "target": 67}})``
    plays a hand-made puzzle (its :attr:`solution` is then ``None``).
    """

    action_format = "<answer>(25 - 5) * 3 + 7</answer>"

    def __init__(
        self,
        *,
        num_numbers: int = 4,
        number_pool: str = "uniform",
        max_number: int = 99,
        min_target: int = 10,
        max_target: int = 999,
        use_all: bool = False,
        max_turns: int = 3,
        format_penalty: float = 0.1,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            max_turns=max_turns, format_penalty=format_penalty, render_mode=render_mode
        )
        check_number("num_numbers", num_numbers, minimum=2, maximum=8)
        check_number("max_number", max_number, minimum=2, maximum=10_000)
        check_number("min_target", min_target, minimum=1)
        check_number("max_target", max_target, minimum=min_target, maximum=10**9)
        if number_pool not in NUMBER_POOLS:
            raise ConfigError(f"number_pool must be one of {NUMBER_POOLS}, got {number_pool!r}.")
        if not isinstance(use_all, bool):
            raise ConfigError(f"use_all must be True or False, got {use_all!r}.")
        self.num_numbers = num_numbers
        self.number_pool = number_pool
        self.max_number = max_number
        self.min_target = min_target
        self.max_target = max_target
        self.use_all = use_all
        self.numbers: list[int] = []
        self.target = 0
        #: The generator's expression for the current puzzle (None for a hand-made level).
        self.solution: str | None = None
        self._available: Counter[int] = Counter()
        self._tries: list[str] = []

    # -- episode ---------------------------------------------------------------

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        level = (options or {}).get("level")
        if level is None:
            self.numbers, self.target, self.solution = self._generate()
        else:
            self.numbers, self.target = _read_level(level)
            self.solution = None
        self._available = Counter(self.numbers)
        self._tries = []
        rule = "exactly once" if self.use_all else "at most once"
        return (
            f"Make the target from the numbers with + - * / and parentheses, using each "
            f"number {rule}.\n{self.render_text()}\n"
            f"Answer like {self.action_format}."
        )

    def _generate(self) -> tuple[list[int], int, str]:
        for _ in range(_MAX_TRIES):
            numbers = self._draw_numbers()
            target, expression = random_expression(numbers, self.np_random)
            if self.min_target <= target <= self.max_target and target not in numbers:
                return numbers, target, expression
        raise ConfigError(
            f"No puzzle with a target in [{self.min_target}, {self.max_target}] was found in "
            f"{_MAX_TRIES} draws: widen min_target/max_target or change max_number."
        )

    def _draw_numbers(self) -> list[int]:
        if self.number_pool == "tv":
            picks = self.np_random.choice(len(_TV_CARDS), size=self.num_numbers, replace=False)
            return [_TV_CARDS[int(i)] for i in picks]
        drawn = self.np_random.integers(1, self.max_number + 1, size=self.num_numbers)
        return [int(n) for n in drawn]

    # -- a turn ----------------------------------------------------------------

    def _play(self, action: str) -> Outcome:
        answer = extract_answer(action)
        if answer is None:
            return self._invalid(f"Write one expression inside <answer></answer>, e.g. "
                                 f"{self.action_format}.")
        try:
            value, used = evaluate_expression(answer)
        except ExpressionError as error:
            return self._invalid(str(error))
        problem = self._number_problem(used)
        if problem is not None:
            return self._invalid(problem)
        shown = " ".join(answer.split())
        info = {"value": str(value)}
        missing = self._available - Counter(used)
        if self.use_all and missing:
            left_out = " ".join(str(n) for n in sorted(missing.elements()))
            return self._wrong(f"{shown} does not use every number (left out: {left_out}).", info)
        if value == self.target:
            return Outcome(f"Correct: {shown} = {self.target}.", 1.0, terminated=True,
                           success=True, info=info)
        return self._wrong(f"{shown} = {_show(value)}, not {self.target}.", info)

    def _number_problem(self, used: list[int]) -> str | None:
        for number, count in Counter(used).items():
            have = self._available[number]
            if have == 0:
                return f"{number} is not one of the numbers {self._numbers_text()}."
            if count > have:
                times = "once" if have == 1 else f"{have} times"
                return f"{number} is used {count} times but may be used only {times}."
        return None

    def _wrong(self, message: str, info: dict[str, Any]) -> Outcome:
        self._tries.append(message)
        return Outcome(f"{message} Try again.\n{self.render_text()}", 0.0, info=info)

    def _invalid(self, message: str) -> Outcome:
        return Outcome(
            f"Invalid answer: {message}\n{self.render_text()}\n"
            f"Answer like {self.action_format}.",
            action_valid=False,
        )

    # -- text ------------------------------------------------------------------

    def _numbers_text(self) -> str:
        return " ".join(str(n) for n in self.numbers)

    def render_text(self) -> str:
        lines = [f"Numbers: {self._numbers_text()}", f"Target: {self.target}"]
        lines += [f"Earlier try: {message}" for message in self._tries]
        return "\n".join(lines)

    def _describe(self) -> str:
        rule = ("every number exactly once" if self.use_all
                else "each number at most once (a number listed twice may be used twice)")
        return (
            "Countdown. You get a few numbers and a target. Write one "
            f"arithmetic expression that equals the target, using {rule}, the operators "
            "+ - * /, unary minus and parentheses. No other numbers, no powers, no "
            "concatenating digits. Division is exact: fractions may appear on the way, "
            "but the whole expression must equal the target.\n"
            f"Answer with the expression inside answer tags, e.g. {self.action_format}\n"
            "Rewards: 1 for an expression equal to the target (the episode ends); 0 for a "
            "valid expression with another value (you see its value and may try again)."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        count = int(rng.integers(1, len(self.numbers) + 1)) if self.numbers else 0
        picks = [self.numbers[int(i)] for i in rng.permutation(len(self.numbers))[:count]]
        if not picks:
            return self.format_action("1")
        return self.format_action(random_expression(picks, rng)[1])

    def _reset_info(self) -> dict[str, Any]:
        return {"target": self.target}


def _read_level(level: Any) -> tuple[list[int], int]:
    """Numbers and target of a hand-made level, ``{"numbers": [...], "target": n}``."""
    if not isinstance(level, dict) or set(level) != {"numbers", "target"}:
        raise ConfigError(
            'options["level"] must be {"numbers": [25, 5, 3, 7], "target": 67}, '
            f"got {level!r}."
        )
    numbers, target = level["numbers"], level["target"]
    if not isinstance(numbers, (list, tuple)) or not 1 <= len(numbers) <= 8:
        raise ConfigError(f'level["numbers"] must be a list of 1 to 8 integers, got {numbers!r}.')
    for number in numbers:
        check_number('level["numbers"] item', number, minimum=1, maximum=10**6)
    check_number('level["target"]', target, minimum=-(10**9), maximum=10**9)
    return [int(n) for n in numbers], int(target)
