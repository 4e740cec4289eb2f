from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.games.minesweeper import MinesweeperEnv
from agentgym.errors import ConfigError

# A wall of mines down the middle column: each side is opened by one reveal.
WALL = """
..*..
..*..
..*..
"""
# The centre is the only safe cell, with 8 mines around it.
EIGHT = "***\n*.*\n***"


def play(level: str, *actions: str, **kwargs: object) -> tuple[MinesweeperEnv, list[tuple]]:
    env = MinesweeperEnv(**kwargs)
    env.reset(seed=0, options={"level": level})
    return env, [env.step(action) for action in actions]


def board(env: MinesweeperEnv) -> list[list[str]]:
    """The rendered board as rows of symbols (the header and row labels dropped)."""
    return [line.split()[1:] for line in env.render_text().splitlines()[1:]]


def neighbours(r: int, c: int, rows: int, cols: int) -> list[tuple[int, int]]:
    return [(r + dr, c + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)
            if (dr or dc) and 0 <= r + dr < rows and 0 <= c + dc < cols]


# -- rules on hand-made boards --------------------------------------------------


def test_a_hand_made_board_starts_hidden() -> None:
    env = MinesweeperEnv()
    observation, info = env.reset(options={"level": WALL})
    assert board(env) == [["?"] * 5] * 3
    assert info["hidden_safe"] == 12 and "3x5 with 3 mines" in observation
    assert env.mine_cells == [(1, 3), (2, 3), (3, 3)]


def test_revealing_an_empty_cell_floods_to_the_numbers() -> None:
    env, [(observation, reward, terminated, _, info)] = play(WALL, "<answer>reveal 1 1</answer>")
    assert board(env) == [[".", "2", "?", "?", "?"], [".", "3", "?", "?", "?"],
                          [".", "2", "?", "?", "?"]]
    assert reward == pytest.approx(0.6)
    assert not terminated and info["hidden_safe"] == 6 and info["action_valid"]
    assert "revealed 6 cells" in observation


def test_revealing_a_number_opens_only_that_cell() -> None:
    env, [(_, reward, *_)] = play(WALL, "<answer>reveal 2 4</answer>")
    assert board(env)[1] == ["?", "?", "?", "3", "?"]
    assert reward == pytest.approx(0.1)


def test_numbers_count_all_eight_neighbours() -> None:
    env, [(observation, reward, terminated, _, info)] = play(EIGHT, "<answer>reveal 2 2</answer>")
    assert "8" in board(env)[1]
    assert reward == pytest.approx(0.1 + 1.0) and terminated and info["success"]


def test_revealing_every_safe_cell_wins() -> None:
    env, steps = play(WALL, "<answer>reveal 1 1</answer>", "<answer>reveal 3 5</answer>")
    observation, reward, terminated, truncated, info = steps[1]
    assert reward == pytest.approx(0.6 + 1.0)
    assert (terminated, truncated, info["success"], info["hidden_safe"]) == (True, False, True, 0)
    assert "You win" in observation
    assert sum(row.count("*") for row in board(env)) == 3  # the mines are shown at the end


def test_revealing_a_mine_loses() -> None:
    env, [(observation, reward, terminated, _, info)] = play(WALL, "<answer>reveal 2 3</answer>")
    assert reward == pytest.approx(-1.0)
    assert terminated and not info["success"] and info["mine_hit"] and info["action_valid"]
    assert "BOOM" in observation and "game is over" in observation
    assert [row[2] for row in board(env)] == ["*", "*", "*"]


def test_flags_mark_cells_and_protect_them() -> None:
    env, steps = play(WALL, "<answer>flag 1 3</answer>", "<answer>reveal 1 3</answer>",
                      "<answer>unflag 1 3</answer>", "<answer>unflag 1 3</answer>")
    (_, reward, *_), (flagged_reveal, penalty, _, _, bad), (_, _, _, _, unflagged), \
        (no_flag, _, _, _, twice) = steps
    assert reward == 0.0
    assert not bad["action_valid"] and penalty == pytest.approx(-0.1)
    assert "unflag it first" in flagged_reveal
    assert unflagged["action_valid"] and board(env)[0][2] == "?"
    assert not twice["action_valid"] and "no flag to remove" in no_flag


def test_a_flag_is_shown_and_counted() -> None:
    env, [(observation, *_)] = play(WALL, "<answer>flag 2 3</answer>")
    assert board(env)[1][2] == "F" and "Flags placed: 1" in observation


@pytest.mark.parametrize("move, why", [
    ("reveal 0 1", "off the board"),
    ("reveal 4 1", "off the board"),
    ("flag 1 6", "off the board"),
    ("reveal -1 2", "off the board"),
])
def test_moves_off_the_board_are_invalid(move: str, why: str) -> None:
    env, [(observation, reward, terminated, _, info)] = play(WALL, f"<answer>{move}</answer>")
    assert not info["action_valid"] and why in observation and "rows go 1-3" in observation
    assert reward == pytest.approx(-0.1) and not terminated
    assert board(env) == [["?"] * 5] * 3


def test_revealed_cells_cannot_be_revealed_or_flagged() -> None:
    env, steps = play(WALL, "<answer>reveal 1 1</answer>", "<answer>reveal 1 2</answer>",
                      "<answer>flag 1 1</answer>")
    for observation, reward, _, _, info in steps[1:]:
        assert not info["action_valid"] and "already revealed" in observation
        assert reward == pytest.approx(-0.1)


def test_several_moves_in_one_turn_play_in_order() -> None:
    env, [(_, reward, terminated, _, info)] = play(
        WALL, "<answer>flag 2 3 || reveal 1 1 || reveal 1 5</answer>")
    assert terminated and info["success"] and info["moves"] == 3
    assert reward == pytest.approx(1.2 + 1.0)


def test_moves_stop_at_the_first_invalid_one() -> None:
    env, [(observation, reward, _, _, info)] = play(
        WALL, "<answer>reveal 1 1 || dance || reveal 1 5</answer>")
    assert not info["action_valid"] and info["moves"] == 1
    assert reward == pytest.approx(0.6 - 0.1)
    assert "'dance' is not a move" in observation and board(env)[0][4] == "?"


def test_moves_after_a_mine_are_not_played() -> None:
    env, [(_, reward, terminated, _, info)] = play(
        WALL, "<answer>reveal 1 3 || reveal 1 1</answer>")
    assert terminated and info["moves"] == 1 and reward == pytest.approx(-1.0)


def test_moves_beyond_the_cap_are_ignored() -> None:
    env, [(observation, _, _, _, info)] = play(
        WALL, "<answer>flag 1 3 || flag 2 3</answer>", max_moves_per_turn=1)
    assert not info["action_valid"] and info["moves"] == 1 and "At most 1 moves" in observation
    assert board(env)[1][2] == "?"


@pytest.mark.parametrize("spelling", [
    "reveal 1 1", "Reveal (1, 1)", " REVEAL 1,1 ", "open 1 1", "r 1 1", "reveal row 1 col 1",
    "reveal 1 1.", "Click [1 1]", "reveal  1   1",
])
def test_moves_are_case_and_space_tolerant(spelling: str) -> None:
    env, [(*_, info)] = play(WALL, f"<answer>{spelling}</answer>")
    assert info["action_valid"] and board(env)[0][0] == "."


@pytest.mark.parametrize("action, hint", [
    ("reveal 1 1", "No action found"),
    ("<answer></answer>", "empty"),
    ("<answer>jump 1 1</answer>", "is not a move"),
    ("<answer>reveal 1</answer>", "is not a move"),
    ("<answer>reveal one one</answer>", "is not a move"),
])
def test_unreadable_actions_explain_the_format(action: str, hint: str) -> None:
    env, [(observation, reward, terminated, _, info)] = play(WALL, action)
    assert hint in observation and "reveal" in observation
    assert not info["action_valid"] and reward == pytest.approx(-0.1) and not terminated
    assert "?" in observation  # the board is shown again


def test_the_turn_limit_truncates() -> None:
    env, steps = play(WALL, "<answer>flag 1 3</answer>", "<answer>unflag 1 3</answer>",
                      max_turns=2)
    observation, _, terminated, truncated, info = steps[1]
    assert truncated and not terminated and not info["success"]
    assert "turn limit (2)" in observation


def test_instructions_give_the_legend_format_and_rewards() -> None:
    text = MinesweeperEnv().instructions
    for needle in ("?", "F", "*", "reveal 2 3", "flag", "||", "+0.1", "+1", "-1",
                   "numbered from 1"):
        assert needle in text


def test_render_modes() -> None:
    env = gym.make("Minesweeper-LLM-v0", render_mode="ansi")
    env.reset(seed=3)
    assert env.render() == env.unwrapped.render_text()
    assert "1 2 3 4 5" in env.render()


# -- generation -----------------------------------------------------------------


def test_same_seed_same_board_different_seeds_differ() -> None:
    env = gym.make("Minesweeper-LLM-v0")
    first = [(env.reset(seed=seed)[0], env.unwrapped.mine_cells) for seed in range(20)]
    again = [(env.reset(seed=seed)[0], env.unwrapped.mine_cells) for seed in range(20)]
    assert first == again
    assert len({tuple(mines) for _, mines in first}) >= 18


def test_same_seed_and_actions_replay_the_same_game() -> None:
    env = gym.make("Minesweeper-LLM-v0")
    actions = ["<answer>reveal 1 1 || reveal 5 5</answer>", "<answer>reveal 3 3</answer>"]
    runs = []
    for _ in range(2):
        env.reset(seed=11)
        runs.append([env.step(action)[:4] for action in actions])
    assert runs[0] == runs[1]


@pytest.mark.parametrize("rows, cols, num_mines, no_guess", [
    (5, 5, 4, True), (8, 8, 10, True), (6, 9, 15, False), (2, 2, 2, False),
])
def test_generated_boards_are_valid(rows: int, cols: int, num_mines: int, no_guess: bool) -> None:
    env = gym.make("Minesweeper-LLM-v0", rows=rows, cols=cols, num_mines=num_mines,
                   no_guess=no_guess)
    for seed in range(200):
        _, info = env.reset(seed=seed)
        mines = set(env.unwrapped.mine_cells)
        assert len(mines) == num_mines
        shown = board(env.unwrapped)
        opened = [(r, c) for r in range(rows) for c in range(cols) if shown[r][c] != "?"]
        assert opened, "a safe opening is revealed"
        assert 0 < info["hidden_safe"] == rows * cols - num_mines - len(opened)
        for r, c in opened:
            assert (r + 1, c + 1) not in mines
            around = sum((rr + 1, cc + 1) in mines for rr, cc in neighbours(r, c, rows, cols))
            assert shown[r][c] == (str(around) if around else ".")


def _safe_by_enumeration(shown: list[list[str]], num_mines: int) -> list[tuple[int, int]]:
    """Hidden cells that hold no mine in any placement consistent with the board."""
    rows, cols = len(shown), len(shown[0])
    cells = [(r, c) for r in range(rows) for c in range(cols)]
    hidden = [i for i, (r, c) in enumerate(cells) if shown[r][c] == "?"]
    combos = np.array(list(itertools.combinations(hidden, num_mines)))
    mined = np.zeros((len(combos), rows * cols), dtype=np.int64)
    mined[np.arange(len(combos))[:, None], combos] = 1
    adjacency = np.zeros((rows * cols, rows * cols), dtype=np.int64)
    for i, (r, c) in enumerate(cells):
        for rr, cc in neighbours(r, c, rows, cols):
            adjacency[rr * cols + cc, i] = 1
    counts = mined @ adjacency
    consistent = np.ones(len(combos), dtype=bool)
    for i, (r, c) in enumerate(cells):
        if shown[r][c] != "?":
            consistent &= counts[:, i] == (0 if shown[r][c] == "." else int(shown[r][c]))
    possible = mined[consistent].any(axis=0)
    return [cells[i] for i in hidden if not possible[i]]


def test_no_guess_boards_are_won_by_certain_moves_only() -> None:
    """An exact solver (every mine placement) only ever reveals provably safe cells."""
    env = gym.make("Minesweeper-LLM-v0", max_turns=25)
    for seed in range(200):
        _, info = env.reset(seed=seed)
        assert info["no_guess"]
        terminated = False
        while not terminated:
            safe = _safe_by_enumeration(board(env.unwrapped), 4)
            assert safe, f"seed {seed}: no certain move"
            for r, c in safe:  # an earlier reveal may have flooded over the later ones
                if board(env.unwrapped)[r][c] == "?" and not terminated:
                    _, _, terminated, _, info = env.step(f"<answer>reveal {r + 1} {c + 1}</answer>")
                    assert info["action_valid"] and not info["mine_hit"]
        assert info["success"]


def test_random_actions_are_well_formed() -> None:
    env = gym.make("Minesweeper-LLM-v0").unwrapped
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    for _ in range(20):
        _, _, terminated, truncated, info = env.step(env.random_action(rng))
        assert info["action_valid"]
        if terminated or truncated:
            env.reset()


# -- configuration --------------------------------------------------------------


@pytest.mark.parametrize("kwargs, match", [
    ({"rows": 1}, "rows must be at least 2"),
    ({"cols": 31}, "cols must be at most 30"),
    ({"num_mines": 0}, "num_mines must be at least 1"),
    ({"num_mines": 24}, "num_mines must be at most 23"),
    ({"rows": 5.0}, "rows must be an integer"),
    ({"no_guess": "yes"}, "no_guess must be True or False"),
    ({"max_moves_per_turn": 0}, "max_moves_per_turn must be at least 1"),
    ({"max_turns": 0}, "max_turns must be at least 1"),
])
def test_bad_config_is_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        gym.make("Minesweeper-LLM-v0", **kwargs)


@pytest.mark.parametrize("options, match", [
    ({"level": "..*\n.."}, "rectangle"),
    ({"level": "..x\n..."}, "only '\\*'"),
    ({"level": "**\n**"}, "at least one safe cell"),
    ({"level": 3}, "must be a str"),
    ({"board": "..*"}, "Unknown reset options"),
])
def test_bad_levels_are_refused(options: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        MinesweeperEnv().reset(options=options)
