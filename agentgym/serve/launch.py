"""Running the built-in server: in this process (``serve_builtin``) or as a child process.

``BuiltinServer`` is what ``agentgym rollout`` without ``--base-url`` and
the tests use: it starts ``python -m agentgym.serve`` on a free loopback
port, waits for ``/health``, and stops the process on exit::

    with BuiltinServer("tiny") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key)
        client.completions.create(model=server.model_name, prompt=[1, 2, 3], max_tokens=8)

A child process rather than a thread: the model then has its own
interpreter lock and torch thread settings, so the caller's event loop and
the server's do not slow each other down, and stopping it is clean. The child
runs on tcmalloc where the machine has it (``agentgym.allocator``).

The server always wants a key (``Authorization: Bearer KEY`` on every route
but ``/health``): one is generated when none is given, and ``.api_key`` holds
it. Code a model wrote runs on this host and reaches loopback; without the
key it cannot call ``/update_weights`` or use the model.
"""

from __future__ import annotations

import http.client
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import IO, Self

from agentgym.allocator import allocator_env
from agentgym.errors import ServerStartError

__all__ = [
    "PARENT_PID_ENV",
    "BuiltinServer",
    "default_torch_threads",
    "free_port",
    "serve_builtin",
    "stop_when_parent_exits",
    "wait_for_health",
]

#: Set by BuiltinServer in its child's environment: the pid whose exit ends the server.
PARENT_PID_ENV = "AGENTGYM_SERVER_PARENT_PID"

_LOOPBACK = "127.0.0.1"
#: urllib without proxies: requests to our own loopback servers never go through one.
_LOOPBACK_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port(host: str = _LOOPBACK) -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def stop_when_parent_exits(parent_pid: int, poll_seconds: float = 1.0) -> threading.Thread:
    """Send this process SIGTERM (a graceful shutdown) once ``parent_pid`` is no longer its parent.

    A trainer killed by SIGTERM or SIGKILL runs no cleanup, and its built-in server
    would otherwise live on, holding a port and gigabytes of memory. When the parent
    dies the child is re-parented, so ``os.getppid()`` changes: polling it works on
    every POSIX system, unlike Linux's PR_SET_PDEATHSIG, which also needs a
    ``preexec_fn`` that is unsafe in a threaded parent.
    """
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_seconds)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, name="stop-when-parent-exits", daemon=True)
    thread.start()
    return thread


def default_torch_threads() -> int:
    """Torch threads for a server's model: all cores but one, which the HTTP event loop needs (with the
    model in a process of its own too: on 2 cores, 2 threads made 178 tokens/s at 32 against 212)."""
    return max(1, (os.cpu_count() or 2) - 1)


def wait_for_health(url: str, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``url`` (each try times out after 2 s) until it answers 200; raise if ``process`` dies.

    Every server agentgym starts (built-in, vLLM, the stub) waits through here.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            if process.returncode == -signal.SIGINT:  # Ctrl-C reached the child first: the user's stop, not a fault
                raise KeyboardInterrupt
            raise ServerStartError(
                f"the server exited with status {process.returncode} before {url} answered.")
        try:
            with _LOOPBACK_OPENER.open(url, timeout=2.0) as response:
                if response.status == 200:
                    return
        except (OSError, http.client.HTTPException):  # refused, reset, timed out, 5xx, ...
            pass
        time.sleep(0.1)
    raise ServerStartError(f"{url} did not answer within {timeout:g} s.")


def serve_builtin(model: str, *, host: str = _LOOPBACK, port: int = 8000, api_key: str | None = None,
                  control_key: str | None = None, served_model_name: str | None = None, max_model_len: int | None = None,
                  torch_threads: int | None = None, prefix_cache_mib: int = 1024,
                  device: str = "auto", dtype: str = "float32", max_body_mib: float = 8.0,
                  engine_process: bool = False, log_level: str = "info") -> None:
    """Load ``model`` and serve it over HTTP until interrupted (blocks).

    ``api_key`` guards every route but ``/health``; without it the control
    routes want ``control_key`` (see ``create_app``). ``engine_process``: the model
    runs in a child process (``agentgym.serve.process``), else in a thread of this one.
    """
    from agentgym.serve.engine import Engine, EngineConfig
    from agentgym.serve.process import EngineProcess

    config = EngineConfig(model, max_model_len=max_model_len,
                          torch_threads=torch_threads or default_torch_threads(),
                          prefix_cache_mib=prefix_cache_mib, device=device, dtype=dtype)
    engine = EngineProcess(config) if engine_process else Engine(config)
    import uvicorn  # after the engine: an engine process loads its model meanwhile

    from agentgym.serve.app import create_app
    app = create_app(engine, api_key=api_key, control_key=control_key,
                     served_model_name=served_model_name, max_body_bytes=int(max_body_mib * 2**20))
    try:
        engine.start()
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False,
                    timeout_graceful_shutdown=5)
    finally:
        engine.close()


class BuiltinServer:
    """The built-in server in a child process on a loopback port; a context manager.

    ``base_url`` ends in ``/v1`` (what ``openai.OpenAI`` wants), ``url`` is the
    root (``/health``, ``/tokenize``, ``/update_weights``), ``model_name`` the
    name to put in requests, ``api_key`` the key every route but ``/health``
    wants (``api_key`` as given, or a random one).
    """

    def __init__(self, model: str, port: int | None = None, *, served_model_name: str | None = None,
                 max_model_len: int | None = None, api_key: str | None = None,
                 torch_threads: int | None = None, prefix_cache_mib: int | None = None,
                 device: str | None = None, dtype: str | None = None,
                 max_body_mib: float | None = None, engine_process: bool | None = None,
                 startup_timeout: float = 180.0) -> None:
        self.model = model
        self.port = port or free_port()
        self.model_name = served_model_name or model
        self.max_model_len = max_model_len
        self.api_key = api_key or secrets.token_urlsafe(24)
        self.torch_threads = torch_threads
        self.prefix_cache_mib = prefix_cache_mib  # None: the server's default
        self.device = device  # None: the server's default (auto: the GPU when there is one)
        self.dtype = dtype
        self.max_body_mib = max_body_mib  # None: the server's default
        self.engine_process = engine_process  # None: the server's default (a thread)
        self.startup_timeout = startup_timeout
        self.url = f"http://{_LOOPBACK}:{self.port}"
        self.base_url = f"{self.url}/v1"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def command(self) -> list[str]:
        """The child's command line."""
        args = [sys.executable, "-m", "agentgym.serve", "--model", self.model, "--host", _LOOPBACK,
                "--port", str(self.port), "--served-model-name", self.model_name]
        if self.max_model_len is not None:
            args += ["--max-model-len", str(self.max_model_len)]
        args += ["--api-key", self.api_key]
        if self.torch_threads is not None:
            args += ["--threads", str(self.torch_threads)]
        if self.prefix_cache_mib is not None:
            args += ["--prefix-cache-mib", str(self.prefix_cache_mib)]
        if self.device is not None:
            args += ["--device", self.device]
        if self.dtype is not None:
            args += ["--dtype", self.dtype]
        if self.max_body_mib is not None:
            args += ["--max-body-mib", str(self.max_body_mib)]
        if self.engine_process:
            args += ["--engine-process"]
        return args

    def start(self) -> BuiltinServer:
        """Start the child and wait until it is healthy (or raise with its log's tail)."""
        if self.process is not None:
            return self
        # A file, not a pipe (a full pipe would block the child); closed in stop().
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        self.process = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL,
                                        env=allocator_env({**os.environ, PARENT_PID_ENV: str(os.getpid())}))
        try:
            wait_for_health(f"{self.url}/health", self.startup_timeout, self.process)
        except ServerStartError as exc:
            tail = self.log_tail()
            self.stop()
            raise ServerStartError(f"the built-in server for {self.model!r} did not start: {exc}\n"
                                   f"--- its log ---\n{tail}") from exc
        except KeyboardInterrupt:
            self.stop()
            raise
        return self

    def log_tail(self, limit: int = 4000) -> str:
        """The end of the child's output."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")[-limit:]

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the child: SIGTERM (graceful), then SIGKILL after ``timeout``."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"BuiltinServer({self.model!r}, port={self.port})"
