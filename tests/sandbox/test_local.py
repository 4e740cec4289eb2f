"""LocalSandbox: which mode it picks, what it says about itself, and its own errors."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest
from sandbox_helpers import LIMITS, require_bwrap

from agentgym.errors import SandboxUnavailable
from agentgym.sandbox import LocalSandbox


def test_it_uses_bubblewrap_when_it_works() -> None:
    require_bwrap()
    sandbox = LocalSandbox(LIMITS)
    assert sandbox.name == "bubblewrap" and "no network" in sandbox.isolation


def test_the_subprocess_mode_says_it_isolates_least() -> None:
    sandbox = LocalSandbox(LIMITS, use_bwrap=False)
    assert sandbox.name == "subprocess"
    assert "host's files and network are reachable" in sandbox.isolation


def test_the_docstring_says_plainly_that_it_isolates_less() -> None:
    from agentgym.sandbox import local

    assert "It isolates less" in (local.__doc__ or "")
    assert "isolates less" in (LocalSandbox.__doc__ or "")


def test_a_missing_interpreter_is_unavailable() -> None:
    with pytest.raises(SandboxUnavailable, match=r"No Python interpreter at /nonexistent/python3"):
        LocalSandbox(python="/nonexistent/python3")


def test_the_work_dir_is_removed_after_the_run() -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    result = LocalSandbox(LIMITS, use_bwrap=False).run(
        f"import os\nos.makedirs('a/b')\nopen('a/b/{marker}', 'w').close()\nos.chmod('a', 0)\n"
        "print(os.getcwd())")
    assert result.ok and result.stdout.startswith("/")
    # Where the run's dir was on the host (with private mounts the run sees it as /tmp).
    assert not list(Path(tempfile.gettempdir()).glob(f"agentgym-sandbox-*/a/b/{marker}"))
