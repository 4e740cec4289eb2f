from __future__ import annotations

from math import isqrt

import gymnasium as gym
import numpy as np
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.games.sudoku import SudokuEnv
from agentgym.errors import ConfigError

# Solution:    1 2 3 4 / 3 4 1 2 / 2 1 4 3 / 4 3 2 1
PUZZLE = """
1 . | . 4
. 4 | 1 .
2 . | 4 .
. 3 | . 1
"""
SOLUTION = [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]
# Every empty cell, filled with its solution value.
ALL_MOVES = "1 2 2 || 1 3 3 || 2 1 3 || 2 4 2 || 3 2 1 || 3 4 3 || 4 1 4 || 4 3 2"


def count_solutions(grid: list[list[int]], limit: int = 2) -> int:
    """Independent of the env's solver: plain sets, first empty cell, no heuristics."""
    size = len(grid)
    side = isqrt(size)
    for r in range(size):
        for c in range(size):
            if grid[r][c]:
                continue
            top, left = r - r % side, c - c % side
            used = set(grid[r]) | {grid[i][c] for i in range(size)} | {
                grid[i][j] for i in range(top, top + side) for j in range(left, left + side)}
            found = 0
            for value in range(1, size + 1):
                if value not in used:
                    grid[r][c] = value
                    found += count_solutions(grid, limit - found)
                    grid[r][c] = 0
                    if found >= limit:
                        break
            return found
    return 1


def is_valid_solution(grid: list[list[int]]) -> bool:
    size, side = len(grid), isqrt(len(grid))
    digits = set(range(1, size + 1))
    boxes = [[grid[r][c] for r in range(br, br + side) for c in range(bc, bc + side)]
             for br in range(0, size, side) for bc in range(0, size, side)]
    columns = [list(column) for column in zip(*grid)]
    return all(set(unit) == digits for unit in [*grid, *columns, *boxes])


def play(*actions: str, **kwargs: object) -> tuple[SudokuEnv, list[tuple]]:
    env = SudokuEnv(**kwargs)
    env.reset(seed=0, options={"level": PUZZLE})
    return env, [env.step(action) for action in actions]


def test_the_hand_made_puzzle_is_unique() -> None:
    env = SudokuEnv()
    observation, info = env.reset(options={"level": PUZZLE})
    assert count_solutions(env.grid) == 1 and env.solution == SOLUTION
    assert info["holes"] == 8 and info["size"] == 4
    assert "1 | 1 . | . 4 |" in observation and "Empty cells: 8" in observation


# -- rules ----------------------------------------------------------------------


def test_a_placement_fills_the_cell() -> None:
    env, [(observation, reward, terminated, _, info)] = play("<answer>1 2 2</answer>")
    assert env.grid[0] == [1, 2, 0, 4]
    assert reward == 0.0 and not terminated and info["action_valid"] and info["empty"] == 7
    assert "1 | 1 2 | . 4 |" in observation


@pytest.mark.parametrize("move, clash", [
    ("1 2 4", "row 1 already has 4 (at row 1, column 4)"),
    ("1 2 3", "column 2 already has 3 (at row 4, column 2)"),
    ("1 3 4", "row 1 already has 4"),
])
def test_a_visible_conflict_is_invalid_and_named(move: str, clash: str) -> None:
    env, [(observation, reward, _, _, info)] = play(f"<answer>{move}</answer>")
    assert clash in observation
    assert not info["action_valid"] and reward == pytest.approx(-0.1)
    assert env.grid[0] == [1, 0, 0, 4]


def test_a_conflict_inside_the_box_is_named() -> None:
    env, steps = play("<answer>1 2 2</answer>", "<answer>2 1 2</answer>")
    observation, _, _, _, info = steps[1]
    assert not info["action_valid"] and "its box already has 2 (at row 1, column 2)" in observation


def test_givens_cannot_change() -> None:
    env, [(observation, _, _, _, info)] = play("<answer>1 1 3</answer>")
    assert not info["action_valid"] and "is a given (1)" in observation
    assert env.grid[0][0] == 1


@pytest.mark.parametrize("move, why", [
    ("5 1 1", "off the grid"), ("0 1 1", "off the grid"), ("1 9 1", "off the grid"),
    ("1 2 5", "values go 1-4"),
])
def test_out_of_range_moves_are_invalid(move: str, why: str) -> None:
    _, [(observation, reward, _, _, info)] = play(f"<answer>{move}</answer>")
    assert why in observation and not info["action_valid"] and reward == pytest.approx(-0.1)


def test_a_wrong_but_unseen_value_is_allowed_then_overwritten_and_cleared() -> None:
    env, steps = play("<answer>1 3 2</answer>", "<answer>1 3 3</answer>",
                      "<answer>1 3 0</answer>", "<answer>clear 1 3</answer>")
    assert [info["action_valid"] for *_, info in steps] == [True, True, True, False]
    assert "already empty" in steps[3][0]
    assert env.grid[0] == [1, 0, 0, 4]


def test_filling_the_grid_solves_it() -> None:
    env, [(observation, reward, terminated, truncated, info)] = play(
        f"<answer>{ALL_MOVES}</answer>")
    assert env.grid == SOLUTION
    assert reward == pytest.approx(1.0)
    assert (terminated, truncated, info["success"], info["moves"]) == (True, False, True, 8)
    assert "Solved" in observation


def test_a_wrong_entry_blocks_the_solve_until_it_is_fixed() -> None:
    env, steps = play("<answer>1 3 2</answer>", "<answer>1 2 3</answer>",
                      f"<answer>1 3 3 || {ALL_MOVES}</answer>")
    # With the wrong 2 in row 1, row 1 column 2 has no value left: 3 is in its column.
    assert not steps[1][4]["action_valid"]
    assert steps[2][2] and steps[2][4]["success"]


def test_several_moves_stop_at_the_first_invalid_one() -> None:
    env, [(observation, reward, _, _, info)] = play("<answer>1 2 2 || 1 1 1 || 1 3 3</answer>")
    assert not info["action_valid"] and info["moves"] == 1
    assert env.grid[0] == [1, 2, 0, 4] and "is a given" in observation


def test_moves_beyond_the_cap_are_ignored() -> None:
    env, [(observation, _, _, _, info)] = play(f"<answer>{ALL_MOVES}</answer>",
                                               max_moves_per_turn=3)
    assert not info["action_valid"] and info["moves"] == 3 and "At most 3 moves" in observation
    assert info["empty"] == 5


@pytest.mark.parametrize("spelling", [
    "1 2 2", "1,2,2", "(1, 2, 2)", "r1c2=2", "R1 C2 = 2", "Row 1, Column 2: 2", " 1 2 2 .",
    "row 1 col 2 value 2", "1-2-2",
])
def test_moves_are_tolerant_of_spelling(spelling: str) -> None:
    env, [(*_, info)] = play(f"<answer>{spelling}</answer>")
    assert info["action_valid"] and env.grid[0][1] == 2


@pytest.mark.parametrize("action, hint", [
    ("1 2 2", "No action found"),
    ("<answer> </answer>", "empty"),
    ("<answer>1 2</answer>", "is not a move"),
    ("<answer>1 2 3 4</answer>", "is not a move"),
    ("<answer>put two in the corner</answer>", "is not a move"),
    ("<answer>" + "\u00b2" * 16 + "</answer>", "is not a move"),  # isdigit() but not int()
])
def test_unreadable_actions_explain_the_format(action: str, hint: str) -> None:
    _, [(observation, reward, terminated, _, info)] = play(action)
    assert hint in observation and "2 3 4" in observation and "| . 4 |" in observation
    assert not info["action_valid"] and reward == pytest.approx(-0.1) and not terminated


def test_the_whole_grid_can_be_answered_at_once() -> None:
    grid = "\n".join(" ".join(map(str, row)) for row in SOLUTION)
    env, [(_, reward, terminated, _, info)] = play(f"<answer>\n{grid}\n</answer>")
    assert terminated and info["success"] and reward == pytest.approx(1.0)


def test_a_partial_grid_replaces_the_entries() -> None:
    env, steps = play("<answer>1 3 3</answer>",
                      "<answer>1 2 . 4 | 0 4 1 0 | 2 . 4 . | . 3 . 1</answer>")
    _, reward, terminated, _, info = steps[1]
    assert info["action_valid"] and not terminated and reward == 0.0
    assert env.grid == [[1, 2, 0, 4], [0, 4, 1, 0], [2, 0, 4, 0], [0, 3, 0, 1]]


@pytest.mark.parametrize("grid, why", [
    ("2234341221434321", "1 1 2: row 1, column 1 is a given (1)"),
    ("1324341221434321", "1 2 3: column 2 already has 3 (at row 4, column 2)"),
])
def test_a_wrong_whole_grid_stops_at_the_first_problem(grid: str, why: str) -> None:
    env, steps = play("<answer>1 3 3</answer>", f"<answer>{grid}</answer>")
    observation, _, terminated, _, info = steps[1]
    assert why in observation and not info["action_valid"] and not terminated
    assert env.grid[0] == [1, 0, 0, 4]  # the earlier entry was replaced


def test_placement_reward_is_paid_once_per_cell() -> None:
    env, steps = play("<answer>1 2 2</answer>", "<answer>1 2 0 || 1 2 2</answer>",
                      "<answer>2 4 3</answer>", placement_reward=0.05)
    assert [reward for _, reward, *_ in steps] == pytest.approx([0.05, 0.0, 0.0])
    assert all(info["action_valid"] for *_, info in steps)
    assert "+0.05" in env.instructions


def test_the_turn_limit_truncates() -> None:
    _, steps = play("<answer>1 2 2</answer>", "<answer>1 3 3</answer>", max_turns=2)
    observation, _, terminated, truncated, _ = steps[1]
    assert truncated and not terminated and "turn limit (2)" in observation


def test_a_level_may_be_a_list_of_rows() -> None:
    env = gym.make("Sudoku-LLM-v0", size=9).unwrapped
    env.reset(options={"level": [[v if (r + c) % 3 else 0 for c, v in enumerate(row)]
                                 for r, row in enumerate(SOLUTION)]})
    assert env.solution == SOLUTION and env.grid[0] == [0, 2, 3, 0]


def test_instructions_and_render() -> None:
    env = gym.make("Sudoku-LLM-v0", size=9, render_mode="ansi")
    env.reset(seed=0)
    text = env.unwrapped.instructions
    for needle in ("3x3 boxes", "digit 1-9", "'.'", "2 3 4", "||", "+1",
                   "numbered from 1", "81 digits row by row"):
        assert needle in text
    assert env.render() == env.unwrapped.render_text()
    assert env.render().splitlines()[0].split() == [str(c) for c in range(1, 10)]


# -- generation -----------------------------------------------------------------


def test_same_seed_same_puzzle_different_seeds_differ() -> None:
    env = gym.make("Sudoku-LLM-v0")
    first = [env.reset(seed=seed)[0] for seed in range(20)]
    assert first == [env.reset(seed=seed)[0] for seed in range(20)]
    assert len(set(first)) >= 19


@pytest.mark.parametrize("size, seeds, kwargs, holes", [
    (4, 200, {}, 8),
    (4, 200, {"num_holes": 10}, 10),
    (9, 20, {}, 40),
    (9, 20, {"difficulty": 0.6}, 49),
])
def test_generated_puzzles_have_one_solution(size: int, seeds: int, kwargs: dict,
                                             holes: int) -> None:
    env = gym.make("Sudoku-LLM-v0", size=size, **kwargs)
    for seed in range(seeds):
        _, info = env.reset(seed=seed)
        puzzle, solution = env.unwrapped.grid, env.unwrapped.solution
        assert info["holes"] == holes == sum(row.count(0) for row in puzzle)
        assert is_valid_solution(solution)
        assert all(p in (0, s) for prow, srow in zip(puzzle, solution) for p, s in zip(prow, srow))
        assert count_solutions(puzzle) == 1


def test_too_many_holes_stop_where_uniqueness_would_break() -> None:
    env = gym.make("Sudoku-LLM-v0", num_holes=16)
    for seed in range(50):
        _, info = env.reset(seed=seed)
        assert 8 < info["holes"] <= 12  # a unique 4x4 puzzle keeps at least 4 clues
        assert count_solutions(env.unwrapped.grid) == 1


def test_random_actions_are_well_formed() -> None:
    env = gym.make("Sudoku-LLM-v0").unwrapped
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    for _ in range(5):
        action = env.random_action(rng)
        assert action.startswith("<answer>") and len(action.split()) == 3
        assert env.step(action)[4]["action_valid"]


# -- configuration --------------------------------------------------------------


@pytest.mark.parametrize("kwargs, match", [
    ({"size": 5}, "size must be 4 or 9"),
    ({"size": True}, "size must be 4 or 9"),
    ({"difficulty": 1.5}, "difficulty must be at most 1"),
    ({"difficulty": 0.5, "num_holes": 3}, "not both"),
    ({"num_holes": 0}, "num_holes must be at least 1"),
    ({"num_holes": 17}, "num_holes must be at most 16"),
    ({"placement_reward": -1}, "placement_reward must be at least 0"),
    ({"max_moves_per_turn": 0}, "max_moves_per_turn must be at least 1"),
])
def test_bad_config_is_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        gym.make("Sudoku-LLM-v0", **kwargs)


@pytest.mark.parametrize("options, match", [
    ({"level": "12.\n..."}, "4 rows of 4 or 9 rows of 9"),
    ({"level": "1x..\n....\n....\n...."}, "digits 1-4"),
    ({"level": "1...\n....\n....\n...."}, "several"),
    ({"level": "11..\n....\n....\n...."}, "none"),
    ({"level": "\n".join(" ".join(map(str, row)) for row in SOLUTION)}, "at least one empty"),
    ({"level": 7}, "must be a str or a list"),
    ({"grid": PUZZLE}, "Unknown reset options"),
])
def test_bad_levels_are_refused(options: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        SudokuEnv().reset(options=options)
