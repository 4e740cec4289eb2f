"""The games' expert policies: optimal where they claim it, and they win."""

from __future__ import annotations

import pytest

import agentgym
from agentgym.envs.games.experts import (
    BanditExpert,
    FrozenLakeExpert,
    GuessNumberExpert,
    SokobanExpert,
    solve_sokoban,
)
from agentgym.envs.games.sokoban import SokobanEnv, parse_level
from agentgym.errors import PolicyError
from agentgym.rollout import play_episode
from sokoban_solver import shortest_solution


def _replay(level_text: str, moves: list[str]) -> bool:
    level = parse_level(level_text)
    for move in moves:
        level.push(move.lower())
    return level.solved()


@pytest.mark.parametrize(("dim_room", "num_boxes"), [((6, 6), 1), ((7, 7), 2)])
def test_the_solver_is_as_short_as_the_independent_search(dim_room: tuple[int, int], num_boxes: int) -> None:
    env = SokobanEnv(dim_room=dim_room, num_boxes=num_boxes)
    for seed in range(60):
        env.reset(seed=seed)
        text = env.level.render()
        moves = solve_sokoban(env.level)
        assert moves is not None, text
        assert len(moves) == shortest_solution(parse_level(text)), text
        assert _replay(text, moves), text
        assert env.level.render() == text  # the search never moves the real level


def test_the_solver_says_none_for_an_unsolvable_level() -> None:
    stuck = parse_level("######\n#X___#\n#____#\n#__O_#\n#P___#\n######")  # box in a corner
    assert solve_sokoban(stuck) is None
    assert solve_sokoban(parse_level("######\n#P√__#\n#____#\n#____#\n#____#\n######")) == []


@pytest.mark.parametrize(("env_id", "kwargs"), [
    ("Sokoban-LLM-v0", {}),
    ("Sokoban-LLM-v0", {"dim_room": (7, 7), "num_boxes": 2}),
    ("FrozenLake-LLM-v0", {"size": 5, "hole_probability": 0.3}),
    ("GuessNumber-LLM-v0", {}),
    ("Bandit-LLM-v0", {}),
])
def test_experts_win_every_episode(env_id: str, kwargs: dict) -> None:
    expert = {"Sokoban-LLM-v0": SokobanExpert, "FrozenLake-LLM-v0": FrozenLakeExpert,
              "GuessNumber-LLM-v0": GuessNumberExpert, "Bandit-LLM-v0": BanditExpert}[env_id]()
    env = agentgym.make(env_id, **kwargs)
    for seed in range(40):
        record = play_episode(env, expert, seed=seed)
        assert record.success, (seed, record.turns[-1].observation)
        assert record.invalid_actions == 0


def test_the_sokoban_expert_plays_a_shortest_solution_one_move_a_turn() -> None:
    env = agentgym.make("Sokoban-LLM-v0")
    for seed in range(20):
        env.reset(seed=seed)
        shortest = shortest_solution(parse_level(env.unwrapped.level.render()))
        record = play_episode(env, SokobanExpert(), seed=seed)
        assert record.num_turns == shortest
        assert all(turn.action.count("<answer>") == 1 and "||" not in turn.action for turn in record.turns)


def test_the_sokoban_expert_refuses_a_position_it_cannot_solve() -> None:
    env = agentgym.make("Sokoban-LLM-v0").unwrapped
    env.reset(options={"level": "######\n#X___#\n#____#\n#__O_#\n#P___#\n######"})
    with pytest.raises(PolicyError, match="no solution"):
        SokobanExpert().act("", env)
    with pytest.raises(PolicyError, match="after reset"):
        SokobanExpert().act("", agentgym.make("Sokoban-LLM-v0").unwrapped)
