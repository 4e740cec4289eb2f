"""The python tool: run a block of code in the sandbox and read what it printed.

    tool = PythonTool()                                  # the process's shared sandbox
    tool.call(code="print(sum(range(10)))")              # '45'
    tool.call(code="while True: pass")                   # '[timed out after 10s]'

Each call is a fresh program: variables and files do not carry over between
calls (the sandbox wipes its work dir), which the tool's description tells the
agent. The code runs with the sandbox's limits; ``timeout`` shortens the wall
clock of one call.

Which sandbox: the one given, or else the process's shared ``"auto"`` sandbox
(:mod:`agentgym.sandbox.shared`, the one code envs borrow too), opened on first
use (Docker when the engine and image are there, else the local fallback) and
held until :func:`close_shared_sandbox` or interpreter exit. Sharing matters
because the rollout manager builds one env per episode: a Docker pool per
episode would start containers for every episode.

Sandbox services: ``PythonTool(sandbox_url="http://host:8100")`` (several
URLs comma-separated) runs the code on ``agentgym sandbox serve`` hosts,
through the process's shared client for those URLs; with no sandbox and no
URL, ``AGENTGYM_SANDBOX_URL`` does the same when it is set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentgym.core import check_number
from agentgym.errors import ConfigError
from agentgym.tools.base import Tool
from agentgym.tools.calls import strip_code_fence

if TYPE_CHECKING:
    from agentgym.sandbox import ExecResult, Sandbox

__all__ = ["PythonTool", "close_shared_sandbox", "format_result", "shared_sandbox"]


_held_backends: set[str] = set()  # the backends python tools hold a shared sandbox of


def shared_sandbox(sandbox_url: str | None = None) -> Sandbox:
    """The sandbox python tools use when given none: the process's shared ``"auto"`` sandbox
    (or the client of ``sandbox_url``, or of ``AGENTGYM_SANDBOX_URL`` when set), borrowed on
    first use and held until :func:`close_shared_sandbox` or exit."""
    from agentgym.sandbox import pick_backend  # the sandbox pillar loads only when used
    from agentgym.sandbox.shared import hold_sandbox

    backend = pick_backend("auto", sandbox_url)
    sandbox = hold_sandbox(backend)
    _held_backends.add(backend)
    return sandbox


def close_shared_sandbox() -> None:
    """Give back the tools' holds on shared sandboxes (each closed unless a code env still
    borrows it); the next call to :func:`shared_sandbox` borrows again, or opens a new one."""
    from agentgym.sandbox.shared import release_hold

    for backend in {"auto", *_held_backends}:
        release_hold(backend)
    _held_backends.clear()


def format_result(result: ExecResult, timeout: float) -> str:
    """What the agent reads of a run: stdout, stderr, then how the run ended when not cleanly."""
    parts = []
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append("[stderr]\n" + result.stderr.rstrip("\n"))
    if result.timed_out:
        parts.append(f"[timed out after {timeout:g}s]")
    elif result.oom:
        parts.append("[out of memory: the program went over its memory limit]")
    elif result.exit_code is None:
        parts.append("[killed before it exited]")
    elif result.exit_code != 0:
        parts.append(f"[exit status {result.exit_code}]")
    if result.truncated:
        parts.append("[output truncated: print less]")
    if not parts:
        return "[no output: print() the values you want to see]"
    return "\n".join(parts)


class PythonTool(Tool):
    """Run Python 3 code in a sandbox; the output is what the code printed.

    Args:
        sandbox: where the code runs; its owner closes it. None: the shared
            sandbox (see :func:`shared_sandbox`).
        sandbox_url: instead of ``sandbox``, sandbox services to run the code on
            (``"http://host:8100"``, several comma-separated).
        timeout: wall-clock seconds of one call; None: the sandbox's limit.
    """

    name = "python"
    description = (
        "Run Python 3 code and get back what it prints (stdout, then stderr). "
        "Each call is a new program: variables and files do not carry over, so "
        "print() every value you need. No network."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "the Python 3 program to run"},
        },
        "required": ["code"],
    }
    tag_argument = "code"

    def __init__(self, sandbox: Sandbox | None = None, *, sandbox_url: str | None = None,
                 timeout: float | None = None) -> None:
        if timeout is not None:
            check_number("timeout", timeout, minimum=0.001, integer=False)
        if sandbox_url is not None:
            from agentgym.sandbox import pick_backend

            if sandbox is not None:
                raise ConfigError("Give PythonTool a sandbox or a sandbox_url, not both.")
            pick_backend("auto", sandbox_url)  # a malformed URL fails here, not on the first call
        self.sandbox = sandbox
        self.sandbox_url = sandbox_url
        self.timeout = timeout

    def _sandbox(self) -> Sandbox:
        return self.sandbox if self.sandbox is not None else shared_sandbox(self.sandbox_url)

    def _timeout(self, sandbox: Sandbox) -> float:
        return self.timeout if self.timeout is not None else sandbox.limits.timeout

    def run(self, *, code: str) -> str:  # type: ignore[override]
        sandbox = self._sandbox()
        result = sandbox.run(strip_code_fence(code), language="python", timeout=self.timeout)
        return format_result(result, self._timeout(sandbox))

    async def arun(self, *, code: str) -> str:  # type: ignore[override]
        sandbox = self._sandbox()
        result = await sandbox.arun(strip_code_fence(code), language="python", timeout=self.timeout)
        return format_result(result, self._timeout(sandbox))
