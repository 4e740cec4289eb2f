"""One sandbox container: how it is locked down, started, and talked to.

The container's only process tree is the runner (``runner.py``, PID 1),
started with stdin open and attached: requests go in on that stream and
replies come back on it, so a run costs no ``docker run`` and no ``docker exec``.
The stream is Docker's multiplexed attach protocol (an 8-byte header per frame:
stream type, then length); the runner's stderr frames are kept for error
messages. The container is created with ``StdinOnce`` and ``AutoRemove``: when
the attached socket closes, including when the process holding it dies, the
runner sees end of input, exits, and Docker deletes the container.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from agentgym.errors import SandboxError
from agentgym.sandbox.base import Limits
from agentgym.sandbox.protocol import FrameReader, encode, runner_command, sandbox_env

__all__ = ["LABEL", "LABEL_ID", "LABEL_OWNER", "ContainerBroken", "ContainerSpec", "SandboxContainer",
           "owner_label", "remove_container", "sandbox_containers"]

#: Every sandbox container carries this label (``agentgym sandbox clean`` looks for it).
LABEL = "agentgym.sandbox"
#: The id of the DockerSandbox that made the container.
LABEL_ID = "agentgym.sandbox.id"
#: ``host:pid`` of the process that made it, to tell leftovers from live pools.
LABEL_OWNER = "agentgym.sandbox.owner"

_WORKDIR = "/work"
_RUNNER_MB = 48  # the runner's two processes and the kernel's share, on top of the code's memory
_RUNNER_PIDS = 4
_FRAME = struct.Struct(">BxxxI")
_STDERR = 2  # the attach stream type of stderr frames (1 is stdout)
# Where the runner reads the container's count of OOM kills: cgroup v1, then v2.
_OOM_COUNTERS = ["/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"]
# IPC objects outlive the processes that made them; these limits stop one run
# leaving a message queue or a shared segment for the next (the runner wipes /dev/shm).
_IPC_SYSCTLS = {"kernel.shm_rmid_forced": "1", "kernel.msgmni": "0", "kernel.sem": "0 0 0 0",
                "fs.mqueue.queues_max": "0"}


class ContainerBroken(Exception):
    """The attached stream closed or stalled: the container is gone or its runner is stuck."""


@dataclass(frozen=True)
class ContainerSpec:
    """Everything needed to create one sandbox container."""

    image: str
    limits: Limits
    uid: int
    work_mb: int
    labels: dict[str, str]

    def create_kwargs(self, api: Any) -> dict[str, Any]:
        """Arguments of ``APIClient.create_container`` for a locked-down runner container."""
        memory = f"{self.limits.memory_mb + _RUNNER_MB}m"
        config = {"workdir": _WORKDIR, "wipe": [_WORKDIR, "/dev/shm"], "env": sandbox_env(_WORKDIR),
                  "oom_counter": _OOM_COUNTERS}
        host_config = api.create_host_config(
            network_mode="none", read_only=True, auto_remove=True, init=False,
            tmpfs={_WORKDIR: f"rw,nosuid,nodev,noexec,size={self.work_mb}m,uid={self.uid},"
                             f"gid={self.uid},mode=0700"},
            mem_limit=memory, memswap_limit=memory, nano_cpus=int(self.limits.cpus * 1e9),
            pids_limit=self.limits.pids + _RUNNER_PIDS, cap_drop=["ALL"],
            security_opt=["no-new-privileges"], ipc_mode="private", shm_size="16m",
            sysctls=_IPC_SYSCTLS, log_config={"type": "none"},
            ulimits=[{"name": "core", "soft": 0, "hard": 0}])
        command = runner_command("python3", config)
        return {"image": self.image, "entrypoint": [command[0]], "command": command[1:],
                "user": f"{self.uid}:{self.uid}", "stdin_open": True, "detach": False,
                "network_disabled": True, "working_dir": _WORKDIR, "hostname": "sandbox",
                "labels": self.labels, "environment": {}, "host_config": host_config}


class SandboxContainer:
    """A started container whose runner is ready for requests. Not thread-safe: one run at a time."""

    def __init__(self, api: Any, container_id: str, stream: Any) -> None:
        self.api, self.id = api, container_id
        self._stream = stream  # docker-py's SocketIO; keeps the raw socket open
        self._sock: socket.socket = getattr(stream, "_sock", stream)
        self._buffer = b""
        self._reader = FrameReader()
        self._messages: deque[dict[str, Any]] = deque()
        self.stderr = b""  # the runner's own stderr (a crash, a traceback), for error messages

    @classmethod
    def start(cls, api: Any, spec: ContainerSpec, timeout: float = 60.0) -> SandboxContainer:
        """Create, attach and start a container, and wait for its runner's ``ready``."""
        container_id = api.create_container(**spec.create_kwargs(api))["Id"]
        container = None
        try:
            stream = api.attach_socket(container_id, params={"stdin": 1, "stdout": 1, "stderr": 1,
                                                             "stream": 1})
            container = cls(api, container_id, stream)
            api.start(container_id)
            container.receive(timeout)
        except ContainerBroken as exc:
            detail = container.stderr.decode(errors="replace")[-2000:] if container else ""
            remove_container(api, container_id)
            raise SandboxError(f"A sandbox container from {spec.image!r} did not start its runner "
                               f"({exc}). Rebuild the image with `agentgym sandbox build --force`. "
                               f"{detail}") from exc
        except BaseException:
            remove_container(api, container_id)
            raise
        return container

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request and wait up to ``timeout`` seconds for its reply."""
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(encode(message))
        except OSError as exc:
            raise ContainerBroken(f"cannot write to the container: {exc}") from exc
        return self.receive(timeout)

    def receive(self, timeout: float) -> dict[str, Any]:
        """The next message from the runner."""
        deadline = time.monotonic() + timeout
        while True:
            message = self._next_message()
            if message is not None:
                return message
            left = deadline - time.monotonic()
            if left <= 0:
                raise ContainerBroken(f"no answer from the runner in {timeout:.0f} s")
            try:
                self._sock.settimeout(left)
                data = self._sock.recv(1 << 16)
            except OSError as exc:  # socket.timeout is an OSError
                raise ContainerBroken(f"reading from the container failed: {exc}") from exc
            if not data:
                raise ContainerBroken("the container closed its stream")
            self._buffer += data

    def _next_message(self) -> dict[str, Any] | None:
        """Demultiplex buffered frames; the first complete runner message, if any."""
        while not self._messages and len(self._buffer) >= _FRAME.size:
            kind, size = _FRAME.unpack_from(self._buffer)
            if len(self._buffer) < _FRAME.size + size:
                break
            payload = self._buffer[_FRAME.size:_FRAME.size + size]
            self._buffer = self._buffer[_FRAME.size + size:]
            if kind == _STDERR:
                self.stderr = (self.stderr + payload)[-8192:]
            else:
                self._messages.extend(self._reader.feed(payload))
        return self._messages.popleft() if self._messages else None

    def state(self) -> dict[str, Any] | None:
        """The container's ``State`` from the engine, None when it is gone."""
        import docker.errors

        try:
            return self.api.inspect_container(self.id)["State"]
        except docker.errors.NotFound:
            return None

    def close(self) -> None:
        """Close the stream (the runner exits) and remove the container."""
        try:
            self._stream.close()
            self._sock.close()
        except OSError:
            pass
        remove_container(self.api, self.id)


def remove_container(api: Any, container_id: str) -> None:
    """Force-remove a container; quiet when it is already gone or the engine is."""
    import docker.errors
    import requests

    try:
        api.remove_container(container_id, force=True)
    except docker.errors.APIError:
        pass  # already gone (404), or being removed by AutoRemove (409)
    except requests.RequestException:
        pass  # the engine went away: nothing left to remove here


def owner_label() -> str:
    """``host:pid`` of this process, the value of :data:`LABEL_OWNER`."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_alive(owner: str) -> bool:
    """Whether the ``host:pid`` of a container's owner is a live process on this host."""
    host, _, pid = owner.rpartition(":")
    if not pid.isdigit():
        return False  # no owner we can read: a leftover
    if host != socket.gethostname():
        return True  # another machine's pool on a shared engine: only removed when asked for all
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sandbox_containers(api: Any, *, include_live: bool = False) -> list[dict[str, Any]]:
    """Containers with the sandbox label; only leftovers (owner process gone) unless ``include_live``."""
    found = api.containers(all=True, filters={"label": f"{LABEL}=1"})
    if include_live:
        return found
    return [info for info in found
            if not _owner_alive((info.get("Labels") or {}).get(LABEL_OWNER, ""))]
