"""open_sandbox: Docker when it can, else local, and says which."""

from __future__ import annotations

import logging

import pytest
from sandbox_helpers import LIMITS, require_docker

from agentgym.errors import ConfigError
from agentgym.sandbox import DockerSandbox, LocalSandbox, open_sandbox


def test_auto_falls_back_to_local_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    with (caplog.at_level(logging.WARNING, logger="agentgym.sandbox"),
          open_sandbox(limits=LIMITS, docker_host="unix:///nonexistent/docker.sock") as sandbox):
        assert isinstance(sandbox, LocalSandbox)
        assert sandbox.run("print('local')").stdout == "local\n"
    assert "Docker sandbox unavailable (No Docker engine answers" in caplog.text
    assert f"Using the local sandbox ({sandbox.name}), which isolates less" in caplog.text


@pytest.mark.docker
def test_auto_takes_docker_when_it_is_here(caplog: pytest.LogCaptureFixture) -> None:
    require_docker()
    with (caplog.at_level(logging.INFO, logger="agentgym.sandbox"),
          open_sandbox(limits=LIMITS, pool_size=1, use_bwrap=False) as sandbox):
        assert isinstance(sandbox, DockerSandbox) and sandbox.name == "docker"
        assert sandbox.run("print('docker')").stdout == "docker\n"
    assert "Using the Docker sandbox" in caplog.text


def test_local_takes_local_options() -> None:
    with open_sandbox("local", LIMITS, use_bwrap=False) as sandbox:
        assert sandbox.name == "subprocess" and sandbox.limits == LIMITS


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    (("podman",), {}, r"backend must be one of auto, docker, local, remote, or sandbox service "
                       r"URLs \('http://host:8100,...'\); got 'podman'"),
    (("local",), {"pool_size": 2},
     r"open_sandbox\(backend='local'\) does not take pool_size; it takes python, use_bwrap"),
    (("auto",), {"colour": "red"}, r"does not take colour"),
])
def test_wrong_arguments_are_config_errors(args: tuple, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        open_sandbox(*args, **kwargs)
