"""What every sandbox backend promises: ``run(code) -> ExecResult``, never an exception for bad code.

A backend runs untrusted code (model output) and reports what happened. The
code may loop, fork, eat memory, print gigabytes or try to read the host: all
of that ends as fields of an :class:`ExecResult`. Only the sandbox's own
failures (no engine, a lost container) raise, as :class:`SandboxError`.

    with open_sandbox() as sb:
        result = sb.run("print(sum(range(1000)))")
        assert result.stdout == "499500\\n"
"""

from __future__ import annotations

import asyncio
import functools
from abc import ABC, abstractmethod
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from agentgym.core import check_number

__all__ = ["LANGUAGES", "ExecResult", "Limits", "Sandbox"]

# Languages every backend runs; the runner maps each to an interpreter.
LANGUAGES = ("python", "bash")


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run; a backend enforces each one it can and documents the rest."""

    timeout: float = 10.0
    """Wall-clock seconds before the run is killed (``timed_out=True``)."""
    cpu_seconds: float | None = None
    """CPU seconds before the run is killed; default: the wall timeout."""
    memory_mb: int = 512
    """Memory of the run; going over ends it with ``oom=True``."""
    cpus: float = 1.0
    """CPU cores the run may use at once."""
    pids: int = 64
    """Processes and threads the run may hold at once (contains fork bombs)."""
    output_bytes: int = 64_000
    """Bytes kept of stdout and of stderr each; the rest is cut and ``truncated=True``."""

    def __post_init__(self) -> None:
        # Limits also arrive as JSON from a sandbox service: a string or NaN is a ConfigError too.
        for name in ("timeout", "cpus"):
            check_number(f"Limits.{name}", getattr(self, name), minimum=0.001, integer=False)
        if self.cpu_seconds is not None:
            check_number("Limits.cpu_seconds", self.cpu_seconds, minimum=0.001, integer=False)
        for name in ("memory_mb", "pids", "output_bytes"):
            check_number(f"Limits.{name}", getattr(self, name), minimum=1)


@dataclass(frozen=True)
class ExecResult:
    """What one run of untrusted code did."""

    stdout: str
    stderr: str
    exit_code: int | None
    """The process's exit status; None when it was killed (timeout, OOM) before exiting."""
    timed_out: bool = False
    oom: bool = False
    duration: float = 0.0
    """Wall-clock seconds the code ran, as the runner measured it."""
    truncated: bool = False
    """stdout or stderr went over ``Limits.output_bytes`` and was cut (a marker says where)."""

    @property
    def ok(self) -> bool:
        """True when the code exited by itself with status 0."""
        return self.exit_code == 0 and not self.timed_out and not self.oom


class Sandbox(ABC):
    """A place to run untrusted code. Use as a context manager so it is always cleaned up."""

    #: Short backend name shown to users: "docker", "bubblewrap", "subprocess".
    name: str = "abstract"
    #: One sentence on what this backend protects against and what it does not.
    isolation: str = ""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        #: the threads :meth:`arun` runs on; a backend that sizes its own pool (one thread
        #: per container, per request in flight) sets it, None means asyncio's default
        self._runs: Executor | None = None

    @abstractmethod
    def run(self, code: str, *, language: str = "python", stdin: str = "",
            files: Mapping[str, str | bytes] | None = None,
            timeout: float | None = None) -> ExecResult:
        """Run ``code`` with ``stdin``, after writing ``files`` (relative paths) into its work dir.

        ``timeout`` overrides ``Limits.timeout`` for this run. Never raises for
        anything the code does; raises :class:`SandboxError` when the sandbox fails.
        """

    async def arun(self, code: str, *, language: str = "python", stdin: str = "",
                   files: Mapping[str, str | bytes] | None = None,
                   timeout: float | None = None) -> ExecResult:
        """``run`` on a thread (the backend's own pool, when it has one), so the loop never blocks."""
        call = functools.partial(self.run, code, language=language, stdin=stdin, files=files,
                                 timeout=timeout)
        return await asyncio.get_running_loop().run_in_executor(self._runs, call)

    def close(self) -> None:
        """Release everything the sandbox holds (containers, processes). Safe to call twice."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
