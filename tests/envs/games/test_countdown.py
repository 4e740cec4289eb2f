"""Countdown: the safe evaluator, the rules, generation, limits, config."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import agentgym  # noqa: F401  (registers the ids)
from agentgym.envs.games.countdown import (
    MAX_EXPRESSION_CHARS,
    CountdownEnv,
    ExpressionError,
    evaluate_expression,
)
from agentgym.errors import ConfigError
from fakes import make_game

ID = "Countdown-LLM-v0"


make = partial(make_game, ID, CountdownEnv)


def with_level(numbers: list[int], target: int, **kwargs: object) -> CountdownEnv:
    env = make(**kwargs)
    env.reset(seed=0, options={"level": {"numbers": numbers, "target": target}})
    return env


def answer(expression: str) -> str:
    return f"<answer>{expression}</answer>"


# -- the evaluator -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "used"),
    [
        ("(25 - 5) * 3 + 7", Fraction(67), [25, 5, 3, 7]),
        ("2 + 3 * 4", Fraction(14), [2, 3, 4]),
        ("7 / 2", Fraction(7, 2), [7, 2]),
        ("-3 + 10", Fraction(7), [3, 10]),
        ("8 / (3 - 8 / 3)", Fraction(24), [8, 3, 8, 3]),
        ("6 × 4 ÷ 2 − 1", Fraction(11), [6, 4, 2, 1]),
        ("(25-5)*3+7 = 67", Fraction(67), [25, 5, 3, 7]),
        ("  ((((5))))  ", Fraction(5), [5]),
    ],
)
def test_evaluator_computes_exactly(text: str, value: Fraction, used: list[int]) -> None:
    assert evaluate_expression(text) == (value, used)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("__import__('os').system('ls')", "not allowed"),
        ("9**9**9", "powers"),
        ("2 ** 3", "powers"),
        ("7 // 2", "floor division"),
        ("7 % 2", "not allowed"),
        ("1 / 0", "divides by zero"),
        ("5 / (3 - 3)", "divides by zero"),
        ("1.5 + 2", "not allowed"),
        ("1e9", "not allowed"),
        ("0x10", "not allowed"),
        ("2(3 + 4)", r"Write \*"),
        ("(1 + 2", "could not be read"),
        ("1 +", "could not be read"),
        ("05 + 1", "could not be read"),
        ("", "empty"),
        ("= 5", "empty"),
        ("1 + " * 3000 + "1", "longer than"),
        ("(" * 5000 + "1" + ")" * 5000, "longer than"),
        ("(1+" * 50 + "1" + ")" * 50, "nested"),
        ("-" * 200 + "1", "nested"),
        ("99999999 * 99999999 * 99999999", "too large"),
        ("lambda: 1", "not allowed"),
        ("[1, 2]", "not allowed"),
    ],
)
def test_evaluator_refuses_hostile_text(text: str, why: str) -> None:
    with pytest.raises(ExpressionError, match=why):
        evaluate_expression(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789+-*/() ", max_size=MAX_EXPRESSION_CHARS + 20) | st.text())
def test_evaluator_only_ever_raises_expression_error(text: str) -> None:
    try:
        value, used = evaluate_expression(text)
    except ExpressionError:
        return
    assert isinstance(value, Fraction)
    assert all(isinstance(n, int) and n >= 0 for n in used)


# -- rules -------------------------------------------------------------------------


def test_the_right_expression_wins() -> None:
    env = with_level([25, 5, 3, 7], 67)
    observation, reward, terminated, truncated, info = env.step(answer("(25 - 5) * 3 + 7"))
    assert reward == 1.0 and terminated and not truncated
    assert info["success"] and info["action_valid"] and info["value"] == "67"
    assert "Correct" in observation


def test_a_wrong_value_gets_its_value_and_another_try() -> None:
    env = with_level([25, 5, 3, 7], 67)
    observation, reward, terminated, truncated, info = env.step(answer("25 + 5"))
    assert reward == 0.0 and not terminated and not truncated
    assert info["action_valid"] and not info["success"] and info["value"] == "30"
    assert "25 + 5 = 30, not 67" in observation
    assert "Numbers: 25 5 3 7" in observation and "Target: 67" in observation
    observation, reward, terminated, *_ = env.step(answer("25 * 3 - 7 - 5"))
    assert "Earlier try: 25 + 5 = 30" in observation and "= 63, not 67" in observation
    _, reward, terminated, _, info = env.step(answer("(25 - 5) * 3 + 7"))
    assert reward == 1.0 and terminated and info["success"]


def test_fractions_are_shown_and_allowed_on_the_way() -> None:
    env = with_level([3, 3, 8, 8], 24)
    observation, *_ = env.step(answer("8 / 3"))
    assert "8/3 (a fraction)" in observation
    _, reward, terminated, _, _ = env.step(answer("8 / (3 - 8 / 3)"))
    assert reward == 1.0 and terminated


def test_a_number_not_given_is_invalid_and_named() -> None:
    env = with_level([25, 5, 3, 7], 67, format_penalty=0.2)
    observation, reward, terminated, _, info = env.step(answer("60 + 7"))
    assert not info["action_valid"] and reward == pytest.approx(-0.2) and not terminated
    assert "60 is not one of the numbers 25 5 3 7" in observation
    assert "Target: 67" in observation


def test_each_number_at_most_as_often_as_given() -> None:
    env = with_level([5, 5, 3], 13)
    observation, _, _, _, info = env.step(answer("3 + 3 + 5"))
    assert not info["action_valid"] and "3 is used 2 times but may be used only once" in observation
    _, reward, terminated, _, info = env.step(answer("5 + 5 + 3"))
    assert info["action_valid"] and reward == 1.0 and terminated


def test_a_subset_of_the_numbers_is_enough_by_default() -> None:
    env = with_level([25, 5, 3, 7], 30)
    _, reward, terminated, _, _ = env.step(answer("25 + 5"))
    assert reward == 1.0 and terminated


def test_use_all_asks_for_every_number() -> None:
    env = with_level([25, 5, 3, 7], 30, use_all=True)
    observation, reward, terminated, _, info = env.step(answer("25 + 5"))
    assert info["action_valid"] and reward == 0.0 and not terminated
    assert "left out: 3 7" in observation
    _, reward, terminated, _, _ = env.step(answer("25 + 5 * (7 - 3) - 5 * 3"))
    assert not terminated  # uses 5 twice: invalid
    _, reward, terminated, _, info = env.step(answer("25 + 5 + 7 - 3 - 7 + 3"))
    assert not info["action_valid"]


def test_use_all_wins_with_every_number() -> None:
    env = with_level([25, 5, 3, 7], 67, use_all=True)
    _, reward, terminated, _, _ = env.step(answer("(25 - 5) * 3 + 7"))
    assert reward == 1.0 and terminated


@pytest.mark.parametrize(
    "action",
    [
        "<ANSWER> (25-5)*3+7 </answer>",
        "I think <answer>(25 - 5) × 3 + 7 = 67</answer>",
        "<answer>\n(25 - 5)\n* 3 + 7\n</answer>",
        "<answer>(25 - 5) * 3 + 7",
    ],
)
def test_parsing_is_tolerant(action: str) -> None:
    env = with_level([25, 5, 3, 7], 67)
    _, reward, terminated, _, info = env.step(action)
    assert info["success"] and reward == 1.0 and terminated


@pytest.mark.parametrize(
    "action",
    [
        "(25 - 5) * 3 + 7",
        "<answer>__import__('os').system('echo hi')</answer>",
        "<answer>" + "9" * 10_000 + "</answer>",
        "<answer>" + "(" * 5_000 + "25" + ")" * 5_000 + "</answer>",
        "<answer>25 ** 5 ** 3 ** 7</answer>",
        "<answer>25 / (5 - 5)</answer>",
        "<answer>25 + 5 || 3 + 7</answer>",
        "<answer>x" * 10_000,
    ],
)
def test_hostile_answers_are_invalid_feedback(action: str) -> None:
    env = with_level([25, 5, 3, 7], 67)
    observation, reward, terminated, truncated, info = env.step(action)
    assert not info["action_valid"] and not info["success"]
    assert reward == pytest.approx(-0.1) and not terminated and not truncated
    assert "Invalid answer" in observation and "Target: 67" in observation
    assert "<answer>" in observation  # says how to write it


def test_turn_limit_truncates() -> None:
    env = with_level([25, 5, 3, 7], 67, max_turns=2)
    *_, truncated, _ = env.step(answer("25 + 5"))
    assert not truncated
    observation, _, terminated, truncated, _ = env.step(answer("25 + 7"))
    assert truncated and not terminated and "turn limit (2)" in observation


# -- generation --------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"num_numbers": 2, "max_number": 20, "min_target": 1, "max_target": 100},
        {"num_numbers": 6, "number_pool": "tv", "min_target": 100, "max_target": 999},
        {"num_numbers": 5, "use_all": True},
    ],
)
def test_every_generated_puzzle_is_solved_by_its_own_expression(kwargs: dict) -> None:
    env = make(**kwargs)
    for seed in range(200):
        observation, info = env.reset(seed=seed)
        assert env.solution is not None and env.solution not in observation
        assert len(env.numbers) == env.num_numbers and info["target"] == env.target
        assert env.min_target <= env.target <= env.max_target
        assert env.target not in env.numbers
        value, used = evaluate_expression(env.solution)
        assert value == env.target and Counter(used) == Counter(env.numbers)
        _, reward, terminated, _, info = env.step(answer(env.solution))
        assert reward == 1.0 and terminated and info["success"]


def test_number_pools() -> None:
    uniform = make(max_number=9)
    tv = make(number_pool="tv", num_numbers=6, min_target=100)
    tv_cards = Counter(list(range(1, 11)) * 2 + [25, 50, 75, 100])
    for seed in range(50):
        uniform.reset(seed=seed)
        assert all(1 <= n <= 9 for n in uniform.numbers)
        tv.reset(seed=seed)
        assert not Counter(tv.numbers) - tv_cards


def test_same_seed_same_puzzle_different_seeds_differ() -> None:
    env = make()
    first = [(env.reset(seed=s)[0], env.solution) for s in range(20)]
    again = [(env.reset(seed=s)[0], env.solution) for s in range(20)]
    assert first == again
    assert len({observation for observation, _ in first}) == 20


def test_random_actions_are_well_formed() -> None:
    env = make()
    rng = np.random.default_rng(0)
    for seed in range(50):
        env.reset(seed=seed)
        *_, info = env.step(env.random_action(rng))
        assert info["action_valid"]


def test_observation_and_instructions_state_the_rules() -> None:
    env = make(use_all=True)
    observation, _ = env.reset(seed=0)
    assert "exactly once" in observation and "Target:" in observation
    assert "exactly once" in env.instructions and "<answer>" in env.instructions
    assert "1 for an expression equal to the target" in env.instructions
    assert "at most once" in make().instructions


def test_check_env_passes() -> None:
    check_env(gym.make(ID).unwrapped)


# -- config ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_numbers": 1}, "num_numbers must be at least 2"),
        ({"num_numbers": 9}, "num_numbers must be at most 8"),
        ({"number_pool": "cards"}, "number_pool must be one of"),
        ({"max_number": 1}, "max_number must be at least 2"),
        ({"min_target": 0}, "min_target must be at least 1"),
        ({"min_target": 50, "max_target": 40}, "max_target must be at least 50"),
        ({"use_all": "yes"}, "use_all must be True or False"),
        ({"max_turns": 0}, "max_turns must be at least 1"),
    ],
)
def test_config_errors_name_the_argument(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make(**kwargs)


def test_an_impossible_target_range_says_how_to_fix_it() -> None:
    env = make(num_numbers=2, max_number=2, min_target=500, max_target=600)
    with pytest.raises(ConfigError, match="widen min_target/max_target"):
        env.reset(seed=0)


@pytest.mark.parametrize(
    "level",
    [
        [1, 2, 3],
        {"numbers": [1, 2]},
        {"numbers": "1 2", "target": 3},
        {"numbers": [1, 0], "target": 3},
        {"numbers": [1, 2], "target": 2.5},
    ],
)
def test_bad_levels_are_config_errors(level: object) -> None:
    with pytest.raises(ConfigError, match="level"):
        make().reset(seed=0, options={"level": level})
