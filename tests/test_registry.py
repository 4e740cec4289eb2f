from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

import agentgym
from agentgym import registry
from agentgym.errors import ConfigError, DuplicateEnvError, PluginLoadWarning, UnknownEnvError


@pytest.fixture
def scratch_ids() -> Iterator[list[str]]:
    """Ids a test registers; removed from both registries afterwards."""
    ids: list[str] = []
    yield ids
    for env_id in ids:
        registry._ENVS.pop(env_id, None)
        gym.registry.pop(env_id, None)


def test_every_builtin_game_is_registered_with_metadata() -> None:
    games = {info.id: info for info in agentgym.list_envs(family="games")}
    assert {"Sokoban-LLM-v0", "FrozenLake-LLM-v0", "SlidingPuzzle-LLM-v0", "Bandit-LLM-v0",
            "Countdown-LLM-v0", "Wordle-LLM-v0", "Minesweeper-LLM-v0", "Sudoku-LLM-v0",
            "GuessNumber-LLM-v0"} <= games.keys()
    sokoban = games["Sokoban-LLM-v0"]
    assert sokoban.description and "planning" in sokoban.tags
    assert sokoban.source == "agentgym" and sokoban.needs == ()
    assert "Sokoban-LLM-v0" in gym.registry


def test_list_filters_by_tag() -> None:
    assert {info.id for info in agentgym.list_envs(tag="quickstart")} >= {"Bandit-LLM-v0"}
    assert agentgym.list_envs(family="no-such-family") == []


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("sokoban-llm-v0", "Sokoban-LLM-v0"), ("Sokobn-LLM-v0", "Sokoban-LLM-v0"),
     ("Sokoban-LLM-v1", "Sokoban-LLM-v0"), ("Wordle", "Wordle-LLM-v0")],
)
def test_misspelt_id_gets_did_you_mean(typed: str, meant: str) -> None:
    with pytest.raises(UnknownEnvError, match=f"Did you mean '{meant}'") as caught:
        agentgym.make(typed)
    assert caught.value.suggestions[0] == meant


def test_unknown_id_with_nothing_close_points_to_the_list() -> None:
    with pytest.raises(UnknownEnvError, match="registered as 'Zzz-v0'. Run `agentgym list`"):
        agentgym.env_info("Zzz-v0")


def test_register_is_idempotent_and_refuses_conflicts(scratch_ids: list[str]) -> None:
    scratch_ids.append("Twice-LLM-v0")
    first = agentgym.register("Twice-LLM-v0", "fakes:EchoEnv", family="test", description="x")
    assert agentgym.register("Twice-LLM-v0", "fakes:EchoEnv", family="test", description="x") is first
    with pytest.raises(DuplicateEnvError, match="registered already by agentgym as fakes:EchoEnv"):
        agentgym.register("Twice-LLM-v0", "other:Env", family="test", description="x")


@pytest.mark.parametrize(
    ("env_id", "entry_point", "needs", "message"),
    [
        ("no version", "a:B", (), "not of the form Name-vN"),
        ("Ok-LLM-v0", "no_colon", (), "module.path:ClassName"),
        ("Ok-LLM-v0", "a:B", ("quantum",), "known: "),
    ],
)
def test_register_validates_its_input(env_id: str, entry_point: str, needs: tuple, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        agentgym.register(env_id, entry_point, family="test", description="x", needs=needs)


def _write_plugin(root: Path, name: str, body: str) -> None:
    """A real installed distribution: a dist-info folder and a module on sys.path."""
    dist = root / f"{name}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[agentgym.envs]\n{name} = {name}_mod:register_envs\n")
    (root / f"{name}_mod.py").write_text(textwrap.dedent(body))


_GOOD_PLUGIN = """
    import agentgym

    def register_envs():
        agentgym.register("PluginEcho-LLM-v0", "fakes:EchoEnv", family="plugin",
                          description="An env from a plugin.", needs=("network",))
"""
_BROKEN_PLUGIN = """
    def register_envs():
        raise RuntimeError("this plugin is broken")
"""


def test_plugins_register_envs_and_broken_ones_only_warn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch_ids: list[str]
) -> None:
    scratch_ids.append("PluginEcho-LLM-v0")
    _write_plugin(tmp_path, "goodplug", _GOOD_PLUGIN)
    _write_plugin(tmp_path, "badplug", _BROKEN_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(PluginLoadWarning, match="'badplug'.*RuntimeError: this plugin is broken"):
        failures = agentgym.load_plugins()
    assert [failure.name for failure in failures] == ["badplug"]
    assert failures[0] in registry.plugin_failures()
    info = agentgym.env_info("PluginEcho-LLM-v0")
    assert (info.source, info.needs) == ("plugin goodplug", ("network",))
    assert gym.make("PluginEcho-LLM-v0").reset(seed=0)[0].startswith("The secret word")
    assert agentgym.load_plugins() == []  # each entry point loads once


def test_import_agentgym_survives_a_broken_plugin(tmp_path: Path) -> None:
    _write_plugin(tmp_path, "badplug", _BROKEN_PLUGIN)
    result = subprocess.run(
        [sys.executable, "-W", "default", "-c",
         "import gymnasium as gym, agentgym; print(gym.make('Sokoban-LLM-v0').reset(seed=0)[0][:6])"],
        capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path), "PATH": ""}, check=True,
    )
    assert result.stdout.strip() == "Level:"
    assert "PluginLoadWarning" in result.stderr and "this plugin is broken" in result.stderr
