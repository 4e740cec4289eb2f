"""GuessNumber: hints, wins, invalid guesses, generation, limits, config."""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401  (registers the ids)
from agentgym.envs.games.guess_number import GuessNumberEnv, parse_guess
from agentgym.errors import ConfigError
from fakes import make_game

ID = "GuessNumber-LLM-v0"


make = partial(make_game, ID, GuessNumberEnv)


def with_target(target: int, **kwargs: object) -> GuessNumberEnv:
    env = make(**kwargs)
    env.reset(seed=0, options={"level": target})
    return env


def binary_search(env: GuessNumberEnv) -> tuple[bool, int]:
    """Play binary search on the hints alone; return (success, turns used)."""
    low, high = env.low, env.high
    while True:
        guess = (low + high) // 2
        _, _, terminated, truncated, info = env.step(f"<answer>{guess}</answer>")
        if terminated or truncated:
            return info["success"], info["turn"]
        if info["hint"] == "higher":
            low = guess + 1
        else:
            high = guess - 1


# -- rules -------------------------------------------------------------------------


def test_hints_say_higher_and_lower() -> None:
    env = with_target(37)
    observation, reward, terminated, _, info = env.step("<answer>50</answer>")
    assert info["hint"] == "lower" and info["guess"] == 50
    assert "Lower" in observation and reward == 0.0 and not terminated
    observation, *_, info = env.step("<answer>20</answer>")
    assert info["hint"] == "higher" and "Higher" in observation
    assert "50 (lower), 20 (higher)" in observation


def test_the_right_number_wins() -> None:
    env = with_target(37)
    observation, reward, terminated, truncated, info = env.step("<answer>37</answer>")
    assert terminated and not truncated and info["success"]
    assert reward == 1.0 and info["hint"] == "correct"
    assert "correct" in observation


@pytest.mark.parametrize(
    ("action", "why"),
    [
        ("<answer>42.5</answer>", "not a whole number"),
        ("<answer>forty</answer>", "not a whole number"),
        ("<answer>1 || 2</answer>", "not a whole number"),
        ("<answer></answer>", "not a whole number"),
        ("<answer>" + "9" * 5000 + "</answer>", "not a whole number"),
        ("<answer>0</answer>", "outside the range"),
        ("<answer>101</answer>", "outside the range"),
        ("42", "No <answer>"),
    ],
)
def test_invalid_guesses_cost_the_penalty_and_change_nothing(action: str, why: str) -> None:
    env = with_target(37, format_penalty=0.2)
    observation, reward, terminated, _, info = env.step(action)
    assert info["action_valid"] is False and reward == pytest.approx(-0.2)
    assert not terminated and env.guesses == []
    assert why in observation
    assert "Range: 1 to 100" in observation  # the state is shown again


@pytest.mark.parametrize(
    ("text", "value"),
    [(" 42 ", 42), ("42.", 42), ("+42", 42), ("-7", -7), ("1,000", 1000), ("**12**", 12),
     ("4 2", None), ("1,00", None), ("0x10", None), ("1e3", None), ("", None)],
)
def test_parse_guess(text: str, value: int | None) -> None:
    assert parse_guess(text) == value


def test_negative_ranges_work() -> None:
    env = with_target(-3, low=-10, high=10)
    assert env.step("<answer>-5</answer>")[4]["hint"] == "higher"
    assert env.step("<answer> -3 </answer>")[4]["success"] is True


def test_random_action_is_a_valid_guess() -> None:
    env = make(low=5, high=9)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(5):
        _, _, terminated, truncated, info = env.step(env.random_action(rng))
        assert info["action_valid"] is True and 5 <= info["guess"] <= 9
        if terminated or truncated:
            env.reset()


# -- generation and limits ---------------------------------------------------------


def test_same_seed_same_number_different_seeds_differ() -> None:
    env = make()
    targets = []
    for seed in range(200):
        env.reset(seed=seed)
        targets.append(env.target)
        assert 1 <= env.target <= 100
    again = []
    for seed in range(200):
        env.reset(seed=seed)
        again.append(env.target)
    assert targets == again
    assert len(set(targets)) > 70


@pytest.mark.parametrize(("low", "high"), [(1, 100), (0, 1), (1, 2), (1, 1000), (-64, 63)])
def test_binary_search_always_wins_within_the_default_turn_limit(low: int, high: int) -> None:
    env = make(low=low, high=high)
    for target in range(low, high + 1):
        env.reset(options={"level": target})
        won, _ = binary_search(env)
        assert won, target


def test_default_turn_limit() -> None:
    assert make().max_turns == 10
    assert make(low=1, high=1024).max_turns == 13
    assert make(low=0, high=1).max_turns == 4


def test_the_turn_limit_truncates() -> None:
    env = with_target(37, max_turns=2)
    env.step("<answer>1</answer>")
    observation, reward, terminated, truncated, info = env.step("<answer>2</answer>")
    assert truncated and not terminated and not info["success"] and reward == 0.0
    assert "turn limit" in observation


# -- configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"low": 10, "high": 10}, "high must be greater than low"),
        ({"low": 10, "high": 5}, "high must be greater than low"),
        ({"low": "1"}, "low must be an integer"),
        ({"high": 1.5}, "high must be an integer"),
        ({"high": 10**13}, "high must be at most"),
        ({"max_turns": 0}, "max_turns must be at least 1"),
        ({"format_penalty": -1}, "format_penalty must be at least 0"),
    ],
)
def test_bad_arguments_are_config_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GuessNumberEnv(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"level": 0}, r"options\['level'\] must be at least 1"),
        ({"level": 101}, r"options\['level'\] must be at most 100"),
        ({"level": "5"}, r"options\['level'\] must be an integer"),
        ({"target": 5}, "Unknown reset options"),
    ],
)
def test_bad_reset_options_are_config_errors(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make().reset(options=options)


def test_gymnasium_env_checker_passes() -> None:
    check_env(gym.make(ID, low=-5, high=5).unwrapped)


def test_instructions_give_the_range_format_and_rewards() -> None:
    text = make(low=3, high=30).instructions
    for needle in ("between 3 and 30", "<answer>16</answer>", "higher", "lower", "1 for"):
        assert needle in text
