"""agentgym envs as OpenEnv servers, driven by OpenEnv's own client classes."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from openenv.core import GenericEnvClient

import agentgym
from agentgym.interop.openenv_server import AgentGymAction, AgentGymEnvClient, OpenEnvServerThread
from agentgym.interop.textwire import jsonable

ENV_ID, KWARGS = "Sokoban-LLM-v0", {"dim_room": 6}
TOOL_ENV_ID = "SearchQA-LLM-v0"  # wrapped with a search tool by its make function
MOVES = ["<answer>Up</answer>", "no move here", "<answer>Left</answer>", "<answer>Down</answer>",
         "<answer>Right</answer>", "<answer>Up</answer>"]
IDLE_TIMEOUT = 3.0


@pytest.fixture(scope="module")
def server() -> Iterator[OpenEnvServerThread]:
    with OpenEnvServerThread(ENV_ID, KWARGS, max_sessions=8, idle_timeout=IDLE_TIMEOUT) as running:
        yield running


def _local_episode(env_id: str, kwargs: dict, seed: int, moves: list[str]) -> list[tuple]:
    env = agentgym.make(env_id, **kwargs)
    observation, info = env.reset(seed=seed)
    played = [(observation, env.get_wrapper_attr("instructions"), jsonable(info))]
    for move in moves:
        observation, reward, terminated, truncated, info = env.step(move)
        played.append((observation, float(reward), terminated, truncated, jsonable(info)))
        if terminated or truncated:
            break
    return played


def _served_episode(url: str, seed: int, moves: list[str]) -> list[tuple]:
    with AgentGymEnvClient(base_url=url).sync() as client:
        first = client.reset(seed=seed).observation
        played = [(first.text, first.instructions, first.info)]
        for move in moves:
            result = client.step(AgentGymAction(text=move))
            seen = result.observation
            played.append((seen.text, result.reward, seen.terminated, seen.truncated, seen.info))
            assert result.done == (seen.terminated or seen.truncated)
            if result.done:
                break
    return played


@pytest.mark.parametrize("seed", [0, 5])
def test_openenvs_client_sees_what_gym_make_gives(server: OpenEnvServerThread, seed: int) -> None:
    assert _served_episode(server.url, seed, MOVES) == _local_episode(ENV_ID, KWARGS, seed, MOVES)


def test_a_tool_wrapped_env_is_served_with_its_tools() -> None:
    moves = ["<search>capital</search>", "<answer>I do not know</answer>"]
    with OpenEnvServerThread(TOOL_ENV_ID) as tool_server:
        served = _served_episode(tool_server.url, 3, moves)
    local = _local_episode(TOOL_ENV_ID, {}, 3, moves)
    assert served == local
    assert "search" in served[0][1]  # the tool wrapper's part of the instructions
    assert local[1][4]["tool_turn"] is True


def test_the_generic_client_and_the_routes_speak_openenv(server: OpenEnvServerThread) -> None:
    with GenericEnvClient(base_url=server.url).sync() as client:
        first = client.reset(seed=1)
        result = client.step({"text": "<answer>Up</answer>"})
        state = client.state()
    assert first.observation["text"] == agentgym.make(ENV_ID, **KWARGS).reset(seed=1)[0]
    assert isinstance(result.reward, float) and state["step_count"] == 1 and state["seed"] == 1
    schema = json.loads(urllib.request.urlopen(f"{server.url}/schema", timeout=10).read())
    assert schema["action"]["required"] == ["text"]
    assert {"text", "instructions", "info", "terminated", "truncated"} <= set(schema["observation"]["properties"])
    health = json.loads(urllib.request.urlopen(f"{server.url}/health", timeout=10).read())
    assert health["status"] == "healthy"


def test_sessions_run_at_once_each_with_its_own_env(server: OpenEnvServerThread) -> None:
    seeds = [0, 1, 2, 3]
    with ThreadPoolExecutor(len(seeds)) as pool:
        served = list(pool.map(lambda seed: _served_episode(server.url, seed, MOVES[:3]), seeds))
    assert served == [_local_episode(ENV_ID, KWARGS, seed, MOVES[:3]) for seed in seeds]


def test_stepping_before_reset_is_the_servers_error_not_a_hang(server: OpenEnvServerThread) -> None:
    with AgentGymEnvClient(base_url=server.url).sync() as client:
        with pytest.raises(RuntimeError, match=r"step\(\) before calling env.reset\(\).*EXECUTION_ERROR"):
            client.step("<answer>Up</answer>")
        assert client.reset(seed=0).observation.text  # the session still works


@pytest.mark.slow
def test_an_idle_session_is_closed(server: OpenEnvServerThread) -> None:
    with AgentGymEnvClient(base_url=server.url).sync() as client:
        client.reset(seed=0)
        # OpenEnv's reaper looks every max(timeout / 4, 5) seconds.
        time.sleep(IDLE_TIMEOUT + 6)
        with pytest.raises(RuntimeError, match="session was closed"):
            client.step("<answer>Up</answer>")
