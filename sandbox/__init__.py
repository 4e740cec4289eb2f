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
- :class:`RemoteSandbox` (``remote.py``): the client of sandbox services
  (``agentgym sandbox serve``, ``service.py``) on other hosts, spreading runs
  over them. Its backend string is the services' URLs:
  ``open_sandbox("http://host1:8100,http://host2:8100")``, or ``"remote"``
  with ``urls=`` (default: ``AGENTGYM_SANDBOX_URL``).

Both drive the same runner (``runner.py``), which enforces the timeout, the
output caps and the rlimits, and cleans up after every run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from agentgym.errors import ConfigError, SandboxUnavailable
from agentgym.sandbox.base import LANGUAGES, ExecResult, Limits, Sandbox
from agentgym.sandbox.docker import DockerSandbox
from agentgym.sandbox.local import LocalSandbox
from agentgym.sandbox.remote import URL_ENV, RemoteSandbox, is_sandbox_url, parse_urls

__all__ = ["BACKENDS", "LANGUAGES", "DockerSandbox", "ExecResult", "Limits", "LocalSandbox",
           "RemoteSandbox", "Sandbox", "check_backend", "open_sandbox", "pick_backend"]

_log = logging.getLogger("agentgym.sandbox")

_DOCKER_OPTIONS = {"image", "pool_size", "max_containers", "docker_host", "work_mb"}
_LOCAL_OPTIONS = {"use_bwrap", "python"}
_REMOTE_OPTIONS = {"urls", "token", "cooldown", "connect_timeout", "wait_timeout", "max_in_flight"}
#: The backends :func:`open_sandbox` takes (besides service URLs, ``"http://host:port,..."``).
BACKENDS = ("auto", "docker", "local", "remote")


def check_backend(backend: str) -> None:
    """Raise :class:`ConfigError` unless ``backend`` is one of :data:`BACKENDS` or service URLs."""
    if not isinstance(backend, str):
        raise ConfigError(f"backend must be a string, got {type(backend).__name__}.")
    if is_sandbox_url(backend):
        parse_urls(backend)
    elif backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, or sandbox service "
                          f"URLs ('http://host:8100,...'); got {backend!r}.")


def pick_backend(backend: str = "auto", sandbox_url: str | Sequence[str] | None = None) -> str:
    """The backend string a code env or python tool uses: ``sandbox_url`` when given (one URL,
    several comma-separated, or a list), else ``backend``, except that ``"auto"`` means
    ``AGENTGYM_SANDBOX_URL`` when that is set.

    So one variable sends every code env and python tool of a training job to
    the sandbox services, with no change to their arguments.
    """
    if sandbox_url is not None:
        if backend != "auto":
            raise ConfigError(f"Give sandbox_url or backend, not both (got backend={backend!r}).")
        if isinstance(sandbox_url, (list, tuple)):  # e.g. -k sandbox_url=[http://a, http://b]
            sandbox_url = ",".join(map(str, sandbox_url))
        if not isinstance(sandbox_url, str) or not is_sandbox_url(sandbox_url):
            raise ConfigError(f"sandbox_url must look like 'http://host:8100', got {sandbox_url!r}.")
        backend = sandbox_url
    elif backend == "auto" and os.environ.get(URL_ENV):
        backend = os.environ[URL_ENV]
        if not is_sandbox_url(backend):
            raise ConfigError(f"{URL_ENV} must look like 'http://host:8100', got {backend!r}.")
    check_backend(backend)
    return backend


def open_sandbox(backend: str = "auto", limits: Limits | None = None,
                 **backend_options: Any) -> Sandbox:
    """A ready sandbox: ``"docker"``, ``"local"``, or ``"auto"`` (Docker if it can run here).

    ``"auto"`` takes Docker when the engine answers and the image exists, else
    the local sandbox, and logs which it took and why (``sandbox.name`` says
    too). ``backend_options`` go to the backend's constructor; in ``"auto"``
    each backend gets the options it knows (``image``, ``pool_size``,
    ``max_containers``, ``docker_host``, ``work_mb`` for Docker; ``use_bwrap``,
    ``python`` for local).

    Sandbox services: ``"http://host1:8100,http://host2:8100"``, or ``"remote"``
    with ``urls=`` (default: ``AGENTGYM_SANDBOX_URL``), give a
    :class:`RemoteSandbox` (options ``token``, ``cooldown``, ``connect_timeout``,
    ``wait_timeout``, ``max_in_flight``). ``"auto"`` never picks one by itself.
    """
    check_backend(backend)
    if backend == "remote" or is_sandbox_url(backend):
        return _open_remote(backend, limits, backend_options)
    _check_options(backend, backend_options, {"auto": _DOCKER_OPTIONS | _LOCAL_OPTIONS,
                                              "docker": _DOCKER_OPTIONS,
                                              "local": _LOCAL_OPTIONS}[backend])
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


def _open_remote(backend: str, limits: Limits | None, options: dict[str, Any]) -> Sandbox:
    """The RemoteSandbox for ``"remote"`` (urls= or AGENTGYM_SANDBOX_URL) or a URL backend."""
    _check_options(backend, options,
                   _REMOTE_OPTIONS if backend == "remote" else _REMOTE_OPTIONS - {"urls"})
    options = dict(options)
    urls = backend if is_sandbox_url(backend) else options.pop("urls", None) or os.environ.get(URL_ENV)
    if not urls:
        raise ConfigError(f"open_sandbox('remote') needs urls= or {URL_ENV}=http://HOST:8100.")
    return RemoteSandbox(urls, limits, **options)


def _check_options(backend: str, options: dict[str, Any], allowed: set[str]) -> None:
    """ConfigError naming the options of ``options`` that ``backend`` does not take."""
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigError(f"open_sandbox(backend={backend!r}) does not take {', '.join(unknown)}; "
                          f"it takes {', '.join(sorted(allowed))}.")
