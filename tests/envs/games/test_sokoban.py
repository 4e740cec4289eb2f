from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.games.sokoban import SokobanEnv, parse_level
from agentgym.errors import ConfigError
from sokoban_solver import shortest_solution, solve

# Box right of the player, target two cells further right.
CORRIDOR = """
#######
#PX_O_#
#######
"""


def play(level: str, action: str, **kwargs: object) -> tuple[SokobanEnv, tuple]:
    env = SokobanEnv(**kwargs)
    env.reset(seed=0, options={"level": level})
    return env, env.step(action)


def test_walking_moves_the_player() -> None:
    env, (observation, reward, terminated, _, info) = play(CORRIDOR, "<answer>Down</answer>")
    assert "a wall is in the way" in observation
    assert reward == pytest.approx(-0.1) and not terminated and info["action_valid"]
    env, (observation, *_) = play("#####\n#P__#\n#XO_#\n#####", "<answer>Right</answer>")
    assert env.level.player == 7 and "moved" in observation


def test_pushing_a_box_into_a_wall_does_nothing() -> None:
    env, (observation, reward, *_) = play("######\n#PX#O#\n######", "<answer>Right</answer>")
    assert "the box cannot move" in observation
    assert env.level.boxes == {8} and env.level.player == 7
    assert reward == pytest.approx(-0.1)


def test_pushing_a_box_into_another_box_does_nothing() -> None:
    env, (observation, *_) = play("#######\n#PXX_O#\n#__O__#\n#######", "<answer>Right</answer>")
    assert "the box cannot move" in observation
    assert env.level.boxes == {9, 10}


def test_push_onto_a_target_then_off_it() -> None:
    level = "########\n#PX_O__#\n#___O_X#\n########"
    env = SokobanEnv()
    env.reset(seed=0, options={"level": level})
    _, reward, *_ = env.step("<answer>Right</answer>")
    assert reward == pytest.approx(-0.1)
    _, reward, _, _, info = env.step("<answer>Right</answer>")
    assert reward == pytest.approx(0.9) and info["boxes_on_target"] == 1
    _, reward, _, _, info = env.step("<answer>Right</answer>")
    assert reward == pytest.approx(-1.1) and info["boxes_on_target"] == 0


def test_the_win_pays_the_bonus_and_ends_the_episode() -> None:
    env, (observation, reward, terminated, truncated, info) = play(CORRIDOR, "<answer>right || right</answer>")
    assert "Solved" in observation and "√" in observation
    assert reward == pytest.approx(-0.2 + 1 + 10)
    assert (terminated, truncated, info["success"], info["moves"]) == (True, False, True, 2)


def test_moves_after_the_win_are_not_played() -> None:
    env, (_, _, terminated, _, info) = play(CORRIDOR, "<answer>Right||Right||Left||Left</answer>")
    assert terminated and info["moves"] == 2


def test_boxes_are_never_pulled() -> None:
    env, _ = play("#######\n#_XP_O#\n#######", "<answer>Right</answer>")
    assert env.level.boxes == {9} and env.level.player == 11


@pytest.mark.parametrize("spelling", ["R", "right", " RIGHT ", "Right.", "r"])
def test_moves_are_case_and_space_tolerant(spelling: str) -> None:
    env, (*_, info) = play(CORRIDOR, f"<answer>{spelling}</answer>")
    assert info["action_valid"] and env.level.player == 9


@pytest.mark.parametrize(
    ("action", "feedback"),
    [
        ("Right", "No action found"),
        ("<answer></answer>", "The answer is empty"),
        ("<answer>jump</answer>", "'jump' is not a move"),
    ],
)
def test_unreadable_moves_are_feedback(action: str, feedback: str) -> None:
    env, (observation, reward, terminated, _, info) = play(CORRIDOR, action)
    assert feedback in observation and "#PX_O_#" in observation
    assert reward == pytest.approx(-0.1) and not terminated and not info["action_valid"]


def test_an_invalid_move_stops_the_turn_after_the_valid_ones() -> None:
    env, (observation, reward, _, _, info) = play(CORRIDOR, "<answer>Right || fly || Right</answer>")
    assert env.level.player == 9 and info["moves"] == 1 and not info["action_valid"]
    assert "'fly' is not a move" in observation
    assert reward == pytest.approx(-0.1 - 0.1)


def test_moves_beyond_the_per_turn_limit_are_ignored() -> None:
    env, (observation, *_, info) = play(
        "#########\n#P_____X#\n#O______#\n#########", "<answer>R||R||R</answer>", max_moves_per_turn=2
    )
    assert info["moves"] == 2 and not info["action_valid"]
    assert "At most 2 moves per turn" in observation


def test_turn_limit_truncates() -> None:
    env = SokobanEnv(max_turns=2)
    env.reset(seed=0, options={"level": CORRIDOR})
    assert env.step("<answer>Left</answer>")[3] is False
    _, _, terminated, truncated, _ = env.step("<answer>Left</answer>")
    assert (terminated, truncated) == (False, True)


def test_same_seed_same_level_and_seeds_differ() -> None:
    env = gym.make("Sokoban-LLM-v0")
    levels = [env.reset(seed=seed)[0] for seed in range(50)]
    assert levels == [env.reset(seed=seed)[0] for seed in range(50)]
    assert len(set(levels)) >= 45


def test_the_turn_limit_does_not_change_the_level_a_seed_deals() -> None:
    """A training run's shorter turn limit must play the levels its eval plays, not easier ones."""
    levels = {turns: [SokobanEnv(max_turns=turns).reset(seed=seed)[0] for seed in range(30)] for turns in (30, 12)}
    assert levels[12] == levels[30]
    shorter = [SokobanEnv(walk_moves=12).reset(seed=seed)[0] for seed in range(30)]
    assert shorter != levels[30]  # the walk's length is what makes the level


@pytest.mark.parametrize(("dim_room", "num_boxes"), [((6, 6), 1), ((7, 7), 2), ((6, 8), 1)])
def test_every_generated_level_is_solvable_within_the_walk(dim_room: tuple, num_boxes: int) -> None:
    env = SokobanEnv(dim_room=dim_room, num_boxes=num_boxes)
    lengths = []
    for seed in range(200):
        env.reset(seed=seed)
        level = env.level
        assert len(level.boxes) == num_boxes and not level.boxes & level.targets
        assert (level.height, level.width) == dim_room
        moves = shortest_solution(level)
        assert moves is not None and moves <= env.walk_moves, f"seed {seed}"
        lengths.append(moves)
    assert sum(lengths) / len(lengths) >= 3  # not trivial on average


def test_a_solution_played_through_the_env_wins() -> None:
    env = SokobanEnv()
    env.reset(seed=0, options={"level": "######\n#P___#\n#_X__#\n#__O_#\n######"})
    # Push the box right from its left, walk round above it, push it down.
    for move in ("Down", "Right", "Up", "Right", "Down"):
        *_, terminated, _, info = env.step(f"<answer>{move}</answer>")
    assert terminated and info["success"]


@pytest.mark.parametrize(
    ("level", "message"),
    [
        ("###\n#P#\n##", "rectangle"),
        ("#####\n#PX?#\n#####", "Unknown level symbols"),
        ("#####\n_PXO#\n#####", "enclosed by walls"),
        ("######\n#PXOP#\n######", "exactly one player"),
        ("######\n#PXX_#\n#_O__#\n######", "as many targets as boxes"),
    ],
)
def test_bad_hand_made_levels_are_explained(level: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_level(level)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dim_room": 4}, "dim_room height must be at least 5"),
        ({"dim_room": (6, 40)}, "dim_room width must be at most 30"),
        ({"num_boxes": 5}, "num_boxes=5 does not fit a 6x6 room"),
        ({"max_moves_per_turn": 0}, "max_moves_per_turn must be at least 1"),
    ],
)
def test_bad_config_is_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SokobanEnv(**kwargs)


def test_instructions_give_the_legend_and_the_reward_values() -> None:
    text = SokobanEnv().instructions
    for fragment in ("#  wall", "√  box on a target", "<answer>Left</answer>", "-0.1 per move", "+10"):
        assert fragment in text


def test_render_ansi_shows_the_grid() -> None:
    env = SokobanEnv(render_mode="ansi")
    env.reset(seed=0, options={"level": CORRIDOR})
    assert env.render() == "#######\n#PX_O_#\n#######"


def test_show_positions_writes_rows_and_columns_that_follow_the_moves() -> None:
    env, (observation, *_) = play(CORRIDOR, "<answer>Right</answer>", show_positions=True)
    assert "Rows and columns: you 1 2; box 1 3; target 1 4." in observation
    env = SokobanEnv(show_positions=True, dim_room=7, num_boxes=2)
    first, _ = env.reset(seed=3)
    line = next(row for row in first.splitlines() if row.startswith("Rows and columns"))
    assert "; boxes " in line and "; targets " in line
    grid = env.level.render().splitlines()
    for part in line.removeprefix("Rows and columns: ").rstrip(".").split("; "):
        name, *cells = part.replace(",", "").split()
        symbols = {"you": "PS", "box": "X√", "boxes": "X√", "target": "OS√", "targets": "OS√"}[name]
        pairs = list(zip(cells[::2], cells[1::2]))
        assert pairs and all(grid[int(row)][int(col)] in symbols for row, col in pairs)
    assert "Rows and columns" not in SokobanEnv().reset(seed=3)[0]


def test_brief_instructions_are_one_line_and_keep_the_action_format() -> None:
    brief, full = SokobanEnv(brief=True).instructions, SokobanEnv().instructions
    assert "<answer>Up</answer>" in brief and "Legend" not in brief
    assert len(brief) < len(full) / 3



def test_shaping_pays_for_each_move_taken_off_the_shortest_solution() -> None:
    env = SokobanEnv(shaping=0.5)
    env.reset(seed=0, options={"level": CORRIDOR})  # solved in 2: Right, Right
    rewards, distances = [], []
    for move in ("Right", "Up", "Left", "Right", "Right"):
        _, reward, _, _, info = env.step(f"<answer>{move}</answer>")
        rewards.append(reward)
        distances.append(info["moves_to_solution"])
    # push (2 -> 1), a wall (1 -> 1), step back (1 -> 2), walk up (2 -> 1), push onto the target.
    assert distances == [1, 1, 2, 1, 0]
    assert rewards == pytest.approx([-0.1 + 0.5, -0.1, -0.1 - 0.5, -0.1 + 0.5, -0.1 + 1 + 10 + 0.5])


def test_shaping_charges_a_push_that_leaves_no_solution_as_height_times_width_moves() -> None:
    level = "#######\n#O_PX_#\n#_____#\n#######"
    env = SokobanEnv(shaping=0.5)
    env.reset(seed=0, options={"level": level})
    before = shortest_solution(parse_level(level))
    _, reward, terminated, _, info = env.step("<answer>Right</answer>")  # the box into a corner
    assert info["moves_to_solution"] == 4 * 7 and not terminated
    assert reward == pytest.approx(-0.1 + 0.5 * (before - 28))
    _, reward, *_ = env.step("<answer>Down</answer>")  # nothing saves it now: no further charge
    assert reward == pytest.approx(-0.1)


def test_shaping_adds_the_start_distance_to_a_solved_episode_and_is_off_by_default() -> None:
    totals = {}
    for shaping in (0.0, 0.25):
        env = gym.make("Sokoban-LLM-v0", shaping=shaping)
        env.reset(seed=11)
        moves = solve(parse_level(env.unwrapped.level.render()))
        total, terminated, info = 0.0, False, {}
        for move in moves:
            _, reward, terminated, _, info = env.step(f"<answer>{move}</answer>")
            total += reward
        assert terminated
        totals[shaping] = (total, len(moves), "moves_to_solution" in info)
    plain, shaped = totals[0.0], totals[0.25]
    assert shaped[0] == pytest.approx(plain[0] + 0.25 * plain[1])
    assert (plain[2], shaped[2]) == (False, True)
    assert "0.25 for every move it takes off" in SokobanEnv(shaping=0.25).instructions
    with pytest.raises(ConfigError, match="shaping must be at least 0"):
        SokobanEnv(shaping=-1)
