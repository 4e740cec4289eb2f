"""Limits, backend lists and skip rules shared by the tests that run sandboxes.

At the top of tests/ (not in a conftest, whose names collide) so that every test
folder can import it: the Docker skip rule lives here once.
"""

from __future__ import annotations

import os

import pytest

from agentgym.sandbox import Limits
from agentgym.sandbox.docker import docker_problem
from agentgym.sandbox.local import bwrap_path

__all__ = ["BACKENDS", "JAILED", "LIMITS", "require_bwrap", "require_docker"]

# Small enough that the bombs end fast, big enough for any honest test program.
LIMITS = Limits(timeout=20.0, memory_mb=256, pids=64, output_bytes=64_000)
BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), "bubblewrap", "subprocess"]
JAILED = [pytest.param("docker", marks=pytest.mark.docker), "bubblewrap"]


def require_docker() -> None:
    """Skip (or fail, under AGENTGYM_REQUIRE_DOCKER=1) when the Docker sandbox cannot run."""
    problem = docker_problem()
    if problem is None:
        return
    if os.environ.get("AGENTGYM_REQUIRE_DOCKER") == "1":
        pytest.fail(f"AGENTGYM_REQUIRE_DOCKER=1 but the Docker sandbox cannot run: {problem}")
    pytest.skip(f"no Docker sandbox here: {problem}")


def require_bwrap() -> None:
    if bwrap_path() is None:
        pytest.skip("bubblewrap is not installed or cannot create namespaces here")
