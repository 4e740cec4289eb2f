"""Running untrusted code: a warm pool of Docker containers, and a local fallback.

    from agentgym.sandbox import open_sandbox

    with open_sandbox() as sb:                 # Docker when it is here, else local
        result = sb.run("print(sum(range(1000)))")
        result.stdout, result.exit_code        # ('499500\\n', 0)

Backends (each module's docstring says what it protects and what it does not):

- :class:`DockerSandbox` (``docker.py``): locked-down containers (no network,
  read-only root, memory / CPU / PID limits, no capabilities, non-root), kept
  warm and wiped between runs. Needs a Docker engine and the image from
  ``agentgym sandbox build``.
- :class:`LocalSandbox` (``local.py``): bubblewrap namespaces when ``bwrap``
  works, else a plain subprocess with rlimits. It isolates less.

Both drive the same runner (``runner.py``), which enforces the timeout, the
output caps and the rlimits, and cleans up after every run.
"""

from __future__ import annotations

import logging
from typing import Any

from agentgym.errors import ConfigError, SandboxUnavailable
from agentgym.sandbox.base import LANGUAGES, ExecResult, Limits, Sandbox
from agentgym.sandbox.docker import DockerSandbox
from agentgym.sandbox.local import LocalSandbox

__all__ = ["BACKENDS", "LANGUAGES", "DockerSandbox", "ExecResult", "Limits", "LocalSandbox",
           "Sandbox", "check_backend", "open_sandbox"]

_log = logging.getLogger("agentgym.sandbox")

_DOCKER_OPTIONS = {"image", "pool_size", "max_containers", "docker_host", "work_mb"}
_LOCAL_OPTIONS = {"use_bwrap", "python"}
#: The backends :func:`open_sandbox` takes.
BACKENDS = ("auto", "docker", "local")


def check_backend(backend: str) -> None:
    """Raise :class:`ConfigError` unless ``backend`` is one of :data:`BACKENDS`."""
    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}.")


def open_sandbox(backend: str = "auto", limits: Limits | None = None,
                 **backend_options: Any) -> Sandbox:
    """A ready sandbox: ``"docker"``, ``"local"``, or ``"auto"`` (Docker if it can run here).

    ``"auto"`` takes Docker when the engine answers and the image exists, else
    the local sandbox, and logs which it took and why (``sandbox.name`` says
    too). ``backend_options`` go to the backend's constructor; in ``"auto"``
    each backend gets the options it knows (``image``, ``pool_size``,
    ``max_containers``, ``docker_host``, ``work_mb`` for Docker; ``use_bwrap``,
    ``python`` for local).
    """
    check_backend(backend)
    allowed = {"auto": _DOCKER_OPTIONS | _LOCAL_OPTIONS, "docker": _DOCKER_OPTIONS,
               "local": _LOCAL_OPTIONS}[backend]
    unknown = sorted(set(backend_options) - allowed)
    if unknown:
        raise ConfigError(f"open_sandbox(backend={backend!r}) does not take {', '.join(unknown)}; "
                          f"it takes {', '.join(sorted(allowed))}.")
    docker_options = {k: v for k, v in backend_options.items() if k in _DOCKER_OPTIONS}
    local_options = {k: v for k, v in backend_options.items() if k in _LOCAL_OPTIONS}
    if backend == "docker":
        return DockerSandbox(limits, **docker_options)
    if backend == "auto":
        try:
            sandbox: Sandbox = DockerSandbox(limits, **docker_options)
        except SandboxUnavailable as exc:
            local = LocalSandbox(limits, **local_options)
            _log.warning("Docker sandbox unavailable (%s) Using the local sandbox (%s), which "
                           "isolates less.", exc, local.name)
            return local
        _log.info("Using the Docker sandbox (image %s).", sandbox.image)
        return sandbox
    return LocalSandbox(limits, **local_options)
