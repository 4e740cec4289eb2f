"""openenv:URL ids: an OpenEnv server played as an agentgym env (ours, someone else's, broken ones)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest
from openenv_faults import fault_server

import agentgym
from agentgym.errors import ConfigError, RemoteEnvError
from agentgym.interop.openenv_server import OpenEnvServerThread
from agentgym.rollout import ScriptedPolicy
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.serve.launch import free_port

ENV_ID = "Sokoban-LLM-v0"
MOVES = ["<answer>Up</answer>", "<answer>Left</answer>", "bad", "<answer>Down</answer>"] * 3


@pytest.fixture(scope="module")
def sokoban_url() -> Iterator[str]:
    with OpenEnvServerThread(ENV_ID, {"max_turns": 6}) as server:
        yield server.url


@pytest.fixture(scope="module")
def faults() -> Iterator[str]:
    with fault_server() as url:
        yield url


def _episode(env: gym.Env, seed: int) -> list[tuple]:
    played: list[tuple] = [env.reset(seed=seed), env.get_wrapper_attr("instructions")]
    for move in MOVES:
        step = env.step(move)
        played.append(step)
        if step[2] or step[3]:
            return played
    raise AssertionError("the episode did not end")


@pytest.mark.parametrize("seed", [0, 3])
def test_an_agentgym_server_plays_as_the_env_does_in_process(sokoban_url: str, seed: int) -> None:
    remote = agentgym.make(f"openenv:{sokoban_url}")
    local = agentgym.make(ENV_ID, max_turns=6)
    assert _episode(remote, seed) == _episode(local, seed)
    remote.close()


def test_gymnasium_makes_it_by_its_registered_id(sokoban_url: str) -> None:
    env = gym.make("agentgym:OpenEnv-LLM-v0", base_url=sokoban_url)
    assert env.reset(seed=2)[0] == agentgym.make(ENV_ID).reset(seed=2)[0]
    env.close()


def test_the_rollout_manager_records_the_same_rows(sokoban_url: str) -> None:
    def rows(env_id: str, **kwargs: object) -> list[tuple]:
        config = RolloutConfig(env_id=env_id, env_kwargs=dict(kwargs), episodes=4, group_size=2, seed=1)
        # A move chosen by the observation, so episodes playing at once do not share a list.
        policy = ScriptedPolicy(lambda observation: MOVES[len(observation) % len(MOVES)])
        played = asyncio.run(EnvManager(config, policy).run())
        return sorted((row.seed, row.reward, row.turn_rewards, row.num_turns, row.success, row.truncated,
                       [message.content for message in row.messages], row.error) for row in played)

    remote = rows(f"openenv:{sokoban_url}")
    assert remote == rows(ENV_ID, max_turns=6)
    assert all(row[-1] is None for row in remote)


@pytest.mark.parametrize(("mode", "reason"), [
    ("numbers", r"no text field .* move_id \(integer\).*json_actions=true"),
    ("listobs", r"observation is a JSON array, not an object"),
    ("notutf8", r"not UTF-8"),
])
def test_what_cannot_be_mapped_or_read_is_named(faults: str, mode: str, reason: str) -> None:
    env = agentgym.make(f"openenv:{faults}/{mode}")
    with pytest.raises(RemoteEnvError, match=reason):
        env.reset(seed=0)


@pytest.mark.parametrize(("mode", "reason"), [
    ("drop", r"closed the session during a step \(the connection dropped"),
    ("slow", r"did not answer a step within 1 s"),
    ("binary", r"not UTF-8"),
    ("badreward", r"reward 'lots' is not a number"),
])
def test_a_failing_server_fails_the_episode_with_its_reason_and_the_run_goes_on(
        faults: str, mode: str, reason: str) -> None:
    config = RolloutConfig(env_id=f"openenv:{faults}/{mode}", env_kwargs={"timeout": 1.0}, episodes=2,
                           episode_timeout=60)
    rows = asyncio.run(EnvManager(config, ScriptedPolicy(["hello"] * 4)).run())
    assert len(rows) == 2
    for row in rows:
        assert row.stop_reason == "error" and row.error is not None
        assert re.search(reason, row.error), row.error


def test_json_actions_fill_a_typed_action(faults: str) -> None:
    env = agentgym.make(f"openenv:{faults}/numbers", json_actions=True)
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step("not json at all")
    assert info["action_valid"] is False and not terminated and "JSON object" in observation
    observation, reward, terminated, _, info = env.step('I pick {"move_id": 3}')
    assert (reward, terminated, info["action_valid"]) == (1.0, True, True)


def test_a_plain_text_server_maps_its_fields(faults: str) -> None:
    env = agentgym.make(f"openenv:{faults}/ok")
    assert env.reset(seed=0)[0] == "start"
    assert "`message`" in env.get_wrapper_attr("instructions")
    observation, reward, terminated, truncated, info = env.step("hi there")
    assert (observation, reward, terminated, truncated, info["success"]) == ("hi there", 1.0, True, False, False)


@pytest.mark.parametrize(("env_id", "message"), [
    ("openenv:ftp://host", "not the URL of an OpenEnv server"),
    ("openenv:", "names no env after openenv:"),
    ("openenv:http://127.0.0.1:notaport", "bad port"),
    ("opnenv:http://127.0.0.1:1", "Did you mean 'openenv:http://127.0.0.1:1'"),
])
def test_a_bad_id_is_one_line(env_id: str, message: str) -> None:
    with pytest.raises(agentgym.AgentGymError, match=message) as caught:
        agentgym.make(env_id)
    assert "\n" not in str(caught.value)


def test_an_unreachable_server_fails_the_reset_not_the_make() -> None:
    env = agentgym.make(f"openenv:http://127.0.0.1:{free_port()}", timeout=2)
    with pytest.raises(RemoteEnvError, match="Is the server running"):
        env.reset(seed=0)
    with pytest.raises(ConfigError, match="timeout"):
        agentgym.make("openenv:http://127.0.0.1:1", timeout=0)


DIPG_ROW = {"messages": [
    {"role": "user", "content": "<context>Drug A is approved for DIPG in trial X.</context>"
                                "<question>Which drug is approved?</question>"},
    {"role": "assistant", "content": "Drug A"}]}


@pytest.fixture(scope="module")
def dipg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """DIPG Safety Gym (openenv-dipg-safety on PyPI, by another author), started on loopback
    with a two-row data set instead of its hub one."""
    folder = tmp_path_factory.mktemp("dipg")
    data = folder / "data.jsonl"
    data.write_text("\n".join(json.dumps(DIPG_ROW) for _ in range(2)) + "\n")
    port = free_port()
    env = {**os.environ, "DIPG_DATASET_PATH": str(data), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    url = f"http://127.0.0.1:{port}"
    with (folder / "server.log").open("w") as log:
        process = subprocess.Popen([sys.executable, "-m", "uvicorn", "med_safety_gym.app:app", "--host",
                                    "127.0.0.1", "--port", str(port), "--log-level", "warning"], cwd=folder,
                                   env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            _wait_for(url, process, folder / "server.log")
            yield url
        finally:
            process.terminate()
            process.wait(30)


def _wait_for(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the DIPG server exited: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the DIPG server did not start: {log.read_text()[-2000:]}")


def test_someone_elses_openenv_env_plays_through_the_rollout_manager(
        dipg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = agentgym.make(f"openenv:{dipg_url}")
    observation, _ = env.reset(seed=0)
    assert observation == ("context: Drug A is approved for DIPG in trial X.\n"
                           "question: Which drug is approved?")
    assert "`llm_response`" in env.get_wrapper_attr("instructions")
    env.close()
    answer = ("<|channel|>analysis<|message|>The context names drug A.<|end|>"
              "<|channel|>proof<|message|>Drug A is approved for DIPG in trial X.<|end|>"
              "<|channel|>final<|message|>Drug A<|end|>")
    config = RolloutConfig(env_id=f"openenv:{dipg_url}", episodes=2, concurrency=1)
    rows = asyncio.run(EnvManager(config, ScriptedPolicy(lambda observation: answer)).run())
    assert [row.error for row in rows] == [None, None]
    assert all(row.num_turns == 1 and row.stop_reason == "terminated" for row in rows)
    assert [row.reward for row in rows] == [_dipg_reward_in_process(answer, tmp_path, monkeypatch)] * 2


def _dipg_reward_in_process(answer: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> float:
    """What DIPG's own environment, built as its server builds it, rewards ``answer`` with."""
    data = folder / "data.jsonl"
    data.write_text(json.dumps(DIPG_ROW) + "\n")
    monkeypatch.setenv("DIPG_DATASET_PATH", str(data))
    monkeypatch.setattr(sys, "argv", ["dipg"])  # its config reads the command line too
    from med_safety_gym.app import get_environment
    from med_safety_gym.models import DIPGAction

    env = get_environment()
    env.reset()
    return float(env.step(DIPGAction(llm_response=answer)).reward)
