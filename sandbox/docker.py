"""DockerSandbox: a warm pool of locked-down containers, one run at a time in each.

What a run cannot do (each has an adversarial test in ``tests/sandbox``):

- reach any network: the container has no interface but ``lo`` (``network_mode=none``),
  so names do not resolve and the host's loopback services are out of reach;
- write outside ``/work``: the root filesystem is read-only; ``/work`` is a
  ``noexec`` tmpfs of ``work_mb`` MiB, and ``/dev/shm`` is private and small;
- see the host: nothing of the host is mounted, the environment is fixed (no
  variable is inherited), the code runs as an unprivileged uid with every
  capability dropped and ``no-new-privileges``;
- outgrow its limits: ``Limits.memory_mb`` is a memory cgroup (with no swap;
  going over ends in ``oom=True``), ``Limits.cpus`` a CPU quota,
  ``Limits.pids`` a PID cgroup (a fork bomb stops there), ``Limits.timeout``
  and ``Limits.cpu_seconds`` kill it, stdout and stderr are capped;
- outlive its run or leak into the next: every process it started is killed
  before the reply, ``/work`` and ``/dev/shm`` are wiped, IPC objects cannot
  outlive their processes, and runs are forked from a process that never held
  another run's data. A container whose run timed out, ran out of memory, left
  processes behind or could not be wiped is replaced, not reused.

What it does not protect against: a kernel exploit (containers share the
host's kernel; use gVisor or a VM for hostile code at scale), and CPU or disk
bandwidth contention between runs. Within one container the code shares a uid
with the runner; the runner guards itself by being PID 1 and not dumpable.

    with DockerSandbox(pool_size=4) as sb:
        sb.run("print(sum(range(1000)))").stdout   # '499500\\n'

Containers carry the label ``agentgym.sandbox=1`` and their owner's
``host:pid``. They are removed by ``close()``, at interpreter exit, and, if
this process dies, by Docker itself (the runner ends when its attached stream
closes, and the container is auto-removed). One caught between creation and
start by the crash stays; the next DockerSandbox on this host, or ``agentgym
sandbox clean``, removes it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
import weakref
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentgym.core import check_number
from agentgym.errors import ConfigError, MissingDependencyError, SandboxError, SandboxUnavailable
from agentgym.sandbox.base import ExecResult, Limits, Sandbox
from agentgym.sandbox.container import (LABEL, LABEL_ID, LABEL_OWNER, ContainerBroken,
                                        ContainerSpec, SandboxContainer, owner_label,
                                        remove_container, sandbox_containers)
from agentgym.sandbox.image import DEFAULT_IMAGE, SANDBOX_UID, image_exists
from agentgym.sandbox.protocol import build_request, to_result

__all__ = ["DockerSandbox", "connect", "docker_problem"]

_log = logging.getLogger("agentgym.sandbox")

_GRACE = 20.0  # seconds past a run's timeout before its container counts as stuck
_ACQUIRE_TIMEOUT = 300.0
_DEFAULT_SOCKET = "unix:///var/run/docker.sock"


def connect(docker_host: str | None = None, connections: int = 16) -> Any:
    """A low-level Docker API client that has answered a ping; SandboxUnavailable if none can."""
    try:
        import docker
    except ImportError as exc:
        raise SandboxUnavailable("The Docker sandbox needs the docker package: "
                                 f"{MissingDependencyError.install_hint('docker', 'docker')}.") from exc
    import requests

    url = docker_host or os.environ.get("DOCKER_HOST") or _DEFAULT_SOCKET
    client = None
    try:
        _probe(url)
        # One HTTP connection per container being started or removed at once, plus the attaches.
        options = {"timeout": 60, "max_pool_size": connections}
        client = (docker.DockerClient(base_url=docker_host, **options) if docker_host
                  else docker.from_env(**options))
        client.api.ping()
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        if client is not None:
            client.close()
        raise SandboxUnavailable(
            f"No Docker engine answers at {url}: {exc}. Start one (`dockerd &` as root, or "
            "`systemctl start docker`), or use the local sandbox: open_sandbox('local').") from exc
    return client.api


def _probe(url: str) -> None:
    """Connect to a unix socket once ourselves: docker-py leaks the socket of a failed connect."""
    if url.startswith("unix://"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(10)
            probe.connect(url[len("unix://"):])


def _check_image(api: Any, image: str) -> None:
    if not image_exists(api, image):
        raise SandboxUnavailable(f"The Docker image {image!r} is not there: build it with "
                                 "`agentgym sandbox build`.")


def docker_problem(image: str = DEFAULT_IMAGE, docker_host: str | None = None) -> str | None:
    """Why the Docker sandbox cannot run here (engine, image), or None when it can."""
    try:
        with contextlib.closing(connect(docker_host)) as api:
            _check_image(api, image)
    except SandboxUnavailable as exc:
        return str(exc)
    return None


class _Pool:
    """Warm containers: taken by a run, given back or replaced, refilled in the background."""

    def __init__(self, api: Any, spec: ContainerSpec, size: int, max_containers: int) -> None:
        self.api, self.spec, self.size, self.max = api, spec, size, max_containers
        self._idle: deque[SandboxContainer] = deque()
        self._live: set[SandboxContainer] = set()
        self._count = 0  # live containers plus those being started
        self._starting = 0
        self._closed = False
        self._cond = threading.Condition()
        self._workers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="agentgym-sandbox-pool")

    def acquire(self, timeout: float = _ACQUIRE_TIMEOUT) -> SandboxContainer:
        """An idle container, a new one if the pool may grow, or the next one given back."""
        with self._cond:
            while True:
                self._check_open()
                if self._idle:
                    return self._idle.popleft()
                if self._count < self.max:
                    self._count += 1
                    break
                if not self._cond.wait(timeout):
                    raise SandboxError(f"No sandbox container came free in {timeout:.0f} s; "
                                       f"raise max_containers (now {self.max}).")
        return self._start(idle=False)

    def release(self, container: SandboxContainer, reusable: bool) -> None:
        """Give a container back after a run; one that is not reusable is removed and replaced."""
        with self._cond:
            if reusable and not self._closed:
                self._idle.append(container)
                self._cond.notify()
                return
            self._count -= 1
            self._live.discard(container)
            self._cond.notify()
        self._submit(container.close)
        self.refill()

    def refill(self) -> None:
        """Start containers in the background until ``size`` are idle or starting."""
        with self._cond:
            wanted = min(self.size - len(self._idle) - self._starting, self.max - self._count)
            if self._closed or wanted <= 0:
                return
            self._count += wanted
            self._starting += wanted
        for _ in range(wanted):
            self._submit(self._start_in_background)

    def _start(self, idle: bool) -> SandboxContainer:
        """Start one container (already counted in ``_count``); idle ones join the pool."""
        try:
            container = SandboxContainer.start(self.api, self.spec)
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise
        with self._cond:
            closed = self._closed
            if closed:
                self._count -= 1
            else:
                self._live.add(container)
                if idle:
                    self._idle.append(container)
                    self._cond.notify()
        if closed:
            container.close()
            self._check_open()
        return container

    def _start_in_background(self) -> None:
        import docker.errors
        import requests

        try:
            self._start(idle=True)
        except (SandboxError, OSError, docker.errors.DockerException,
                requests.RequestException) as exc:
            if not self._closed:
                _log.warning("Could not start a sandbox container: %s", exc)
        finally:
            with self._cond:
                self._starting -= 1

    def _submit(self, function: Any) -> None:
        try:
            self._workers.submit(function)
        except RuntimeError:  # the pool is shutting down: do it here
            function()

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("This sandbox is closed; open a new one.")

    def close(self) -> None:
        """Remove every container this pool made. Safe to call twice."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            containers = list(self._live)
            self._idle.clear()
            self._cond.notify_all()
        self._workers.shutdown(wait=True, cancel_futures=True)
        _close_all(containers)
        self._remove_labelled()
        self.api.close()

    def _remove_labelled(self) -> None:
        """Remove containers with this pool's id that a failed start may have left."""
        import requests

        try:
            found = self.api.containers(all=True, filters={
                "label": f"{LABEL_ID}={self.spec.labels[LABEL_ID]}"})
        except requests.RequestException:
            return
        for info in found:
            remove_container(self.api, info["Id"])


def _close_all(containers: list[SandboxContainer]) -> None:
    """Close containers at once (each removal waits on the engine), one by one at exit."""
    threads: list[threading.Thread] = []
    try:
        for container in containers:
            thread = threading.Thread(target=container.close, name="agentgym-sandbox-close")
            thread.start()
            threads.append(thread)
    except RuntimeError:  # no new threads while the interpreter shuts down
        for container in containers[len(threads):]:
            container.close()
    for thread in threads:
        thread.join()


class DockerSandbox(Sandbox):
    """Runs code in a warm pool of locked-down Docker containers (see this module's docstring).

    ``pool_size`` containers are kept started and idle; up to ``max_containers``
    run at once (more runs wait). ``image`` is the sandbox image (``agentgym
    sandbox build``); ``docker_host`` an engine URL (default: ``DOCKER_HOST``
    or the local socket); ``work_mb`` the size of the ``/work`` tmpfs.
    """

    name = "docker"
    isolation = ("container: no network, read-only root, memory/CPU/PID cgroups, no "
                 "capabilities, non-root; shares the host kernel")

    def __init__(self, limits: Limits | None = None, *, image: str = DEFAULT_IMAGE,
                 pool_size: int = 4, max_containers: int = 16, docker_host: str | None = None,
                 work_mb: int = 64) -> None:
        super().__init__(limits)
        if not 0 <= pool_size <= max_containers or max_containers < 1:
            raise ConfigError(f"Need 0 <= pool_size <= max_containers and max_containers >= 1; "
                              f"got pool_size={pool_size}, max_containers={max_containers}.")
        check_number("work_mb", work_mb, minimum=1)
        self.image = image
        self.id = uuid.uuid4().hex[:12]
        api = connect(docker_host, connections=max_containers + 4)
        try:
            _check_image(api, image)
        except SandboxUnavailable:
            api.close()
            raise
        for leftover in sandbox_containers(api):
            # A process killed while a container was created but not yet started leaves it.
            remove_container(api, leftover["Id"])
        spec = ContainerSpec(image=image, limits=self.limits, uid=SANDBOX_UID, work_mb=work_mb,
                             labels={LABEL: "1", LABEL_ID: self.id, LABEL_OWNER: owner_label()})
        self._pool = _Pool(api, spec, pool_size, max_containers)
        self._finalizer = weakref.finalize(self, self._pool.close)
        self._runs = ThreadPoolExecutor(max_workers=max_containers,
                                        thread_name_prefix="agentgym-sandbox-run")
        if pool_size:
            # One container now, so that a broken image fails here with a clear message.
            self._pool.release(self._pool.acquire(), reusable=True)
            self._pool.refill()

    def run(self, code: str, *, language: str = "python", stdin: str = "",
            files: Mapping[str, str | bytes] | None = None,
            timeout: float | None = None) -> ExecResult:
        request = build_request(code, language=language, stdin=stdin, files=files,
                                timeout=timeout, limits=self.limits)
        container = self._pool.acquire()
        reusable = False
        try:
            reply = container.request(request, timeout=request["timeout"] + _GRACE)
            reusable = not reply.get("replace", True)
            return to_result(reply)
        except ContainerBroken as exc:
            return self._lost_run(container, exc)
        finally:
            self._pool.release(container, reusable)

    def _lost_run(self, container: SandboxContainer, exc: ContainerBroken) -> ExecResult:
        """The result of a run whose container stopped answering; SandboxError if the engine did."""
        import requests

        try:
            state = container.state()
        except requests.RequestException as engine_exc:
            raise SandboxError(f"The Docker engine stopped answering during a run: {engine_exc}"
                               ) from exc
        oom = bool(state and state.get("OOMKilled"))
        _log.warning("A sandbox container broke during a run (%s); replacing it.", exc)
        return ExecResult(stdout="", stderr=f"[sandbox: the container stopped during the run: {exc}]\n",
                          exit_code=None, oom=oom)

    def close(self) -> None:
        """Remove every container of this sandbox. Safe to call twice."""
        self._finalizer()
        self._runs.shutdown(wait=False, cancel_futures=True)
