"""The env server image: built offline on the sandbox image, serving an env from a container."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request

import pytest
from sandbox_helpers import require_docker

import agentgym
from agentgym.interop.image import CONTAINER_PORT, distributions_to_copy
from agentgym.interop.openenv_server import AgentGymEnvClient
from agentgym.serve.launch import free_port

IMAGE = "agentgym-env:test"


def test_the_image_carries_the_serving_stack_but_not_the_web_ui() -> None:
    names = {dist.metadata["Name"].lower() for dist in distributions_to_copy()}
    assert {"openenv-core", "fastapi", "uvicorn", "gymnasium", "pydantic"} <= names
    assert "gradio" not in names and "torch" not in names


@pytest.mark.docker
@pytest.mark.slow
def test_a_container_serves_an_env_as_gym_make_plays_it() -> None:
    require_docker()
    from agentgym.sandbox.docker import connect

    from agentgym.interop.image import build_env_image

    port = free_port()
    with contextlib.closing(connect()) as api:
        build_env_image(api, IMAGE, force=True, progress=lambda line: None)
        container = api.create_container(
            IMAGE, command=["GuessNumber-LLM-v0", "-k", "max_turns=4"], ports=[CONTAINER_PORT],
            host_config=api.create_host_config(port_bindings={CONTAINER_PORT: ("127.0.0.1", port)}))
        try:
            api.start(container)
            url = f"http://127.0.0.1:{port}"
            _wait_for_health(url, api, container)
            moves = ["<answer>50</answer>", "<answer>25</answer>", "<answer>75</answer>", "<answer>10</answer>"]
            local = agentgym.make("GuessNumber-LLM-v0", max_turns=4)
            with AgentGymEnvClient(base_url=url).sync() as client:
                assert client.reset(seed=4).observation.text == local.reset(seed=4)[0]
                for move in moves:
                    result = client.step(move)
                    observation, reward, terminated, truncated, _ = local.step(move)
                    assert (result.observation.text, result.reward, result.done) == \
                        (observation, reward, terminated or truncated)
                    if result.done:
                        break
            user = api.inspect_container(container)["Config"]["User"]
            assert user.split(":")[0] == "61000"  # the sandbox user, not root
        finally:
            api.remove_container(container, force=True)


def _wait_for_health(url: str, api: object, container: object) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            health = json.loads(urllib.request.urlopen(f"{url}/health", timeout=2).read())
            if health.get("status") == "healthy":
                return
        except OSError:
            time.sleep(0.3)
    logs = api.logs(container).decode(errors="replace")[-2000:]  # type: ignore[attr-defined]
    raise AssertionError(f"the container did not serve: {logs}")
