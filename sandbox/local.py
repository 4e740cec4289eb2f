"""LocalSandbox: run code on this machine, without Docker. It isolates less; read what it does.

Each run starts a fresh runner process (``runner.py``) in a fresh temporary
work dir, which is removed afterwards. Three modes, chosen by what works here
(``LocalSandbox.name``, ``.private_mounts`` and ``.isolation`` say which):

``bubblewrap`` (when ``bwrap`` works here)
    The runner starts inside ``bwrap --unshare-all``: its own network
    namespace with nothing but ``lo`` (no packet leaves), its own PID, IPC and
    UTS namespaces, no capabilities, a root made of read-only binds of
    ``/usr`` (and ``/bin``, ``/lib``...) plus the work dir at ``/work``; the
    host's home, ``/tmp`` and ``/etc`` are not there, ``/dev`` is read-only and
    ``/dev/shm`` a private tmpfs of at most 16 MiB. When the runner ends, the
    kernel kills every process left in its PID namespace, and its mounts go.
``subprocess`` with private mounts (no bubblewrap; as root, or where user
namespaces are allowed)
    The runner makes its own mount namespace (``unshare(CLONE_NEWNS)``, plus a
    user namespace when not root) before any code runs: ``/tmp`` and
    ``/var/tmp`` are the run's own work dir (the host's are hidden from it),
    ``/dev/shm`` a fresh tmpfs of at most 16 MiB, and the work dir is also
    ``TMPDIR``, ``HOME`` and the cwd. So a run cannot leave a file in /tmp or
    /dev/shm for the next run or on the host, and cannot fill the host's RAM
    through /dev/shm. The code then runs with no capability (as root: as
    ``nobody``). Everything else of the host is as in the next mode: its files
    are readable (by the code's user) and the network is reachable.
``subprocess`` without private mounts (the kernel refuses the namespaces)
    The runner is a plain child process: nothing hides the host's files (the
    code reads whatever its user may read), the network is reachable, and the
    code can signal every process of its user. ``TMPDIR``, ``HOME`` and the cwd
    are the run's own dir, removed after it, but code that writes to the host's
    ``/tmp``, ``/var/tmp`` or ``/dev/shm`` by name leaves the file there, where
    the next run can read it, and a file in ``/dev/shm`` is RAM that the memory
    limit does not count (each file is capped at ``memory_mb`` by RLIMIT_FSIZE).
    A warning says so when the sandbox opens. Use it for code you would run
    yourself anyway, or install bubblewrap.

In every mode, when agentgym runs as root the code runs as ``nobody``
(uid 65534), so it cannot touch root's files or processes; rlimits bound the
code's CPU seconds, address space (``Limits.memory_mb``, less the private
/dev/shm where there is one: a memory bomb ends in ``MemoryError``, reported
as ``oom=True``), file sizes and process count (a fork bomb is contained), and
a wall-clock timeout kills it and everything it started. Memory is the address
space, not resident memory, and there is no CPU share limit (``Limits.cpus``
is not enforced); the work dir is on the host's disk, each file capped at
``memory_mb`` but not their total. Prefer :class:`DockerSandbox` for untrusted
code at scale.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from agentgym.errors import SandboxError, SandboxUnavailable
from agentgym.sandbox.base import ExecResult, Limits, Sandbox
from agentgym.sandbox.protocol import (FrameReader, build_request, encode, runner_command,
                                       sandbox_env, to_result)

__all__ = ["LocalSandbox", "bwrap_path"]

_log = logging.getLogger("agentgym.sandbox")

_NOBODY = 65534
_GRACE = 15.0  # seconds past the run's timeout before the runner itself counts as hung
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_ETC_FILES = ("/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime")


def _sandbox_user() -> int | None:
    """The uid the code runs as: nobody when we are root, else our own (None)."""
    return _NOBODY if os.geteuid() == 0 else None


def _default_python() -> str:
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.realpath(sys.executable)


def _bwrap_args(python: str, host_dir: str, shm_mb: int) -> list[str]:
    """bwrap's arguments: namespaces, a read-only system and /dev, a small /dev/shm, the work
    dir at /work."""
    args = ["--unshare-all", "--die-with-parent", "--as-pid-1", "--new-session",
            "--hostname", "sandbox", "--proc", "/proc", "--dev", "/dev",
            "--size", str(shm_mb * 1024 * 1024), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in _ETC_FILES:
        args += ["--ro-bind-try", path, path]
    prefix = str(Path(python).resolve().parents[1])
    if not any(prefix == d or prefix.startswith(d + "/") for d in _SYSTEM_DIRS):
        args += ["--ro-bind", prefix, prefix]  # an interpreter outside /usr (pyenv, conda)
    # bwrap's root is a tmpfs the jail's user could write to: make it read-only too.
    return args + ["--bind", host_dir, "/work", "--remount-ro", "/", "--chdir", "/work"]


def bwrap_path() -> str | None:
    """Path of a ``bwrap`` that can build a jail here (run as the sandbox user), else None."""
    found = shutil.which("bwrap")
    return found if found and _bwrap_works(found, _sandbox_user()) else None


@functools.cache
def _bwrap_works(bwrap: str, user: int | None) -> bool:
    """Whether bwrap can make its namespaces here (a container without userns cannot)."""
    command = [bwrap, "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
               "true"]
    try:
        result = subprocess.run(command, capture_output=True, timeout=10, env={}, check=False,
                                **_user_options(user))
    except (OSError, subprocess.SubprocessError):
        return False
    if result.returncode != 0:
        _log.info("bwrap cannot build a jail here: %s", result.stderr.decode(errors="replace"))
    return result.returncode == 0


def _user_options(user: int | None) -> dict:
    return {} if user is None else {"user": user, "group": user, "extra_groups": []}


def _count_processes(uid: int) -> int:
    """Processes ``uid`` holds now (RLIMIT_NPROC counts them all, not just ours)."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                count += os.stat(f"/proc/{name}").st_uid == uid
            except OSError:
                pass
    return count


class LocalSandbox(Sandbox):
    """Runs code on this machine, in bubblewrap when it works here, else as a plain subprocess.

    It isolates less than :class:`DockerSandbox` (see this module's docstring):
    without bubblewrap the code can read your files and reach the network, and
    where the kernel refuses a mount namespace it shares your /tmp and /dev/shm.

        with LocalSandbox() as sb:
            sb.run("print(1 + 1)").stdout   # '2\\n'

    ``use_bwrap``: True requires bubblewrap, False never uses it, None (default)
    uses it when it works. ``python``: the interpreter that runs the runner and
    the code (default: the system's ``/usr/bin/python3``).
    """

    def __init__(self, limits: Limits | None = None, *, use_bwrap: bool | None = None,
                 python: str | None = None) -> None:
        super().__init__(limits)
        self._user = _sandbox_user()
        self._bwrap = bwrap_path() if use_bwrap is not False else None
        if use_bwrap and self._bwrap is None:
            raise SandboxUnavailable(
                "bubblewrap is not installed or cannot create namespaces here; install it "
                "(apt-get install bubblewrap) or pass use_bwrap=None to fall back to a subprocess.")
        self.python = python or _default_python()
        if not os.access(self.python, os.X_OK):
            raise SandboxUnavailable(f"No Python interpreter at {self.python}; pass python= the "
                                     "path of a Python 3.9 or newer.")
        self.name = "bubblewrap" if self._bwrap else "subprocess"
        #: whether, without bubblewrap, each run gets its own /tmp and /dev/shm (see the module)
        self.private_mounts = self._bwrap is None and _private_mounts_work(self.python, self._user)
        if self._bwrap:
            self.isolation = "namespaces (no network, own PIDs), read-only system dirs, rlimits"
        elif self.private_mounts:
            self.isolation = ("rlimits, a session and a private /tmp and /dev/shm only: the "
                              "host's files and network are reachable")
        else:
            self.isolation = ("rlimits and a session only: the host's files and network are "
                              "reachable, and /tmp and /dev/shm are the host's")
            _log.warning("The local sandbox can make no mount namespace here: runs share the "
                         "host's /tmp and /dev/shm. Install bubblewrap.")

    def run(self, code: str, *, language: str = "python", stdin: str = "",
            files: Mapping[str, str | bytes] | None = None,
            timeout: float | None = None) -> ExecResult:
        if self._bwrap is not None:
            nproc = self.limits.pids  # counted per user namespace: this jail's processes only
        else:  # counted per uid across the machine: allow the ones it already has
            uid = os.geteuid() if self._user is None else self._user
            nproc = _count_processes(uid) + self.limits.pids
        request = build_request(code, language=language, stdin=stdin, files=files,
                                timeout=timeout, limits=self.limits, rlimit_memory=True,
                                nproc=nproc)
        if self._bwrap is not None or self.private_mounts:
            # /dev/shm is a tmpfs in RAM: its size comes out of the run's memory.
            request["memory_bytes"] -= _shm_mb(self.limits) * 1024 * 1024
        # As root the code runs as nobody, who must be able to reach the work dir: under /tmp,
        # not under a TMPDIR that may be private to root.
        parent = "/tmp" if self._user is not None else None
        with tempfile.TemporaryDirectory(prefix="agentgym-sandbox-", dir=parent) as host_dir:
            if self._user is not None:
                os.chown(host_dir, self._user, self._user)
            return self._run_runner(request, host_dir)

    def _run_runner(self, request: dict, host_dir: str) -> ExecResult:
        command, user = _command(self.python, host_dir, self._bwrap, self.private_mounts,
                                 self._user, _shm_mb(self.limits))
        try:
            process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=host_dir, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                start_new_session=True, **_user_options(user))
        except OSError as exc:
            raise SandboxUnavailable(f"Cannot start the local sandbox runner ({exc}); "
                                     f"check that {self.python} exists.") from exc
        try:
            out, err = process.communicate(encode(request), timeout=request["timeout"] + _GRACE)
        except subprocess.TimeoutExpired:
            out, err = b"", b"the runner did not answer in time"
        finally:
            _kill_group(process)
        return _read_reply(out, err, process.returncode)


def _shm_mb(limits: Limits) -> int:
    """MiB of the run's private /dev/shm: as Docker's, 16, but never over an eighth of its memory."""
    return max(1, min(16, limits.memory_mb // 8))


def _command(python: str, host_dir: str, bwrap: str | None, private: bool, user: int | None,
             shm_mb: int) -> tuple[list[str], int | None]:
    """argv that starts the runner for one run, and the uid to start it as."""
    if bwrap is not None:
        config = {"workdir": "/work", "wipe": ["/work", "/dev/shm"], "env": sandbox_env("/work")}
        return [bwrap, *_bwrap_args(python, host_dir, shm_mb), *runner_command(python, config)], user
    if private:  # the runner makes its mounts, then drops to ``user`` itself
        config = {"workdir": "/tmp", "wipe": ["/tmp", "/dev/shm"], "env": sandbox_env("/tmp"),
                  "private": {"tmp": host_dir, "shm_mb": shm_mb, "uid": user}}
        return runner_command(python, config), None
    config = {"workdir": host_dir, "wipe": [host_dir], "env": sandbox_env(host_dir)}
    return runner_command(python, config), user


@functools.cache
def _private_mounts_work(python: str, user: int | None) -> bool:
    """Whether the runner can make its private mounts here (root, or user namespaces allowed)."""
    with tempfile.TemporaryDirectory(prefix="agentgym-sandbox-",
                                     dir="/tmp" if user is not None else None) as host_dir:
        if user is not None:
            os.chown(host_dir, user, user)
        command, _ = _command(python, host_dir, None, True, user, 1)
        try:
            result = subprocess.run(command, input=b"", capture_output=True, timeout=30,
                                    cwd=host_dir, env={"PATH": "/usr/bin:/bin"}, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            _log.info("The runner cannot make private mounts here: %s", exc)
            return False
    messages = FrameReader().feed(result.stdout)
    if not (messages and messages[0].get("ready")):
        _log.info("The runner cannot make private mounts here: %s",
                  messages or result.stderr.decode(errors="replace")[-500:])
        return False
    return True


def _kill_group(process: subprocess.Popen) -> None:
    """Kill what is left of the runner's process group and reap the runner."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass  # the group is already empty
    process.wait()


def _read_reply(out: bytes, err: bytes, returncode: int | None) -> ExecResult:
    messages = FrameReader().feed(out)
    replies = [message for message in messages if "ready" not in message]
    if replies:
        return to_result(replies[0])
    if messages and returncode is not None and returncode < 0:
        # It was ready and then died by a signal: the code killed it (same uid, no PID namespace).
        return ExecResult(stdout="", stderr="[sandbox: the run killed its runner]\n",
                          exit_code=None)
    detail = err.decode("utf-8", errors="replace").strip()[-2000:]
    raise SandboxError(f"The local sandbox runner failed (exit status {returncode}): {detail}")
