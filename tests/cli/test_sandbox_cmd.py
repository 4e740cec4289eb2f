"""``agentgym sandbox check | clean | build``."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys

import pytest
from sandbox_helpers import require_docker
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.sandbox.container import LABEL, LABEL_OWNER
from agentgym.sandbox.docker import connect
from agentgym.sandbox.image import DEFAULT_IMAGE

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich wraps table cells to the terminal's width; keep each cell on one line."""
    monkeypatch.setenv("COLUMNS", "300")


def test_check_shows_each_part_and_the_backend_it_would_use() -> None:
    result = runner.invoke(app, ["sandbox", "check"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for part in ("docker engine", "bubblewrap", "debootstrap", "cached root filesystem",
                 "open_sandbox() would use:"):
        assert part in result.output


def test_check_names_the_fix_for_a_missing_engine() -> None:
    result = runner.invoke(app, ["sandbox", "check", "--docker-host", "unix:///nonexistent.sock"],
                           terminal_width=300)
    assert "No Docker engine answers at unix:///nonexistent.sock" in result.output
    assert "open_sandbox() would use: bubblewrap" in result.output or "subprocess" in result.output


@pytest.mark.docker
def test_check_reports_the_image() -> None:
    require_docker()
    result = runner.invoke(app, ["sandbox", "check"], terminal_width=200)
    assert f"image {DEFAULT_IMAGE}" in result.output and "present" in result.output
    assert "open_sandbox() would use: docker" in result.output


@pytest.mark.docker
def test_build_leaves_an_existing_image_alone() -> None:
    require_docker()
    result = runner.invoke(app, ["sandbox", "build"], terminal_width=200)
    assert result.exit_code == 0 and "is already there" in result.output


@pytest.mark.docker
def test_clean_removes_leftovers_and_keeps_live_sandboxes() -> None:
    require_docker()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    host = socket.gethostname()
    with contextlib.closing(connect()) as api:
        def make(owner: str) -> str:
            return api.create_container(DEFAULT_IMAGE, command=["true"],
                                        labels={LABEL: "1", LABEL_OWNER: owner})["Id"]

        leftover, live = make(f"{host}:{dead}"), make(f"{host}:{os.getpid()}")
        try:
            result = runner.invoke(app, ["sandbox", "clean"], terminal_width=200)
            assert result.exit_code == 0 and "Removed 1 sandbox container." in result.output
            ids = {info["Id"] for info in api.containers(all=True, filters={"label": f"{LABEL}=1"})}
            assert leftover not in ids and live in ids
        finally:
            api.remove_container(live, force=True)
            with contextlib.suppress(Exception):
                api.remove_container(leftover, force=True)
