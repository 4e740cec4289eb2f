"""Bandit: choosing arms, rewards, shuffling, invalid answers, config."""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401  (registers the ids)
from agentgym.envs.games.bandit import BanditEnv
from agentgym.errors import ConfigError
from fakes import make_game

ID = "Bandit-LLM-v0"


make = partial(make_game, ID, BanditEnv)


def with_order(order: list[str], **kwargs: object) -> BanditEnv:
    env = make(**kwargs)
    env.reset(seed=0, options={"level": order})
    return env


def shown_order(observation: str, names: tuple[str, ...]) -> list[str]:
    return sorted(names, key=observation.index)


# -- rules -------------------------------------------------------------------------


def test_the_risky_arm_is_best_by_default_and_pays_zero_or_one() -> None:
    env = make()
    rewards = []
    for seed in range(400):
        _, info = env.reset(seed=seed)
        assert info["best_arm"] == "Dragon"
        _, reward, terminated, truncated, info = env.step("<answer>Dragon</answer>")
        assert terminated and not truncated and info["success"] and info["action_valid"]
        assert info["chosen_arm"] == info["best_arm"] == "Dragon"
        assert info["expected_reward"] == pytest.approx(0.7)
        rewards.append(reward)
    assert set(rewards) == {0.0, 1.0}
    assert np.mean(rewards) == pytest.approx(0.7, abs=0.08)


def test_the_steady_arm_pays_its_amount_and_is_not_success() -> None:
    env = make()
    env.reset(seed=3)
    observation, reward, terminated, _, info = env.step("<answer>Phoenix</answer>")
    assert reward == pytest.approx(0.3) and terminated
    assert not info["success"] and info["chosen_arm"] == "Phoenix" and info["best_arm"] == "Dragon"
    assert "You chose Phoenix. It paid 0.3." in observation
    assert "Chosen: Phoenix" in env.render_text()


@pytest.mark.parametrize(
    "action", ["<answer>dragon</answer>", "<ANSWER>  DRAGON. </answer>", "I pick <answer>Dragon"]
)
def test_names_are_read_tolerantly(action: str) -> None:
    env = with_order(["Phoenix", "Dragon"])
    *_, info = env.step(action)
    assert info["chosen_arm"] == "Dragon"


def test_positions_follow_the_shown_order() -> None:
    env = with_order(["Dragon", "Phoenix"])
    *_, info = env.step("<answer>1</answer>")
    assert info["chosen_arm"] == "Dragon"
    env = with_order(["Phoenix", "Dragon"])
    *_, info = env.step("<answer> 1. </answer>")
    assert info["chosen_arm"] == "Phoenix"


def test_the_observation_describes_both_arms_in_order() -> None:
    env = make()
    observation, _ = env.reset(options={"level": ["Dragon", "Phoenix"]})
    assert "1. Dragon: pays 1 with probability 70%, otherwise 0." in observation
    assert "2. Phoenix: pays 0.3 every time." in observation
    assert "<answer>" in observation


@pytest.mark.parametrize(
    "action",
    ["Dragon", "<answer>Unicorn</answer>", "<answer>3</answer>", "<answer>0</answer>",
     "<answer></answer>", "<answer>Dragon || Phoenix</answer>", "<answer>²</answer>",
     "<answer>" + "9" * 5000 + "</answer>", "<answer>1000</answer>"],
)
def test_unknown_arms_are_invalid(action: str) -> None:
    env = with_order(["Phoenix", "Dragon"], format_penalty=0.5)
    observation, reward, terminated, truncated, info = env.step(action)
    assert not info["action_valid"] and not info["success"]
    # One turn by default: an unreadable answer ends the episode, unsolved.
    assert reward == pytest.approx(-0.5) and terminated and not truncated
    assert info["best_arm"] == "Dragon" and info["chosen_arm"] == ""
    assert "Invalid answer" in observation and "Phoenix: pays 0.3" in observation


def test_turn_limit_truncates_after_invalid_answers() -> None:
    env = with_order(["Phoenix", "Dragon"], max_turns=2)
    *_, truncated, _ = env.step("no idea")
    assert not truncated
    _, _, terminated, truncated, info = env.step("still no idea")
    assert truncated and not terminated and info["turn"] == 2
    env = with_order(["Phoenix", "Dragon"])
    _, _, terminated, truncated, _ = env.step("no idea")
    assert terminated and not truncated  # single-turn: the one answer ends it


def test_an_invalid_answer_leaves_a_second_try() -> None:
    env = with_order(["Phoenix", "Dragon"], max_turns=2)
    env.step("<answer>Griffin</answer>")
    _, _, terminated, _, info = env.step("<answer>Dragon</answer>")
    assert terminated and info["success"] and info["turn"] == 2


def test_more_arms_and_custom_payoffs() -> None:
    env = make(arm_names=("Red", "Green", "Blue"), payouts=(1.8, 5.0, 1.0),
               probabilities=(0.5, 0.1, 1.0), shuffle_order=False)
    observation, info = env.reset(seed=0)
    assert info["best_arm"] == "Blue"  # expected 0.9, 0.5 and 1.0
    assert observation.index("Red") < observation.index("Green") < observation.index("Blue")
    *_, info = env.step("<answer>3</answer>")
    assert info["chosen_arm"] == "Blue" and info["success"]


def test_the_reward_is_drawn_through_the_seed() -> None:
    env = make()
    first = []
    for seed in range(30):
        env.reset(seed=seed)
        first.append(env.step("<answer>Dragon</answer>")[1])
    again = []
    for seed in range(30):
        env.reset(seed=seed)
        again.append(env.step("<answer>Dragon</answer>")[1])
    assert first == again and len(set(first)) == 2


# -- shuffling ---------------------------------------------------------------------


def test_shuffle_order_draws_the_order_from_the_seed() -> None:
    env = make()
    orders = [tuple(shown_order(env.reset(seed=s)[0], env.arm_names)) for s in range(200)]
    assert orders == [tuple(shown_order(env.reset(seed=s)[0], env.arm_names)) for s in range(200)]
    assert set(orders) == {("Phoenix", "Dragon"), ("Dragon", "Phoenix")}
    fixed = make(shuffle_order=False)
    assert {tuple(shown_order(fixed.reset(seed=s)[0], fixed.arm_names)) for s in range(50)} == {
        ("Phoenix", "Dragon")
    }


def test_shuffle_payoffs_moves_the_best_arm_between_names() -> None:
    env = make(shuffle_payoffs=True)
    best = set()
    for seed in range(200):
        observation, info = env.reset(seed=seed)
        best.add(info["best_arm"])
        assert f"{info['best_arm']}: pays 1 with probability 70%" in observation
        *_, step_info = env.step(f"<answer>{info['best_arm']}</answer>")
        assert step_info["success"]
    assert best == {"Phoenix", "Dragon"}


def test_random_actions_are_valid() -> None:
    env = make()
    rng = np.random.default_rng(0)
    for seed in range(50):
        env.reset(seed=seed)
        *_, info = env.step(env.random_action(rng))
        assert info["action_valid"]


def test_instructions_give_format_and_rewards() -> None:
    text = make().instructions
    assert "<answer>Phoenix</answer>" in text
    assert "between 0 and 1" in text and "expected payoff" in text


def test_check_env_passes() -> None:
    check_env(gym.make(ID).unwrapped)


# -- config ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"arm_names": "Dragon"}, "arm_names must be a list"),
        ({"arm_names": ("Solo",), "payouts": (1.0,), "probabilities": (1.0,)}, "2 to 10 names"),
        ({"arm_names": ("A", "a")}, "must differ"),
        ({"arm_names": ("A", "2")}, "letter in it"),
        ({"arm_names": ("A", 7)}, "letter in it"),
        ({"payouts": (1.0,)}, "payouts must be a list of 2 numbers"),
        ({"payouts": (1.0, "x")}, "payouts item must be a number"),
        ({"payouts": (1.0, float("nan"))}, "must be a number, got nan"),
        ({"probabilities": (1.0, 1.5)}, "probabilities item must be at most 1"),
        ({"payouts": (0.5, 1.0), "probabilities": (1.0, 0.5)}, "share the best expected payoff"),
        ({"shuffle_order": 1}, "shuffle_order must be True or False"),
        ({"shuffle_payoffs": "no"}, "shuffle_payoffs must be True or False"),
        ({"max_turns": 0}, "max_turns must be at least 1"),
    ],
)
def test_config_errors_name_the_argument(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make(**kwargs)


@pytest.mark.parametrize("level", [["Dragon"], ["Dragon", "Dragon"], "Dragon", ["Dragon", 1]])
def test_bad_levels_are_config_errors(level: object) -> None:
    with pytest.raises(ConfigError, match="level"):
        make().reset(seed=0, options={"level": level})
