"""SlidingPuzzle: rules on hand-made boards, generation, determinism, limits, config."""

from __future__ import annotations

import itertools
from collections import deque
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401  (registers the ids)
from agentgym.envs.games.sliding_puzzle import SlidingPuzzleEnv, is_solvable, parse_level
from agentgym.errors import ConfigError
from fakes import make_game

ID = "SlidingPuzzle-LLM-v0"
ONE_LEFT = "1 2 3\n4 5 6\n7 _ 8"  # solved by Right
CENTRE = "1 2 3\n4 _ 5\n7 8 6"  # blank in the middle: every move is legal


make = partial(make_game, ID, SlidingPuzzleEnv)


def load(level: str, **kwargs: object) -> SlidingPuzzleEnv:
    env = make(**kwargs)
    env.reset(seed=0, options={"level": level})
    return env


def board(env: SlidingPuzzleEnv) -> list[list[str]]:
    return [row.split() for row in env.render_text().splitlines()]


def key(env: SlidingPuzzleEnv) -> str:
    """The board as one string of tokens, as the BFS below writes states."""
    return " ".join(token for row in board(env) for token in row)


@pytest.fixture(scope="module")
def distances_3x3() -> dict[str, int]:
    """Test-side BFS over the whole 8-puzzle from the solved board (181,440 states)."""
    solved = "1 2 3 4 5 6 7 8 _"
    neighbours = [
        [j for j in (i - 3, i + 3) if 0 <= j < 9] + [j for j in (i - 1, i + 1) if j // 3 == i // 3]
        for i in range(9)
    ]
    distance = {solved: 0}
    queue = deque([solved])
    while queue:
        state = queue.popleft()
        tokens = state.split()
        blank = tokens.index("_")
        for j in neighbours[blank]:
            nxt = tokens.copy()
            nxt[blank], nxt[j] = nxt[j], nxt[blank]
            text = " ".join(nxt)
            if text not in distance:
                distance[text] = distance[state] + 1
                queue.append(text)
    return distance


def solvable_by_cycles(tokens: list[str]) -> bool:
    """Independent rule: permutation parity (blank included) equals the blank's distance parity."""
    n = int(len(tokens) ** 0.5)
    home = [int(t) - 1 if t != "_" else n * n - 1 for t in tokens]
    seen, transpositions = set(), 0
    for start in range(n * n):
        length, cell = 0, start
        while cell not in seen:
            seen.add(cell)
            cell = home[cell]
            length += 1
        transpositions += max(length - 1, 0)
    blank = tokens.index("_")
    return transpositions % 2 == ((n - 1 - blank // n) + (n - 1 - blank % n)) % 2


# -- rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("move", "after"),
    [
        ("Up", "1 _ 3 4 2 5 7 8 6"),
        ("Down", "1 2 3 4 8 5 7 _ 6"),
        ("Left", "1 2 3 _ 4 5 7 8 6"),
        ("Right", "1 2 3 4 5 _ 7 8 6"),
    ],
)
def test_a_move_slides_the_blank_that_way(move: str, after: str) -> None:
    env = load(CENTRE)
    observation, reward, terminated, _, info = env.step(f"<answer>{move}</answer>")
    assert key(env) == after
    assert info["action_valid"] and reward == 0.0 and not terminated
    assert info["moves"] == 1


def test_feedback_names_the_tile_that_slid() -> None:
    env = load(CENTRE)
    observation, *_ = env.step("<answer>Up</answer>")
    assert "Up: tile 2 slid down." in observation


def test_solving_wins_and_ends_the_episode() -> None:
    env = load(ONE_LEFT)
    observation, reward, terminated, truncated, info = env.step("<answer>Right</answer>")
    assert terminated and not truncated and info["success"]
    assert reward == 1.0
    assert key(env) == "1 2 3 4 5 6 7 8 _"
    assert "Solved" in observation


@pytest.mark.parametrize(("level", "move"), [("_ 1 2\n3 4 5\n6 7 8", "Up"),
                                             ("_ 1 2\n3 4 5\n6 7 8", "Left"),
                                             (ONE_LEFT, "Down")])
def test_moving_the_blank_off_the_board_is_invalid(level: str, move: str) -> None:
    env = load(level, format_penalty=0.3)
    before = key(env)
    observation, reward, terminated, _, info = env.step(f"<answer>{move}</answer>")
    assert info["action_valid"] is False and reward == pytest.approx(-0.3)
    assert key(env) == before and not terminated
    assert "illegal" in observation and "Legal moves now" in observation


def test_moves_in_one_turn_run_in_order_and_stop_at_the_first_invalid_one() -> None:
    env = load(CENTRE)
    _, reward, _, _, info = env.step("<answer>Up || Up || Left</answer>")
    assert key(env) == "1 _ 3 4 2 5 7 8 6"  # the first Up only
    assert info["action_valid"] is False and info["moves"] == 1
    assert reward == pytest.approx(-0.1)


def test_moves_after_the_solution_are_not_made() -> None:
    env = load("1 2 3\n4 5 6\n_ 7 8")
    _, reward, terminated, _, info = env.step("<answer>R || R || Up</answer>")
    assert terminated and info["success"] and info["moves"] == 2 and reward == 1.0


def test_moves_beyond_the_per_turn_limit_are_ignored_and_the_action_is_invalid() -> None:
    env = load(CENTRE, max_moves_per_turn=2)
    observation, _, _, _, info = env.step("<answer>Up || Left || Down</answer>")
    assert info["action_valid"] is False and info["moves"] == 2
    assert key(env) == "_ 1 3 4 2 5 7 8 6"  # Up and Left were made, Down was not
    assert "At most 2 moves per turn; the other 1 were ignored." in observation


def test_move_penalty_is_taken_per_move() -> None:
    env = load("1 2 3\n4 5 6\n_ 7 8", move_penalty=0.05)
    _, reward, *_ = env.step("<answer>Right || Left</answer>")
    assert reward == pytest.approx(-0.1)
    _, reward, *_ = env.step("<answer>Right || Right</answer>")
    assert reward == pytest.approx(1.0 - 0.1)


@pytest.mark.parametrize(
    "action",
    ["<answer>Right</answer>", "<ANSWER> right </ANSWER>", "<answer>r</answer>",
     "<answer>RIGHT!</answer>", "so... <answer>Right"],
)
def test_moves_are_read_tolerantly(action: str) -> None:
    env = load(ONE_LEFT)
    assert env.step(action)[4]["success"] is True


@pytest.mark.parametrize("action", ["Right", "<answer></answer>", "<answer>tile 8</answer>",
                                    "<answer>Right Right</answer>"])
def test_unreadable_actions_are_invalid_and_change_nothing(action: str) -> None:
    env = load(ONE_LEFT)
    observation, reward, _, _, info = env.step(action)
    assert info["action_valid"] is False and reward == pytest.approx(-0.1)
    assert key(env) == "1 2 3 4 5 6 7 _ 8"
    assert "Invalid action" in observation and "<answer>" in observation


def test_random_action_is_a_legal_move() -> None:
    env = make()
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(40):
        _, _, terminated, truncated, info = env.step(env.random_action(rng))
        assert info["action_valid"] is True
        if terminated or truncated:
            env.reset()


# -- generation --------------------------------------------------------------------


def test_same_seed_same_board_different_seeds_differ() -> None:
    env = make()
    first = [env.reset(seed=seed)[0] for seed in range(30)]
    assert first == [env.reset(seed=seed)[0] for seed in range(30)]
    assert len(set(first)) > 25


@pytest.mark.parametrize("scramble_moves", [1, 5, 20])
def test_every_3x3_board_is_solvable_within_the_scramble_length(
    distances_3x3: dict[str, int], scramble_moves: int
) -> None:
    env = make(scramble_moves=scramble_moves)
    for seed in range(200):
        env.reset(seed=seed)
        distance = distances_3x3[key(env)]
        assert 0 < distance <= scramble_moves <= env.max_turns


def test_scrambles_are_not_trivial(distances_3x3: dict[str, int]) -> None:
    env = make(scramble_moves=30)
    depths = []
    for seed in range(200):
        env.reset(seed=seed)
        depths.append(distances_3x3[key(env)])
    assert np.mean(depths) > 12


@pytest.mark.parametrize(("size", "scramble_moves"), [(4, 50), (5, 200), (2, 12)])
def test_every_bigger_board_is_solvable_and_scrambled(size: int, scramble_moves: int) -> None:
    env = make(size=size, scramble_moves=scramble_moves)
    solved = [str(t) for t in range(1, size * size)] + ["_"]
    for seed in range(200):
        env.reset(seed=seed)
        tokens = key(env).split()
        assert sorted(tokens) == sorted(solved)
        assert tokens != solved and solvable_by_cycles(tokens)


def test_is_solvable_agrees_with_search(distances_3x3: dict[str, int]) -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        tiles = [int(t) for t in rng.permutation(9)]
        text = " ".join(str(t) if t else "_" for t in tiles)
        assert is_solvable(tiles, 3) == (text in distances_3x3)
    for perm in itertools.permutations(range(4)):
        tokens = [str(t) if t else "_" for t in perm]
        assert is_solvable(list(perm), 2) == solvable_by_cycles(tokens)
    for _ in range(300):
        tiles = [int(t) for t in rng.permutation(16)]
        assert is_solvable(tiles, 4) == solvable_by_cycles([str(t) if t else "_" for t in tiles])


# -- limits and configuration ---------------------------------------------------------


def test_the_turn_limit_truncates() -> None:
    env = load(CENTRE, max_turns=2)
    env.step("<answer>Up</answer>")
    observation, _, terminated, truncated, _ = env.step("<answer>Down</answer>")
    assert truncated and not terminated and "turn limit" in observation


def test_default_turn_limit_covers_the_scramble() -> None:
    assert make().max_turns == 50
    assert make(scramble_moves=100).max_turns >= 100


def test_levels_may_be_lists_of_ints() -> None:
    env = make(size=4)
    env.reset(options={"level": [[1, 2], [None, 3]]})
    assert board(env) == [["1", "2"], ["_", "3"]]
    assert env.step("<answer>Right</answer>")[4]["success"]
    env.reset(seed=0)  # back to the env's own size
    assert len(board(env)) == 4
    assert parse_level([[1, 2, 3], [4, 5, 6], [7, 0, 8]]) == [1, 2, 3, 4, 5, 6, 7, 0, 8]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"size": 1}, "size must be at least 2"),
        ({"size": 9}, "size must be at most 8"),
        ({"size": 3.0}, "size must be an integer"),
        ({"scramble_moves": 0}, "scramble_moves must be at least 1"),
        ({"move_penalty": -1}, "move_penalty must be at least 0"),
        ({"max_moves_per_turn": 0}, "max_moves_per_turn must be at least 1"),
        ({"max_turns": 0}, "max_turns must be at least 1"),
    ],
)
def test_bad_arguments_are_config_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SlidingPuzzleEnv(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("level", "message"),
    [
        ("1 2 3\n4 5 6\n8 7 _", "cannot be solved"),
        ("1 2 3\n4 5 6\n7 8 _", "solved already"),
        ("1 2\n3 _\n4 5", "square"),
        ("1 2 2\n4 5 6\n7 8 _", "each tile"),
        ("1 2 x\n4 5 6\n7 8 _", "'x'"),
        (7, "must be a str of rows"),
    ],
)
def test_bad_levels_are_config_errors(level: object, message: str) -> None:
    env = make()
    with pytest.raises(ConfigError, match=message):
        env.reset(options={"level": level})


def test_unknown_reset_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="Unknown reset options"):
        make().reset(options={"board": ONE_LEFT})


@pytest.mark.parametrize("kwargs", [{}, {"size": 4, "move_penalty": 0.01}])
def test_gymnasium_env_checker_passes(kwargs: dict[str, object]) -> None:
    check_env(gym.make(ID, **kwargs).unwrapped)


def test_instructions_state_the_direction_convention_and_rewards() -> None:
    text = make(move_penalty=0.01).instructions
    assert '"Up" moves the blank one cell up' in text
    assert "1 when the puzzle is solved" in text and "-0.01" in text
