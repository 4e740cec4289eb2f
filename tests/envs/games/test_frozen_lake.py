"""FrozenLake: rules on hand-made lakes, generation, determinism, limits, config."""

from __future__ import annotations

from collections import Counter, deque
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401  (registers the ids)
from agentgym.envs.games.frozen_lake import FrozenLakeEnv
from agentgym.errors import ConfigError
from fakes import make_game

ID = "FrozenLake-LLM-v0"
STEPS = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}


make = partial(make_game, ID, FrozenLakeEnv)


def load(level: str, **kwargs: object) -> FrozenLakeEnv:
    env = make(**kwargs)
    env.reset(seed=0, options={"level": level})
    return env


def grid(env: FrozenLakeEnv) -> list[list[str]]:
    return [row.split() for row in env.render_text().splitlines()]


def find(env: FrozenLakeEnv, symbol: str) -> tuple[int, int]:
    return next((r, c) for r, row in enumerate(grid(env)) for c, s in enumerate(row) if s == symbol)


def solve(rows: list[list[str]]) -> list[str] | None:
    """Test-side BFS on a rendered grid: shortest moves from P to G avoiding H."""
    height, width = len(rows), len(rows[0])
    start = next((r, c) for r in range(height) for c in range(width) if rows[r][c] == "P")
    came: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if rows[cell[0]][cell[1]] == "G":
            path = []
            while came[cell] is not None:
                cell, move = came[cell]  # type: ignore[misc]
                path.append(move)
            return path[::-1]
        for move, (dr, dc) in STEPS.items():
            r, c = cell[0] + dr, cell[1] + dc
            if 0 <= r < height and 0 <= c < width and (r, c) not in came and rows[r][c] != "H":
                came[(r, c)] = (cell, move)
                queue.append((r, c))
    return None


# -- rules -------------------------------------------------------------------------


def test_a_move_walks_one_cell() -> None:
    env = load("SFF\nFFF\nFFG")
    observation, reward, terminated, truncated, info = env.step("<answer>Right</answer>")
    assert find(env, "P") == (0, 1)
    assert grid(env)[0][0] == "S"
    assert "moved to row 1, column 2" in observation
    assert (reward, terminated, truncated, info["action_valid"]) == (0.0, False, False, True)


def test_walking_off_the_edge_stays_put_and_is_valid() -> None:
    env = load("SFF\nFFF\nFFG")
    observation, reward, _, _, info = env.step("<answer>Up</answer>")
    assert find(env, "P") == (0, 0)
    assert "edge" in observation
    assert info["action_valid"] is True and reward == 0.0


def test_falling_into_a_hole_loses() -> None:
    env = load("SHF\nFFF\nFFG")
    observation, reward, terminated, _, info = env.step("<answer>Right</answer>")
    assert terminated and not info["success"]
    assert reward == 0.0
    assert grid(env)[0][1] == "X"
    assert "hole" in observation


def test_reaching_the_goal_wins() -> None:
    env = load("SFG\nFHF")
    _, reward, terminated, _, info = env.step("<answer>Right || Right</answer>")
    assert terminated and info["success"]
    assert reward == 1.0
    assert grid(env)[0][2] == "W"


def test_moves_in_one_turn_run_in_order_and_stop_at_the_end_of_the_episode() -> None:
    env = load("SFF\nFFH\nFFG")
    action = "<answer>Right || Right || Down || Down</answer>"
    observation, _, terminated, _, info = env.step(action)
    assert terminated and not info["success"]
    assert info["moves"] == 3
    assert "1 move(s) not played" in observation


def test_a_bad_move_stops_the_turn_but_keeps_the_moves_before_it() -> None:
    env = load("SFF\nFFF\nFFG", format_penalty=0.2)
    observation, reward, terminated, _, info = env.step("<answer>Down || jump || Right</answer>")
    assert find(env, "P") == (1, 0)
    assert info["action_valid"] is False and info["moves"] == 1
    assert reward == pytest.approx(-0.2) and not terminated
    assert "'jump' is not a move" in observation
    assert "P" in observation  # the state is shown again


def test_moves_beyond_the_per_turn_limit_are_ignored_and_the_action_is_invalid() -> None:
    env = load("SFF\nFFF\nFFG", max_moves_per_turn=2, format_penalty=0.2)
    observation, reward, _, _, info = env.step("<answer>Down || Down || Right</answer>")
    assert info["action_valid"] is False and info["moves"] == 2
    assert find(env, "P") == (2, 0)  # the first two moves were made, Right was not
    assert reward == pytest.approx(-0.2)
    assert "At most 2 moves per turn; the other 1 were ignored." in observation


@pytest.mark.parametrize(
    "action",
    [
        "<answer>Down</answer>",
        "<ANSWER> down </ANSWER>",
        "<answer>D</answer>",
        "<answer>DOWN.</answer>",
        "thinking... <answer>d",
        "<answer>up</answer> no: <answer>Down</answer>",
    ],
)
def test_moves_are_read_tolerantly(action: str) -> None:
    env = load("SFF\nFFF\nFFG")
    _, _, _, _, info = env.step(action)
    assert info["action_valid"] is True
    assert find(env, "P") == (1, 0)


@pytest.mark.parametrize("action", ["Down", "<answer></answer>", "<answer>||</answer>",
                                    "<answer>Down Down</answer>", "<answer>north</answer>"])
def test_unreadable_actions_are_invalid_and_change_nothing(action: str) -> None:
    env = load("SFF\nFFF\nFFG")
    observation, reward, terminated, _, info = env.step(action)
    assert info["action_valid"] is False and reward == pytest.approx(-0.1)
    assert find(env, "P") == (0, 0) and not terminated
    assert "Invalid action" in observation and "<answer>" in observation


def test_slippery_moves_go_straight_or_sideways_a_third_each() -> None:
    env = make(is_slippery=True)
    outcomes: Counter[tuple[int, int]] = Counter()
    for seed in range(600):
        env.reset(seed=seed, options={"level": "GFF\nFSF\nFFF"})
        env.step("<answer>Up</answer>")
        outcomes[find(env, "P")] += 1
    assert set(outcomes) == {(0, 1), (1, 0), (1, 2)}  # up, left, right; never down
    assert all(150 < count < 250 for count in outcomes.values())


def test_slippery_play_is_deterministic_given_the_seed() -> None:
    def play(seed: int) -> list[str]:
        env = make(is_slippery=True, hole_probability=0.0, size=8)
        env.reset(seed=seed)
        # Up and Left bump the edge unless the ice slides: at most 10 cells from the start.
        return [env.step("<answer>Up || Left</answer>")[0] for _ in range(5)]

    assert play(3) == play(3)
    assert len({tuple(play(seed)) for seed in range(6)}) > 1


def test_random_action_is_a_valid_move() -> None:
    env = make()
    env.reset(seed=0)
    for seed in range(20):
        action = env.random_action(np.random.default_rng(seed))
        _, _, terminated, truncated, info = env.step(action)
        assert info["action_valid"] is True
        if terminated or truncated:
            env.reset(seed=seed)


# -- generation --------------------------------------------------------------------


def test_same_seed_same_lake_different_seeds_differ() -> None:
    env = make()
    first = [env.reset(seed=seed)[0] for seed in range(30)]
    assert first == [env.reset(seed=seed)[0] for seed in range(30)]
    assert len(set(first)) > 20


@pytest.mark.parametrize(
    ("size", "hole_probability"), [(4, 0.2), (4, 0.6), (8, 0.3), (8, 0.6), (12, 0.5)]
)
def test_every_generated_lake_is_winnable(size: int, hole_probability: float) -> None:
    env = make(size=size, hole_probability=hole_probability)
    for seed in range(200):
        _, info = env.reset(seed=seed)
        rows = grid(env)
        assert len(rows) == size and all(len(row) == size for row in rows)
        assert rows[0][0] == "P" and rows[-1][-1] == "G"
        path = solve(rows)
        assert path is not None, f"seed {seed}"
        assert len(path) == info["shortest_path"] < env.max_turns


def test_holes_follow_the_hole_probability() -> None:
    env = make(size=8, hole_probability=0.25)
    holes = 0
    for seed in range(100):
        env.reset(seed=seed)
        holes += sum(row.count("H") for row in grid(env))
    assert 0.18 < holes / (100 * 62) < 0.27  # maps without a path are redrawn: a bit fewer


def test_random_goals_are_winnable_and_not_next_to_the_start() -> None:
    env = make(size=5, random_goal=True)
    goals = set()
    for seed in range(200):
        env.reset(seed=seed)
        goal = find(env, "G")
        goals.add(goal)
        assert sum(goal) >= 4
        assert solve(grid(env)) is not None
    assert len(goals) > 5


def test_following_a_shortest_path_wins_within_the_turn_limit() -> None:
    env = make(size=6, hole_probability=0.35)
    for seed in range(50):
        env.reset(seed=seed)
        path = solve(grid(env))
        assert path is not None
        for start in range(0, len(path), 3):
            _, reward, terminated, truncated, info = env.step(
                "<answer>" + " || ".join(path[start : start + 3]) + "</answer>"
            )
        assert terminated and not truncated and info["success"] and reward == 1.0


# -- limits and configuration --------------------------------------------------------


def test_the_turn_limit_truncates() -> None:
    env = load("SFF\nFFF\nFFG", max_turns=3)
    for turn in range(3):
        observation, _, terminated, truncated, _ = env.step("<answer>Left</answer>")
        assert not terminated and truncated == (turn == 2)
    assert "turn limit" in observation


def test_default_turn_limits() -> None:
    assert make().max_turns == 16
    assert make(size=8, is_slippery=True).max_turns == 192


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"size": 1}, "size must be at least 2"),
        ({"size": 17}, "size must be at most 16"),
        ({"size": "4"}, "size must be an integer"),
        ({"hole_probability": 0.9}, "hole_probability must be at most 0.6"),
        ({"hole_probability": -0.1}, "hole_probability must be at least 0"),
        ({"is_slippery": "yes"}, "is_slippery must be True or False"),
        ({"random_goal": 1}, "random_goal must be True or False"),
        ({"max_moves_per_turn": 0}, "max_moves_per_turn must be at least 1"),
        ({"max_turns": 0}, "max_turns must be at least 1"),
    ],
)
def test_bad_arguments_are_config_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FrozenLakeEnv(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("level", "message"),
    [
        ("SFF\nFG", "rectangle"),
        ("SFX\nFFG", "unknown symbols"),
        ("SFF\nFFF", "exactly one S and one G"),
        ("SSG", "exactly one S and one G"),
        (42, "must be a str of rows"),
    ],
)
def test_bad_levels_are_config_errors(level: object, message: str) -> None:
    env = make()
    with pytest.raises(ConfigError, match=message):
        env.reset(options={"level": level})


def test_levels_may_be_lists_lower_case_and_spaced() -> None:
    env = make()
    env.reset(options={"level": ["s f", "h g"]})
    assert grid(env) == [["P", "F"], ["H", "G"]]


def test_unknown_reset_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="Unknown reset options"):
        make().reset(options={"levle": "SG"})


@pytest.mark.parametrize("kwargs", [{}, {"is_slippery": True, "size": 6}])
def test_gymnasium_env_checker_passes(kwargs: dict[str, object]) -> None:
    check_env(gym.make(ID, **kwargs).unwrapped)


def test_instructions_give_legend_format_and_rewards() -> None:
    text = make(max_moves_per_turn=4).instructions
    needles = ("P ", "H ", "G ", "X ", "W ", "<answer>Right</answer>", "||", "up to 4", "1 for")
    for needle in needles:
        assert needle in text
