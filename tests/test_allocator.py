"""agentgym.allocator: which malloc the server and the long commands run on, and the restart into it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym import allocator
from agentgym.allocator import (
    ALLOCATOR_ENV,
    allocator_env,
    preloaded_allocator,
    restart_with_allocator,
)
from agentgym.errors import ConfigError

TCMALLOC = "libtcmalloc_minimal.so.4"


@pytest.fixture
def with_tcmalloc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: TCMALLOC)


@pytest.fixture
def without_tcmalloc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: None)


def test_auto_preloads_tcmalloc_before_what_was_there(with_tcmalloc: None) -> None:
    env = allocator_env({"PATH": "/bin", "LD_PRELOAD": "libfoo.so"})
    assert env["LD_PRELOAD"] == f"{TCMALLOC} libfoo.so"
    assert env["PATH"] == "/bin"
    assert allocator_env({})["LD_PRELOAD"] == TCMALLOC


def test_auto_without_tcmalloc_changes_nothing(without_tcmalloc: None) -> None:
    assert allocator_env({"PATH": "/bin"}) == {"PATH": "/bin"}


def test_system_and_an_already_preloaded_malloc_are_kept(with_tcmalloc: None) -> None:
    assert "LD_PRELOAD" not in allocator_env({ALLOCATOR_ENV: "system"})
    mine = {"LD_PRELOAD": "/opt/lib/libjemalloc.so.2"}
    assert allocator_env(mine) == mine


def test_a_library_path_is_preloaded(tmp_path: Path, without_tcmalloc: None) -> None:
    library = tmp_path / "libmymalloc.so"
    library.write_bytes(b"")
    assert allocator_env({ALLOCATOR_ENV: str(library)})["LD_PRELOAD"] == str(library)


def test_an_unknown_choice_says_what_is_allowed() -> None:
    with pytest.raises(ConfigError, match=r"AGENTGYM_ALLOCATOR='fast'.*auto, system"):
        allocator_env({ALLOCATOR_ENV: "fast"})


def test_the_input_mapping_is_not_changed(with_tcmalloc: None) -> None:
    environ = {"PATH": "/bin"}
    allocator_env(environ)
    assert environ == {"PATH": "/bin"}


class _Exec(Exception):
    """Raised by the fake ``os.execve``: a real one would not return."""


def _record_execve(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, list[str], dict[str, str]]]:
    calls: list[tuple[object, list[str], dict[str, str]]] = []

    def execve(program: object, argv: list[str], env: dict[str, str]) -> None:
        calls.append((program, list(argv), env))
        raise _Exec

    monkeypatch.setattr(os, "execve", execve)
    return calls


@pytest.mark.parametrize("argv", [["agentgym"], ["agentgym", "list"], ["agentgym", "view", "x.parquet"]])
def test_short_commands_are_not_restarted(argv: list[str], with_tcmalloc: None,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _record_execve(monkeypatch)
    restart_with_allocator(argv)
    assert calls == []


def test_a_long_command_restarts_the_installed_script(tmp_path: Path, with_tcmalloc: None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    script = tmp_path / "agentgym"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    calls = _record_execve(monkeypatch)
    with pytest.raises(_Exec):
        restart_with_allocator([str(script), "train", "--steps", "2"])
    [(program, argv, env)] = calls
    assert program == script
    assert argv == [str(script), "train", "--steps", "2"]
    assert env["LD_PRELOAD"] == TCMALLOC


def test_python_dash_m_restarts_as_python_dash_m(with_tcmalloc: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    calls = _record_execve(monkeypatch)
    with pytest.raises(_Exec):
        restart_with_allocator(["/somewhere/agentgym/__main__.py", "eval", "--env", "Bandit-LLM-v0"])
    [(program, argv, _)] = calls
    assert program == sys.executable
    assert argv == [sys.executable, "-m", "agentgym", "eval", "--env", "Bandit-LLM-v0"]


def test_no_restart_once_preloaded(with_tcmalloc: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The restarted process finds tcmalloc in LD_PRELOAD and goes on: no loop."""
    monkeypatch.setenv("LD_PRELOAD", TCMALLOC)
    calls = _record_execve(monkeypatch)
    restart_with_allocator(["agentgym", "serve", "--model", "tiny"])
    assert calls == []


def test_this_process_reports_its_allocator() -> None:
    if "malloc" in os.environ.get("LD_PRELOAD", ""):
        assert preloaded_allocator() != "system"
    else:
        assert preloaded_allocator() == "system"
    assert preloaded_allocator(pid=2**22 + 12345) == "system"  # no such process: nothing mapped


def test_a_restarted_command_runs_on_tcmalloc_in_the_same_process(tmp_path: Path, tcmalloc: str) -> None:
    """For real: an executable restarts itself under tcmalloc, keeping its pid and arguments."""
    script = tmp_path / "agentgym"
    script.write_text(f"#!{sys.executable}\n"
                      "import os, sys\n"
                      "from agentgym.allocator import preloaded_allocator, restart_with_allocator\n"
                      "print(os.getpid(), preloaded_allocator(), sys.argv[1:], flush=True)\n"
                      "restart_with_allocator(sys.argv)\n")
    script.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key not in ("LD_PRELOAD", ALLOCATOR_ENV)}
    result = subprocess.run([str(script), "rollout", "--episodes", "2"], env=env, capture_output=True,
                            text=True, timeout=60, check=True)
    before, after = result.stdout.splitlines()
    assert before.split(" ", 2)[1] == "system"
    assert after.split(" ", 2)[1].startswith(tcmalloc)
    assert before.split()[0] == after.split()[0]  # the same process
    assert after.endswith("['rollout', '--episodes', '2']")
