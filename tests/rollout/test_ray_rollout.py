"""Rollouts on Ray actors: a real local Ray instance, a real stub server, real Parquet."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.errors import ConfigError, MissingDependencyError, RolloutWorkerError
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policies import RandomPolicy
from agentgym.rollout.policy import OpenAIPolicy
from agentgym.rollout.ray_rollout import (
    PolicySpec,
    RayOptions,
    RolloutActors,
    import_ray,
    ray_session,
    run_on_ray,
    split_by_group,
)
from agentgym.rollout.rows import TrajectoryRow
from agentgym.rollout.storage import read_rows
from agentgym.serve.stub import StubServer
from fakes import played_moves

CONFIG = {"env_id": "Sokoban-LLM-v0", "episodes": 8, "group_size": 2, "concurrency": 4, "max_turns": 3}


@pytest.fixture(scope="module")
def local_ray() -> Iterator[RayOptions]:
    """One private Ray instance for the module, shut down after. Four logical CPUs
    (Ray's bookkeeping, not cores): two for the kept actors, two for the CLI's."""
    with ray_session(RayOptions(address="local", actors=2, local_cpus=4)) as options:
        yield options


@pytest.fixture(scope="module")
def actors(local_ray: RayOptions) -> Iterator[RolloutActors]:
    """Two actors kept for the module's runs, as a training loop keeps them between steps."""
    with RolloutActors(2, this_node=True) as kept:
        yield kept


def _on_ray(config: RolloutConfig, spec: PolicySpec, options: RayOptions, actors: RolloutActors,
            skip: set[tuple[int, int]] = frozenset()) -> list[TrajectoryRow]:
    rows: list[TrajectoryRow] = []
    played = asyncio.run(run_on_ray(config, spec, options, on_episode=rows.extend, skip=skip, actors=actors))
    assert played == len({row.key for row in rows})
    return rows


def _stub_spec(stub: StubServer, tiny_model: str) -> PolicySpec:
    return PolicySpec(base_urls=(stub.base_url,), model="stub", tokenizer=tiny_model)


def _tokens(rows: list[TrajectoryRow]) -> dict[tuple[int, int, int], tuple[list[int], list[int], list[int]]]:
    return {(*row.key, row.row_index): (row.prompt_ids, row.completion_ids, row.completion_mask) for row in rows}


def test_split_keeps_groups_whole_and_deals_them_round_robin() -> None:
    keys = [(group, index) for group in range(5) for index in range(2)]
    shares = split_by_group(keys, 2)
    assert [sorted({group for group, _ in share}) for share in shares] == [[0, 2, 4], [1, 3]]
    assert sorted(key for share in shares for key in share) == keys
    assert split_by_group(keys[:2], 3) == [keys[:2]]  # no actor without work


def test_two_actors_play_exactly_the_episodes_of_a_local_run(
        local_ray: RayOptions, actors: RolloutActors, stub: StubServer, renderer: ChatRenderer, tiny_model: str) -> None:
    config = RolloutConfig(**CONFIG)

    async def local() -> list[TrajectoryRow]:
        async with OpenAIPolicy(stub.base_url, "stub") as policy:
            return await EnvManager(config, policy, renderer=renderer).run()

    expected = asyncio.run(local())
    rows = _on_ray(config, _stub_spec(stub, tiny_model), local_ray, actors)
    keys = [row.key for row in rows if row.row_index == 0]
    assert len(keys) == len(set(keys)) == config.episodes  # none duplicated, none missing
    assert set(keys) == set(config.episode_keys())
    assert all(row.error is None for row in rows)
    assert _tokens(rows) == _tokens(expected)  # the same token ids, turn for turn


def test_resume_plays_only_the_episodes_not_yet_written(
        local_ray: RayOptions, actors: RolloutActors, stub: StubServer, tiny_model: str) -> None:
    config = RolloutConfig(**CONFIG)
    written = {(0, 0), (0, 1), (1, 0), (1, 1), (3, 0)}
    rows = _on_ray(config, _stub_spec(stub, tiny_model), local_ray, actors, skip=written)
    assert {row.key for row in rows} == set(config.episode_keys()) - written


def test_a_model_free_policy_plays_on_ray_without_a_tokenizer(local_ray: RayOptions,
                                                                actors: RolloutActors) -> None:
    config = RolloutConfig(**CONFIG)
    rows = _on_ray(config, PolicySpec(model_free=RandomPolicy(seed=0), tokenizer=None), local_ray, actors)
    assert sorted(row.key for row in rows) == config.episode_keys()
    assert all(row.num_turns >= 1 and row.completion_ids == [] for row in rows)
    # Each episode draws from its own RNG, so it plays the same moves on whichever actor it lands.
    local = asyncio.run(EnvManager(config, RandomPolicy(seed=0)).run())
    assert played_moves(rows) == played_moves(local)


def test_a_failing_actor_is_a_clear_error(local_ray: RayOptions, actors: RolloutActors, stub: StubServer, tmp_path: Path) -> None:
    spec = PolicySpec(base_urls=(stub.base_url,), model="stub", tokenizer=str(tmp_path / "no-tokenizer"))
    with pytest.raises(RolloutWorkerError, match="A Ray actor playing episodes failed.*--resume"):
        _on_ray(RolloutConfig(**CONFIG), spec, local_ray, actors)


def test_bad_settings_name_the_fix() -> None:
    with pytest.raises(ConfigError, match="base_urls"):
        PolicySpec()
    with pytest.raises(ConfigError, match="ray actors"):
        RayOptions(actors=0)


def test_more_actors_than_the_cluster_has_cpus_is_refused(local_ray: RayOptions) -> None:
    with pytest.raises(ConfigError, match="the cluster has 4. Ask for fewer actors"):
        RolloutActors(9)


def test_a_missing_ray_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` sees when it is not installed
    with pytest.raises(MissingDependencyError, match=r"scripts/setup.sh ray \(from the agentgym repository root; or: pip install ray\)"):
        import_ray()


def test_cli_rollout_on_ray_resumes_a_local_run(local_ray: RayOptions, stub: StubServer, tmp_path: Path) -> None:
    out = tmp_path / "rows.parquet"
    common = ["rollout", "--env", "Sokoban-LLM-v0", "--base-url", stub.base_url, "--model", "tiny",
              "--group-size", "2", "--max-turns", "2", "--out", str(out), "--show", "0"]
    first = CliRunner().invoke(app, [*common, "--episodes", "4"])  # no Ray
    assert first.exit_code == 0, first.output
    second = CliRunner().invoke(app, [*common, "--episodes", "8", "--resume", "--ray", "local", "--ray-actors", "2"])
    assert second.exit_code == 0, second.output
    rows = read_rows(out)
    keys = [row.key for row in rows if row.row_index == 0]
    assert sorted(keys) == RolloutConfig(**{**CONFIG, "max_turns": 2}).episode_keys()  # each once
    assert all(row.error is None and row.completion_ids for row in rows)


def test_cli_ray_actors_without_ray_is_refused() -> None:
    result = CliRunner().invoke(app, ["rollout", "--env", "Sokoban-LLM-v0", "--policy", "random",
                                      "--ray-actors", "2"])
    assert result.exit_code != 0
    assert "--ray-actors needs --ray" in result.output


def test_a_bare_ray_flag_means_a_local_ray_instance() -> None:
    """`--ray` with no address (at the end, or before another option) reads as `--ray local`."""
    from agentgym.cli.rollout_cmd import expand_bare_ray

    assert expand_bare_ray(["rollout", "--env", "E", "--ray"]) == ["rollout", "--env", "E", "--ray", "local"]
    assert expand_bare_ray(["rollout", "--ray", "--episodes", "4"]) == ["rollout", "--ray", "local", "--episodes", "4"]
    assert expand_bare_ray(["rollout", "--ray", "auto"]) == ["rollout", "--ray", "auto"]
    assert expand_bare_ray(["train", "--ray"]) == ["train", "--ray"]  # only rollout has --ray


def test_the_agentgym_command_takes_a_bare_ray_flag() -> None:
    """The real entry point completes `--ray` before typer parses it: a misspelt env is the
    error reported, not a missing --ray value."""
    import subprocess

    result = subprocess.run([sys.executable, "-m", "agentgym", "rollout", "--env", "Sokobn-LLM-v0", "--ray"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "Did you mean" in result.stdout + result.stderr
    assert "requires an argument" not in result.stdout + result.stderr
