"""agentgym env serve's bad input, and agentgym list's rows for envs from outside."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agentgym.cli import app

runner = CliRunner()


@pytest.mark.parametrize(("args", "message"), [
    (["env", "serve", "Sokobn-LLM-v0"], "Did you mean 'Sokoban-LLM-v0'"),
    (["env", "serve", "Sokoban-LLM-v0", "-k", "dim_rom=6"], "has no argument 'dim_rom'"),
    (["env", "serve", "Sokoban-LLM-v0", "--host", "0.0.0.0"], "Refusing to bind 0.0.0.0"),
    (["env", "serve", "Sokoban-LLM-v0", "--port", "0"], "--port must be between 1 and 65535"),
    (["env", "serve", "Sokoban-LLM-v0", "--idle-timeout", "-1"], "--idle-timeout must be 0"),
    (["env", "serve", "openenv:ftp://x"], "not the URL of an OpenEnv server"),
])
def test_bad_serve_input_is_one_line(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert result.output.strip().count("\n") == 0


def test_list_shows_the_sources_of_envs_from_outside() -> None:
    result = runner.invoke(app, ["list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "openenv:http://HOST:PORT" in result.output and "verifiers:NAME" in result.output
    assert "rm:ENV_ID" in result.output and "reward_model=FOLDER" in result.output
    only = runner.invoke(app, ["list", "--family", "verifiers"], env={"COLUMNS": "200"})
    assert "verifiers:NAME" in only.output and "openenv:" not in only.output and "Sokoban" not in only.output
