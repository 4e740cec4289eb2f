"""The runner: runs untrusted code for a sandbox, one request at a time (standard library only).

Every backend starts it the same way, inside the container or the bubblewrap
jail (``python3 -I -c SOURCE CONFIG_JSON``), so the code that enforces limits
is the code that ships with this package, never a copy baked into an image.
It reads requests on stdin and answers on stdout, each message a 4-byte
big-endian length then that many bytes of UTF-8 JSON; the first message out
is ``{"ready": true, ...}``.

Three kinds of process, so that no run can see another's data:

- the *mother* (this process): reads a request, writes its files and code into
  the work dir, collects stdout and stderr (capped), wipes the work dir and the
  other writable dirs, answers;
- the *zygote*, forked before the first request, so its memory never holds a
  request (a run forked from it cannot dig an earlier run's code, files or
  output out of freed memory). For each run it forks the child, waits for it
  until the deadline, then kills every process the child left behind (it is
  their subreaper, so daemonised grandchildren come back to it) and reports;
- the *child*, a fork of the zygote: it takes the pipes as stdin, stdout and
  stderr, starts its own session, sets its rlimits, and runs Python code in
  place (no interpreter start-up: a warm run takes milliseconds) or execs bash.

The runner shares its uid with the code it runs. The mother is protected by
being PID 1 of its namespace where the backend gives it one (Docker,
bubblewrap): the kernel drops signals to PID 1 that it has no handler for,
and the processes are not dumpable, so they cannot be traced or read through
/proc. If a run kills the zygote anyway, the mother kills what is left,
answers, and asks to be replaced.
"""

import base64
import json
import math
import os
import resource
import select
import selectors
import shutil
import signal
import socket
import struct
import sys
import time

# Imported here, in the zygote's pristine memory, so a run does not pay for them.
import atexit
import builtins
import gc
import importlib.machinery
import types

__all__ = ["BadFiles", "RunnerError", "SupervisorLost", "handle", "kill_descendants", "main", "prepare_child",
           "private_mounts", "read_message", "run_bash", "run_python", "serve", "supervise", "wipe",
           "write_files", "write_message", "zygote_loop"]

_HEADER = struct.Struct(">I")
_MAX_MESSAGE = 1 << 30
_CHUNK = 1 << 16
_TAIL = 2048  # bytes of stderr kept past the cap, to recognise a MemoryError
_GRACE = 5.0  # seconds the mother waits for the zygote's report past the deadline
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 1, 4, 36
_CODE_FILES = {"python": "main.py", "bash": "main.sh"}
_BASH = ("/bin/bash", "/usr/bin/bash")


class RunnerError(Exception):
    """A request the runner cannot serve (bad field, unwritable file)."""


class BadFiles(RunnerError):
    """The request's files cannot be written (one is in the way of another, a name too long)."""


class SupervisorLost(RunnerError):
    """The zygote died or hung (a run can kill it: they share a uid)."""


# ---------------------------------------------------------------- messages


def _read_exact(fd, size):
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def read_message(fd):
    """One length-prefixed JSON message from ``fd``, or None at end of stream."""
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > _MAX_MESSAGE:
        raise RunnerError(f"message of {size} bytes is over the limit")
    body = _read_exact(fd, size)
    return None if body is None else json.loads(body.decode("utf-8"))


def write_message(fd, message):
    body = json.dumps(message).encode("utf-8")
    data = memoryview(_HEADER.pack(len(body)) + body)
    while data:
        data = data[os.write(fd, data):]


# ---------------------------------------------------------------- process helpers


def _prctl(option, value):
    """prctl(2) through ctypes; False where it is not available (not Linux, no ctypes)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (ImportError, OSError, AttributeError):
        return False


def _children():
    """Process ids whose parent is this process (zombies included)."""
    me = os.getpid()
    path = f"/proc/{me}/task/{me}/children"
    try:
        with open(path) as handle:
            return [int(pid) for pid in handle.read().split()]
    except OSError:
        pass
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == me:
                found.append(int(name))
    return found


def _is_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def kill_descendants(pgid=None):
    """SIGKILL every process below this one until none is left; the number that were alive.

    This process is a subreaper, so an orphan anywhere below comes back to it
    as a child: killing the children and reaping until ECHILD reaches all.
    """
    alive = {pid for pid in _children() if not _is_zombie(pid)}
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    while True:
        for pid in _children():
            if pid not in alive and not _is_zombie(pid):
                alive.add(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return len(alive)
        time.sleep(0.001)


def _wait(pid, deadline):
    """Wait for ``pid`` until ``deadline``; (status, rusage) or None when time ran out."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            waited, status, usage = os.wait4(pid, os.WNOHANG)
            if waited:
                return status, usage
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if pidfd is None:
                time.sleep(min(left, 0.002))
            else:
                select.select([pidfd], [], [], left)
    finally:
        if pidfd is not None:
            os.close(pidfd)


# ---------------------------------------------------------------- the child


def _set_limits(job):
    cpu = math.ceil(job["cpu_seconds"])
    limits = [(resource.RLIMIT_CPU, cpu, cpu + 1), (resource.RLIMIT_CORE, 0, 0)]
    if job.get("memory_bytes"):
        limits.append((resource.RLIMIT_AS, job["memory_bytes"], job["memory_bytes"]))
    if job.get("nproc"):
        limits.append((resource.RLIMIT_NPROC, job["nproc"], job["nproc"]))
    if job.get("fsize_bytes"):
        limits.append((resource.RLIMIT_FSIZE, job["fsize_bytes"], job["fsize_bytes"]))
    for which, soft, hard in limits:
        # Lowering is always allowed; raising past the hard limit we were given is not.
        current_hard = resource.getrlimit(which)[1]
        if current_hard != resource.RLIM_INFINITY:
            hard = min(hard, current_hard)
        resource.setrlimit(which, (min(soft, hard), hard))


def prepare_child(job, fds, config):
    """In the forked child: take the pipes, set limits, enter the work dir. Returns the job."""
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(3, 1 << 16)
    _prctl(_PR_SET_DUMPABLE, 1)  # its own /proc entries behave as usual
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the mother dropped Python's
    _set_limits(job)
    os.chdir(config["workdir"])
    os.umask(0o022)
    os.environ.clear()
    os.environ.update(config["env"])
    return job


def run_python(config):
    """Run the job's main.py as ``__main__`` in this (forked) interpreter; never returns.

    It behaves as ``python3 main.py`` would, except that the interpreter is
    already warm and that it ends with ``os._exit`` after Python's own exit
    steps (threads joined, atexit handlers, ``__main__``'s globals released,
    streams flushed): tearing down every module would cost ~20 ms a run.
    """
    path = os.path.join(config["workdir"], _CODE_FILES["python"])
    # The streams live as long as the process, as the interpreter's own do.
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace",  # noqa: SIM115
                                       closefd=False, buffering=1)
    sys.argv = [_CODE_FILES["python"]]
    sys.path.insert(0, config["workdir"])
    module = types.ModuleType("__main__")
    module.__dict__.update(__file__=path, __cached__=None, __builtins__=builtins,
                           __loader__=importlib.machinery.SourceFileLoader("__main__", path))
    sys.modules["__main__"] = module
    try:
        with open(path, "rb") as handle:
            code = compile(handle.read(), path, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 (running the code is the point)
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException as exc:  # noqa: BLE001 (the code's own exception, shown as Python would)
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != path:
            tb = tb.tb_next  # the frames above the code's are the runner's
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        status = 1
    _finish(module, status)


def _exit_status(code):
    """Python's reading of ``SystemExit.code``: None is 0, an int is itself, anything else is printed."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _finish(module, status):
    """Python's exit steps that the code can observe, then ``os._exit``."""
    threading = sys.modules.get("threading")
    try:
        if threading is not None and hasattr(threading, "_shutdown"):
            threading._shutdown()  # joins the code's non-daemon threads, as the interpreter does
        atexit._run_exitfuncs()
        module.__dict__.clear()  # runs __del__ and closes files the code left open
        gc.collect()
    except BaseException as exc:  # noqa: BLE001 (code run at exit failed: Python prints it too)
        sys.excepthook(type(exc), exc, exc.__traceback__)
    for stream in (sys.stdout, sys.stderr):
        try:
            if not getattr(stream, "closed", False):
                stream.flush()
        except (OSError, ValueError):
            status = status or 120  # Python's status when stdout cannot be flushed at exit
    os._exit(status)


def run_bash(config):
    """Exec bash on the job's main.sh; never returns."""
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them; a shell must not
        signal.signal(sig, signal.SIG_DFL)
    for shell in _BASH:
        if os.path.exists(shell):
            os.execve(shell, ["bash", _CODE_FILES["bash"]], config["env"])
    os.write(2, b"bash is not installed in this sandbox\n")
    os._exit(127)


# ---------------------------------------------------------------- the zygote


def zygote_loop(sock, config):
    """Fork one child per job and supervise it. Returns the job in the child, None at the end."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    gc.freeze()  # the runner's own objects: a child's collection then only walks the code's
    while True:
        job, fds = _receive_job(sock)
        if job is None:
            return None
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            sock.close()
            return prepare_child(job, fds, config)
        for fd in fds:
            os.close(fd)
        _send_json(sock, supervise(pid, job, start))


def supervise(pid, job, start):
    """Wait for the child until its deadline, then clean up after it; the report for the mother."""
    waited = _wait(pid, start + job["timeout"])
    timed_out = waited is None
    if timed_out:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
    else:
        status, usage = waited
    duration = time.monotonic() - start
    leftovers = kill_descendants(pgid=pid)
    return {"status": status, "timed_out": timed_out, "duration": duration,
            "cpu": usage.ru_utime + usage.ru_stime, "leftovers": leftovers}


def _receive_job(sock):
    try:
        data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
    except OSError:
        return None, []
    if not data:
        return None, []
    return json.loads(data.decode("utf-8")), fds


def _send_json(sock, message):
    sock.sendall(json.dumps(message).encode("utf-8") + b"\n")


# ---------------------------------------------------------------- private mounts

_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000


def _mount(libc, source, target, fstype, flags, data):
    import ctypes

    args = [None if value is None else value.encode() for value in (source, target, fstype)]
    if libc.mount(*args, ctypes.c_ulong(flags), None if data is None else data.encode()) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {target}: {os.strerror(errno)}")


def private_mounts(config):
    """Give this runner its own mount namespace: ``/tmp`` and ``/var/tmp`` are the host's per-run
    dir (``config["private"]["tmp"]``, removed after the run), ``/dev/shm`` a fresh tmpfs of
    ``shm_mb`` MiB; the namespace, and all it holds, ends with the runner's last process.

    As root it then drops to ``uid`` (no capabilities are left). Otherwise it needs a user
    namespace too, and re-executes itself so that the code keeps no capability in it (a
    non-root ``execve`` drops them all). Returns the config to serve with; OSError where
    the kernel refuses the namespaces.
    """
    import ctypes

    private = config["private"]
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.geteuid(), os.getegid()
    flags = _CLONE_NEWNS if uid == 0 else _CLONE_NEWUSER | _CLONE_NEWNS
    if libc.unshare(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare: {os.strerror(errno)}")
    if uid != 0:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE, None)  # nothing goes back to the host
    _mount(libc, private["tmp"], "/tmp", None, _MS_BIND, None)
    if os.path.isdir("/var/tmp"):  # from /tmp, now the run's dir: the host's path may be gone
        _mount(libc, "/tmp", "/var/tmp", None, _MS_BIND, None)
    _mount(libc, "tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"size={private['shm_mb']}m,mode=1777")
    config = dict(config, private_done=True)
    if uid == 0:
        if private.get("uid") is not None:
            os.setgroups([])
            os.setgid(private["uid"])
            os.setuid(private["uid"])  # all uids non-zero: the capabilities go too
        return config
    with open("/proc/self/cmdline", "rb") as handle:
        argv = handle.read().split(b"\0")[:-1]
    os.execv(sys.executable, [*argv[:-1], json.dumps(config).encode()])
    return config  # not reached


# ---------------------------------------------------------------- the mother


class _Output:
    """One stream of the child: its first ``cap`` bytes, its last few, its total size."""

    def __init__(self, cap):
        self.cap, self.head, self.tail, self.total = cap, bytearray(), b"", 0

    def add(self, chunk):
        self.total += len(chunk)
        if len(self.head) < self.cap:
            self.head += chunk[: self.cap - len(self.head)]
        self.tail = (self.tail + chunk)[-_TAIL:]

    def text(self):
        text = self.head.decode("utf-8", errors="replace")
        if self.total > self.cap:
            text += f"\n[... output truncated: {self.total - self.cap} more bytes ...]\n"
        return text


def _safe_path(workdir, name):
    if not isinstance(name, str) or not name or "\0" in name:
        raise RunnerError(f"file name {name!r} is not a non-empty string")
    if os.path.isabs(name) or ".." in name.replace("\\", "/").split("/"):
        raise RunnerError(f"file name {name!r} must be relative and stay inside the work dir")
    return os.path.join(workdir, name)


def write_files(job_files, code, language, workdir):
    for name, encoded in job_files:
        path = _safe_path(workdir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(encoded))
    # The host sends valid Unicode; surrogatepass keeps a stray surrogate from killing the
    # runner (the code then fails to compile, as a result).
    with open(os.path.join(workdir, _CODE_FILES[language]), "w", encoding="utf-8",
              errors="surrogatepass") as handle:
        handle.write(code)


def _make_walkable(top):
    """Give back the owner's rights on every dir below ``top`` (a run may chmod 000 them)."""
    try:
        os.chmod(top, 0o700)
    except OSError:
        pass  # not ours (a shared /dev/shm): the run could not have changed it either
    for root, dirs, _ in os.walk(top):
        for name in dirs:
            try:
                os.chmod(os.path.join(root, name), 0o700, follow_symlinks=False)
            except OSError:
                pass


def wipe(paths):
    """Empty each dir in ``paths``, whatever modes the code left; True when all are empty."""
    clean = True
    for top in paths:
        if not os.path.isdir(top):
            continue
        _make_walkable(top)
        for name in os.listdir(top):
            path = os.path.join(top, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            except OSError:
                clean = False
        clean = clean and not os.listdir(top)
    return clean


def _oom_kills(config):
    """The cgroup's count of OOM kills (the first counter file that reads), 0 without one."""
    for path in config.get("oom_counter") or []:
        try:
            with open(path) as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return 0


def _collect(zygote, out_fd, err_fd, outputs, deadline):
    """Read the child's output until both pipes close and the zygote reports; the report.

    The report is None when the zygote died (the run killed it): the mother,
    a subreaper too, then kills what the run left so that its pipes close.
    """
    selector = selectors.DefaultSelector()
    selector.register(out_fd, selectors.EVENT_READ, outputs[0])
    selector.register(err_fd, selectors.EVENT_READ, outputs[1])
    selector.register(zygote, selectors.EVENT_READ, None)
    report, buffer, open_pipes, lost = None, b"", 2, False
    try:
        while open_pipes or (report is None and not lost):
            left = deadline - time.monotonic()
            if left <= 0:
                raise SupervisorLost("the supervisor did not report in time")
            for key, _ in selector.select(left):
                if key.data is not None:
                    chunk = os.read(key.fd, _CHUNK)
                    if chunk:
                        key.data.add(chunk)
                    else:
                        selector.unregister(key.fd)
                        open_pipes -= 1
                    continue
                chunk = zygote.recv(_CHUNK)
                buffer += chunk
                if not chunk:
                    selector.unregister(zygote)
                    lost = True
                    kill_descendants()
                elif buffer.endswith(b"\n"):
                    report = json.loads(buffer.decode("utf-8"))
                    selector.unregister(zygote)
    finally:
        selector.close()
    return report


def _verdict(job, report, outputs, oom_counted):
    """exit_code, timed_out and oom of a finished run, from its wait status and output."""
    status, cpu_limit = report["status"], math.ceil(job["cpu_seconds"])
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    cpu_out = signum == signal.SIGXCPU or (signum == signal.SIGKILL and report["cpu"] >= cpu_limit)
    timed_out = report["timed_out"] or cpu_out
    memory_error = (job["language"] == "python" and os.WIFEXITED(status)
                    and os.WEXITSTATUS(status) == 1 and b"MemoryError" in outputs[1].tail)
    unexplained_kill = signum == signal.SIGKILL and not timed_out and not job.get("oom_counter")
    oom = not timed_out and (oom_counted or memory_error or unexplained_kill)
    if timed_out or (oom and signum is not None):
        exit_code = None
    else:
        exit_code = os.waitstatus_to_exitcode(status)
    return exit_code, timed_out, oom


def handle(request, zygote, config):
    """Run one request through the zygote; the reply."""
    job = _job(request, config)
    try:
        write_files(request.get("files", []), request["code"], job["language"], config["workdir"])
    except OSError as exc:  # e.g. files "a" and "a/b": the request's fault, not the runner's
        raise BadFiles(f"cannot write the files: {exc}") from exc
    stdin_fd = os.memfd_create("stdin")
    os.write(stdin_fd, request.get("stdin", "").encode("utf-8", "surrogatepass"))
    os.lseek(stdin_fd, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    oom_before = _oom_kills(config)
    outputs = (_Output(job["output_bytes"]), _Output(job["output_bytes"]))
    try:
        try:
            socket.send_fds(zygote, [json.dumps(job).encode("utf-8")], [stdin_fd, out_w, err_w])
        except OSError as exc:
            raise SupervisorLost(f"the supervisor is gone ({exc})") from exc
        finally:
            for fd in (stdin_fd, out_w, err_w):  # the child holds its own copies now
                os.close(fd)
        report = _collect(zygote, out_r, err_r, outputs, time.monotonic() + job["timeout"] + _GRACE)
    finally:
        os.close(out_r)
        os.close(err_r)
    clean = wipe(config["wipe"])
    reply = {"stdout": outputs[0].text(), "stderr": outputs[1].text(), "exit_code": None,
             "timed_out": False, "oom": False, "duration": 0.0,
             "truncated": any(out.total > out.cap for out in outputs), "leftovers": 1,
             "clean": clean, "replace": True, "fatal": True}
    if report is None:
        reply["stderr"] += "[sandbox: the run killed its supervisor]\n"
        return reply
    exit_code, timed_out, oom = _verdict(job, report, outputs, _oom_kills(config) > oom_before)
    reply.update(exit_code=exit_code, timed_out=timed_out, oom=oom, duration=report["duration"],
                 leftovers=report["leftovers"], fatal=False,
                 replace=bool(timed_out or oom or report["leftovers"] or not clean))
    return reply


def _job(request, config):
    """The small part of a request the zygote needs (no code, no files, no stdin)."""
    language = request.get("language")
    if language not in _CODE_FILES:
        raise RunnerError(f"language must be one of {sorted(_CODE_FILES)}, got {language!r}")
    if not isinstance(request.get("code"), str):
        raise RunnerError("code must be a string")
    job = {"language": language, "oom_counter": bool(config.get("oom_counter"))}
    for key in ("timeout", "cpu_seconds", "output_bytes", "memory_bytes", "nproc", "fsize_bytes"):
        value = request.get(key)
        if value is not None and (not isinstance(value, (int, float)) or value <= 0):
            raise RunnerError(f"{key} must be a positive number, got {value!r}")
        job[key] = value
    for key in ("timeout", "cpu_seconds", "output_bytes"):
        if job[key] is None:
            raise RunnerError(f"{key} is required")
    return job


def _lost_zygote(error, config):
    """The reply when the zygote is gone: everything it ran is killed, this runner must go."""
    leftovers = kill_descendants()
    wipe(config["wipe"])
    return {"stdout": "", "stderr": f"[sandbox: {error}]\n", "exit_code": None,
            "timed_out": False, "oom": False, "duration": 0.0, "truncated": False,
            "leftovers": leftovers, "clean": False, "replace": True, "fatal": True}


def serve(config):
    """The mother's loop. Returns a job only in a forked child, which then runs it."""
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as PID 1: a signal with no handler is dropped
    mother_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        mother_end.close()
        # The zygote must never touch the protocol streams: only the mother speaks on them.
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        job = zygote_loop(zygote_end, config)
        if job is None:
            os._exit(0)
        return job
    zygote_end.close()
    write_message(1, {"ready": True, "pid": os.getpid(), "python": sys.version.split()[0]})
    while True:
        request = read_message(0)
        if request is None:
            return None
        try:
            reply = handle(request, mother_end, config)
            if reply["fatal"]:
                write_message(1, reply)
                return None
        except SupervisorLost as exc:
            write_message(1, _lost_zygote(str(exc), config))
            return None
        except RunnerError as exc:
            reply = {"error": str(exc), "replace": not wipe(config["wipe"]),
                     "invalid": isinstance(exc, BadFiles)}
        except OSError as exc:
            reply = {"error": f"runner: {exc}", "replace": True}
        write_message(1, reply)


def main():
    """Entry point: ``python3 -I -c SOURCE CONFIG_JSON``."""
    config = json.loads(sys.argv[1])
    if config.get("private") and not config.get("private_done"):
        try:
            config = private_mounts(config)
        except OSError as exc:  # the host falls back to a plain subprocess (it probes first)
            write_message(1, {"error": f"no private mounts here: {exc}", "replace": True})
            return
    job = serve(config)
    if job is None:
        return
    if job["language"] == "bash":
        run_bash(config)
    run_python(config)


if __name__ == "__main__":
    main()
