from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.envs.games.sokoban import SokobanEnv
from sokoban_solver import solve

runner = CliRunner()


def test_list_shows_every_game_with_its_columns() -> None:
    result = runner.invoke(app, ["list"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for text in ("id", "family", "needs", "Sokoban-LLM-v0", "Wordle-LLM-v0", "games"):
        assert text in result.output


def test_list_filters_by_family() -> None:
    result = runner.invoke(app, ["list", "--family", "games"], terminal_width=200)
    assert "Sokoban-LLM-v0" in result.output and "Echo-LLM-v0" not in result.output


def test_rollout_prints_turns_and_a_summary() -> None:
    result = runner.invoke(app, ["rollout", "--env", "Sokoban-LLM-v0", "--episodes", "2", "--seed", "3"],
                           terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "episode 0 (seed 3)" in result.output and "episode 1 (seed 4)" in result.output
    assert "turn 1> <answer>" in result.output
    assert "success rate" in result.output and "mean reward" in result.output


def test_rollout_is_reproducible_and_takes_env_kwargs() -> None:
    args = ["rollout", "--env", "Sokoban-LLM-v0", "--episodes", "1", "-k", "dim_room=[7, 8]", "-k", "max_turns=4"]
    first = runner.invoke(app, args, terminal_width=200)
    assert first.exit_code == 0, first.output
    assert first.output == runner.invoke(app, args, terminal_width=200).output
    assert "#" * 8 in first.output and "turn 5>" not in first.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["rollout", "--env", "Sokobn-LLM-v0"], "Did you mean 'Sokoban-LLM-v0'"),
        (["rollout", "--env", "Sokoban-LLM-v0", "-k", "dim_room"], "KEY=VALUE"),
        (["rollout", "--env", "Sokoban-LLM-v0", "-k", "colour=red"], "does not take those arguments"),
        (["rollout", "--env", "Sokoban-LLM-v0", "-k", "num_boxes=9"], "num_boxes=9 does not fit"),
        (["rollout", "--env", "Sokoban-LLM-v0", "--episodes", "0"], "at least 1"),
        (["play", "Sokobn-LLM-v0"], "Did you mean"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args: list[str], message: str) -> None:
    result = runner.invoke(app, args, terminal_width=200)
    assert result.exit_code == 2
    assert message in result.output


def test_play_to_a_win() -> None:
    env = SokobanEnv()
    env.reset(seed=5)
    moves = solve(env.level)
    assert moves
    result = runner.invoke(app, ["play", "Sokoban-LLM-v0", "--seed", "5"],
                           input="\n".join(moves) + "\n", terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "You are playing Sokoban" in result.output
    assert "Solved!" in result.output and "Bye. Reward this episode" in result.output


def test_play_commands_and_hostile_text() -> None:
    lines = [":help", "[/bold] <answer>[/red]</answer>", "up", ":reset", ":quit"]
    result = runner.invoke(app, ["play", "Sokoban-LLM-v0", "--seed", "0"], input="\n".join(lines) + "\n",
                           terminal_width=200)
    assert result.exit_code == 0, result.output
    assert result.output.count("You are playing Sokoban") == 2  # at start and on :help
    assert "(invalid action)" in result.output and "'[/red]' is not a move" in result.output
    assert result.output.count("Level:") == 2  # at start and on :reset


def test_play_ends_quietly_on_end_of_input() -> None:
    result = runner.invoke(app, ["play", "Sokoban-LLM-v0"], input="", terminal_width=200)
    assert result.exit_code == 0 and "Bye." in result.output
