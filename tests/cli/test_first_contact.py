"""First contact (issue 41): a user's mistake ends in one clear line and a non-zero exit."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import agentgym
from agentgym.cli import app
from agentgym.errors import ConfigError
from agentgym.registry import env_argument_error

runner = CliRunner()
RANDOM = ["rollout", "--env", "Sokoban-LLM-v0", "--policy", "random", "--episodes", "1", "--concurrency", "1"]


def _one_error_line(result) -> str:
    """The command failed with one ``error:`` line and no traceback; that line."""
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize("value", ["banana", "[6]"])
def test_a_bad_dim_room_is_one_line(value: str) -> None:
    line = _one_error_line(runner.invoke(app, [*RANDOM, "-k", f"dim_room={value}"], terminal_width=400))
    assert line.startswith("error: dim_room must be a side (7) or [height, width] ([7, 8]), got ")


def test_an_unknown_env_argument_lists_the_accepted_ones() -> None:
    line = _one_error_line(runner.invoke(app, [*RANDOM, "-k", "dimroom=7"], terminal_width=400))
    assert line.startswith("error: Sokoban-LLM-v0 has no argument 'dimroom' (did you mean dim_room?); "
                           "it takes dim_room=(6, 6), num_boxes=1, max_turns=30")


def test_play_names_the_unknown_argument_too() -> None:
    line = _one_error_line(runner.invoke(app, ["play", "Sokoban-LLM-v0", "-k", "colour=red"], terminal_width=400))
    assert "Sokoban-LLM-v0 has no argument 'colour'; it takes dim_room=(6, 6)" in line


class PickyEnv:
    """An env whose constructor raises a plain ValueError (not our ConfigError)."""

    def __init__(self, size: int = 3) -> None:
        raise ValueError(f"size {size} is not a size I like")


def test_an_env_s_own_value_error_becomes_a_config_error() -> None:
    agentgym.register("Picky-LLM-v0", f"{__name__}:PickyEnv", family="test", description="Refuses.")
    error = env_argument_error("Picky-LLM-v0", {"size": 4}, ValueError("size 4 is not a size I like"))
    assert isinstance(error, ConfigError)
    assert str(error) == "Picky-LLM-v0 cannot use size=4: size 4 is not a size I like; it takes size=3."
    line = _one_error_line(runner.invoke(app, ["play", "Picky-LLM-v0", "-k", "size=4"], terminal_width=400))
    assert line == "error: Picky-LLM-v0 cannot use size=4: size 4 is not a size I like; it takes size=3."


# -- one column order for the rollout and eval tables -------------------------------------------

def test_rollout_and_eval_tables_share_one_column_order() -> None:
    from agentgym.cli.eval_cmd import result_table, summarize
    from agentgym.cli.rollout_cmd import _summary

    order = ["episodes", "success rate", "mean reward", "mean turns", "invalid actions", "failed"]
    result = summarize([], env_id="Sokoban-LLM-v0", env_kwargs={}, policy="random", seed_offset=0, temperature=0.0)
    assert [column.header for column in _summary("Sokoban-LLM-v0", "random", []).columns] == order
    assert [column.header for column in result_table(result).columns] == order


# -- agentgym train's closing line ----------------------------------------------------------------

def _closing_line(metrics: list[dict[str, float]], capsys: pytest.CaptureFixture[str], tmp_path) -> str:
    from types import SimpleNamespace

    from agentgym.cli.train_cmd import _print_result

    config = SimpleNamespace(run=SimpleNamespace(out=str(tmp_path)), rollout=SimpleNamespace(env_id=None))
    _print_result(config, SimpleNamespace(metrics=metrics, out=str(tmp_path), final_model=None))
    return " ".join(capsys.readouterr().out.split()).split(" Metrics:")[0]


def test_train_names_the_success_rate_first_and_explains_a_falling_reward(capsys, tmp_path) -> None:
    line = _closing_line([{"success": 0.47, "reward": 0.503}, {"success": 0.91, "reward": 0.453}], capsys, tmp_path)
    assert line == ("Success rate 47% -> 91% (first step -> last); mean reward 0.503 -> 0.453 (the env's own "
                    "reward, which success need not raise: Bandit's is a random payout).")


def test_train_s_closing_line_without_the_remark_when_reward_follows_success(capsys, tmp_path) -> None:
    line = _closing_line([{"success": 0.2, "reward": 0.1}, {"success": 0.6, "reward": 0.5}], capsys, tmp_path)
    assert line == "Success rate 20% -> 60% (first step -> last); mean reward 0.100 -> 0.500."
