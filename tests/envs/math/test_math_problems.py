"""The problem generator: every problem's reference answer is right, by an independent check."""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest

from agentgym.envs.math.problems import KINDS, LEVELS, MathProblem, format_number, generate_problem
from agentgym.errors import ConfigError

SEEDS = range(40)


def _value(text: str) -> Fraction:
    """A reference answer ("42", "-2.5", "7/3") as a Fraction."""
    return Fraction(text)


def _evaluate(expression: str) -> Fraction:
    """An arithmetic expression over integers, exactly (test-side: eval of our own text)."""
    python = re.sub(r"\d+", lambda m: f"Fraction({m.group()})", expression)
    return eval(python, {"Fraction": Fraction})  # generated text: digits, + - * / and parentheses


def _problems(kind: str, level: int) -> list[MathProblem]:
    return [generate_problem(np.random.default_rng(seed), kind, level) for seed in SEEDS]


@pytest.mark.parametrize("level", LEVELS)
def test_arithmetic_answers_are_the_expression_value(level: int) -> None:
    for problem in _problems("arithmetic", level):
        expression = problem.question.removeprefix("Compute ").removesuffix(".")
        value = _evaluate(expression.replace("×", "*").replace("÷", "/"))
        assert value == _value(problem.answer) and value.denominator == 1, problem
        if level < 5:
            assert value >= 0, problem


@pytest.mark.parametrize("level", LEVELS)
def test_fraction_answers_are_the_expression_value_in_lowest_terms(level: int) -> None:
    for problem in _problems("fractions", level):
        latex = problem.question.split("$")[1]
        python = re.sub(r"\\frac\{(\d+)\}\{(\d+)\}", r"(\1/\2)", latex)
        value = _evaluate(python.replace(r"\times", "*").replace(r"\div", "/"))
        assert value == _value(problem.answer), problem
        assert problem.answer == str(value), problem  # numerator/denominator, reduced


@pytest.mark.parametrize("level", LEVELS)
def test_linear_answers_solve_the_equation(level: int) -> None:
    for problem in _problems("linear", level):
        equation = re.search(r"Solve for x: (.*?)\.", problem.question).group(1)
        python = re.sub(r"(\d)\s*(x|\()", r"\1*\2", equation)
        left, right = python.split("=")
        x = _value(problem.answer)
        assert _evaluate(left.replace("x", f"({x})")) == _evaluate(right.replace("x", f"({x})")), problem


# Each word template, read back: a pattern of its numbers and the answer they give.
_WORD_CHECKS = [
    (r"buys (\d+) \w+ at \$(\d+) each\. How many dollars does", lambda n, p: n * p),
    (r"has (\d+) \w+ and shares them equally among (\d+)", lambda total, k: Fraction(total, k)),
    (r"buys (\d+) \w+ at \$(\d+) each and pays with a \$(\d+) bill", lambda n, p, b: b - n * p),
    (r"at (\d+) km per hour for (\d+) hours\. ", lambda v, t: v * t),
    (r"at (\d+) km per hour for (\d+) hours and 30 minutes", lambda v, t: v * (t + Fraction(1, 2))),
    (r"is (\d+) times as old as \w+\. In (\d+) years the sum of their ages will be (\d+)",
     lambda k, y, s: Fraction(s - 2 * y, k + 1)),
    (r"costs \$(\d+)\. It is sold at (\d+)% off", lambda p, d: Fraction(p * (100 - d), 100)),
    (r"is (\d+) cm longer than it is wide, and its perimeter is (\d+) cm",
     lambda more, per: Fraction(per // 2 - more, 2) * (Fraction(per // 2 - more, 2) + more)),
    (r"reads (\d+) pages on Monday, twice as many on Tuesday, and (\d+) fewer",
     lambda m, f: 5 * m - f),
    (r"has (\d+) \w+\. It sells (\d+)% of them in the morning and (\d+)% of the rest",
     lambda n, a, b: n * Fraction(100 - a, 100) * Fraction(100 - b, 100)),
    (r"fills a tank in (\d+) hours and another fills it in (\d+) hours",
     lambda a, b: Fraction(a * b, a + b)),
]


@pytest.mark.parametrize("level", LEVELS)
def test_word_problem_answers_follow_from_their_numbers(level: int) -> None:
    for problem in _problems("word", level):
        matches = [(re.search(pattern, problem.question), rule) for pattern, rule in _WORD_CHECKS]
        found = [(m, rule) for m, rule in matches if m]
        assert len(found) == 1, problem
        match, rule = found[0]
        expected = rule(*(int(g) for g in match.groups()))
        assert _value(problem.answer) == expected and expected > 0, problem


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_rng_state_gives_the_same_problem_and_seeds_vary(kind: str) -> None:
    first = [generate_problem(np.random.default_rng(seed), kind, 3) for seed in range(20)]
    again = [generate_problem(np.random.default_rng(seed), kind, 3) for seed in range(20)]
    assert first == again
    assert len({problem.question for problem in first}) >= 15


def test_arithmetic_levels_use_more_numbers() -> None:
    def numbers(level: int) -> float:
        return np.mean([len(re.findall(r"\d+", p.question)) for p in _problems("arithmetic", level)])

    counts = [numbers(level) for level in LEVELS]
    assert counts == sorted(counts) and counts[0] < counts[-1]


@pytest.mark.parametrize(("value", "text"), [
    (Fraction(42), "42"), (Fraction(-5, 2), "-2.5"), (Fraction(1, 8), "0.125"),
    (Fraction(-1, 8), "-0.125"), (Fraction(7, 3), "7/3"), (Fraction(1, 10**6), "0.000001"),
    (Fraction(1, 10**7), "1/10000000"),
])
def test_format_number(value: Fraction, text: str) -> None:
    assert format_number(value) == text


def test_unknown_kind_or_level_is_a_config_error() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match=r"kind must be one of .*'arithmetic'.*got 'algebra'"):
        generate_problem(rng, "algebra", 1)
    with pytest.raises(ConfigError, match=r"level must be one of \(1, 2, 3, 4, 5\), got 6"):
        generate_problem(rng, "linear", 6)
