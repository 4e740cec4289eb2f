"""Sandboxes for the tests: one shared Docker pool, the local backends, and a leak check.

Docker tests are marked ``docker``. Without an engine and the image they skip
with the reason; with ``AGENTGYM_REQUIRE_DOCKER=1`` (set by CI) they fail
instead, so a broken engine cannot pass as skipped tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from sandbox_helpers import LIMITS, require_bwrap, require_docker

from agentgym.sandbox import DockerSandbox, LocalSandbox, Sandbox
from agentgym.sandbox.docker import docker_problem

@pytest.fixture(scope="session", autouse=True)
def no_container_left_behind() -> Iterator[None]:
    """After the session, no sandbox container made by this process may remain.

    The sandboxes that code envs and python tools share
    (:mod:`agentgym.sandbox.shared`) are closed at interpreter exit, which comes
    after this check: close them here first, as exit would.
    """
    yield
    if docker_problem() is not None:
        return
    from agentgym.sandbox.shared import close_all

    close_all()
    from agentgym.sandbox.container import owner_label, sandbox_containers
    from agentgym.sandbox.docker import connect

    with contextlib.closing(connect()) as api:
        mine = [info["Id"][:12] for info in sandbox_containers(api, include_live=True)
                if info["Labels"].get("agentgym.sandbox.owner") == owner_label()]
    assert not mine, f"sandbox containers left behind: {mine}"


@pytest.fixture(scope="session")
def docker_sandbox() -> Iterator[DockerSandbox]:
    """The Docker pool every docker test shares (starting containers is the slow part)."""
    require_docker()
    with DockerSandbox(LIMITS, pool_size=4, max_containers=16) as sandbox:
        yield sandbox


@pytest.fixture(scope="session")
def bwrap_sandbox() -> LocalSandbox:
    require_bwrap()
    return LocalSandbox(LIMITS, use_bwrap=True)


@pytest.fixture(scope="session")
def subprocess_sandbox() -> LocalSandbox:
    return LocalSandbox(LIMITS, use_bwrap=False)


@pytest.fixture
def sandbox(request: pytest.FixtureRequest) -> Sandbox:
    """The sandbox named by the test's ``backend`` parameter."""
    name = {"docker": "docker_sandbox", "bubblewrap": "bwrap_sandbox",
            "subprocess": "subprocess_sandbox"}[request.param]
    return request.getfixturevalue(name)
