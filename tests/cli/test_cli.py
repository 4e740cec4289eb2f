from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.rollout.storage import read_rows
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


RANDOM = ["rollout", "--env", "Sokoban-LLM-v0", "--policy", "random", "--concurrency", "1"]


def test_rollout_prints_episodes_and_a_summary() -> None:
    result = runner.invoke(app, [*RANDOM, "--episodes", "2", "--seed", "3", "--show", "2"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "Sokoban-LLM-v0/s3/g0/e0" in result.output and "Sokoban-LLM-v0/s4/g1/e0" in result.output
    assert "assistant> <answer>" in result.output and "user> " in result.output
    assert "success rate" in result.output and "mean reward" in result.output


def test_rollout_is_reproducible_and_takes_env_kwargs() -> None:
    args = [*RANDOM, "--episodes", "1", "-k", "dim_room=[7, 8]", "--max-turns", "4"]
    first = runner.invoke(app, args, terminal_width=200)
    assert first.exit_code == 0, first.output
    second = runner.invoke(app, args, terminal_width=200)
    strip = lambda text: [line for line in text.splitlines() if "rollout" not in line]  # noqa: E731
    assert strip(first.output) == strip(second.output)  # the progress line has timings
    assert "#" * 8 in first.output and first.output.count("assistant>") <= 4


def test_rollout_writes_parquet_resumes_and_view_reads_it(tmp_path: Path) -> None:
    out = tmp_path / "r.parquet"
    first = runner.invoke(app, [*RANDOM, "--episodes", "2", "--out", str(out)], terminal_width=200)
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, [*RANDOM, "--episodes", "2", "--out", str(out)], terminal_width=200)
    assert again.exit_code == 2 and "already exists: pass --resume" in again.output
    more = runner.invoke(app, [*RANDOM, "--episodes", "4", "--out", str(out), "--resume"], terminal_width=200)
    assert more.exit_code == 0, more.output
    assert sorted(row.key for row in read_rows(out)) == [(0, 0), (1, 0), (2, 0), (3, 0)]
    view = runner.invoke(app, ["view", str(out), "--episode", "g3", "--tokens"], terminal_width=200)
    assert view.exit_code == 0, view.output
    assert "Sokoban-LLM-v0/s3/g3/e0" in view.output and "<|im_start|>assistant" in view.output
    assert "1 of 1 rows shown" in view.output


#: the key of the tiny_url server, passed as --api-key (every server agentgym starts wants one)
TINY_KEY = "cli-test-key"


@pytest.fixture(scope="module")
def tiny_url(tiny_model: str) -> Iterator[str]:
    from agentgym.serve.launch import BuiltinServer

    with BuiltinServer(tiny_model, served_model_name="tiny", max_model_len=512, api_key=TINY_KEY) as server:
        yield server.base_url


def test_rollout_sampling_seed_repeats_the_tokens_and_another_seed_draws_others(tiny_url: str,
                                                                                 tmp_path: Path) -> None:
    def sampled(name: str, *seed: str) -> dict[tuple[int, int], list[int]]:
        out = tmp_path / f"{name}.parquet"
        result = runner.invoke(app, ["rollout", "--env", "Sokoban-LLM-v0", "--base-url", tiny_url,
                                     "--api-key", TINY_KEY, "--model", "tiny", "--episodes", "4", "--group-size", "2", "--max-turns", "2", "--max-tokens", "8",
                                     "--out", str(out), *seed], terminal_width=200)
        assert result.exit_code == 0, result.output
        return {row.key: row.completion_ids for row in read_rows(out)}

    first = sampled("a", "--sampling-seed", "5")
    assert len(first) == 4 and all(first.values())
    assert sampled("b", "--sampling-seed", "5") == first
    assert sampled("c", "--sampling-seed", "6") != first
    # each member of a group draws its own noise: the same level, other tokens
    assert first[(0, 0)] != first[(0, 1)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["rollout", "--env", "Sokobn-LLM-v0"], "Did you mean 'Sokoban-LLM-v0'"),
        ([*RANDOM, "-k", "dim_room"], "KEY=VALUE"),
        ([*RANDOM, "-k", "colour=red"], "Sokoban-LLM-v0 has no argument 'colour'; it takes dim_room="),
        ([*RANDOM, "-k", "num_boxes=9"], "num_boxes=9 does not fit"),
        ([*RANDOM, "--episodes", "0"], "episodes must be at least 1"),
        ([*RANDOM, "--resume"], "--resume needs --out"),
        (["view", "missing.parquet"], "does not exist"),
        (["play", "Sokobn-LLM-v0"], "Did you mean"),
        (["serve", "--model", "tiny", "--device", "gpu"], "device must be auto, cpu, cuda or cuda:N"),
        (["serve", "--model", "tiny", "--dtype", "fp8"], "dtype must be one of"),
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


def test_play_shows_the_tools_an_env_is_given() -> None:
    """A tool env's player reads the same instructions as the agent: the tools' part too."""
    result = runner.invoke(app, ["play", "SearchQA-LLM-v0", "--seed", "0"], input=":help\n:quit\n",
                           terminal_width=200)
    assert result.exit_code == 0, result.output
    assert result.output.count("# Tools") == 2  # at start and on :help
    assert "<search>" in result.output
