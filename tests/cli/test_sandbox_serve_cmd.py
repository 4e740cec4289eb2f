"""``agentgym sandbox serve``: the real command in a subprocess, and the options it refuses."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx2
import pytest
from sandbox_helpers import require_docker
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.errors import SandboxUnavailable
from agentgym.sandbox import LocalSandbox, RemoteSandbox
from agentgym.sandbox.container import LABEL, LABEL_OWNER
from agentgym.sandbox.docker import connect
from agentgym.sandbox.service import ServiceThread
from agentgym.sandbox.shared import close_all
from agentgym.serve.launch import free_port

runner = CliRunner()
pytestmark = pytest.mark.timeout(180)


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    output: str = ""
    """What the command printed, once it has stopped."""


@contextlib.contextmanager
def serve(*args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """``python -m agentgym sandbox serve ARGS`` until the block ends (SIGTERM, as Ctrl-C would)."""
    log = tempfile.TemporaryFile()  # noqa: SIM115 -- a file, not a pipe that could fill up
    process = subprocess.Popen([sys.executable, "-m", "agentgym", "sandbox", "serve", *args],
                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               env={**os.environ, "COLUMNS": "300", **(env or {})})
    served = Served(process)
    try:
        yield served
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.seek(0)
        served.output = log.read().decode(errors="replace")
        log.close()


def connect_when_up(url: str, process: subprocess.Popen[bytes], token: str,
                    timeout: float = 120.0) -> RemoteSandbox:
    """A client of the service once it answers (it may be starting Docker containers)."""
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, "the service exited before it answered"
        try:
            return RemoteSandbox(url, token=token)
        except SandboxUnavailable:
            assert time.monotonic() < deadline, f"{url} did not answer within {timeout} s"
            time.sleep(0.2)


@pytest.mark.slow
def test_serve_runs_code_for_a_client_and_stops_cleanly_on_sigterm() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serve("--backend", "local", "--port", str(port), "--pool-size", "2",
               env={"AGENTGYM_SANDBOX_TOKEN": "cli-token"}) as served:
        with connect_when_up(url, served.process, "cli-token") as remote:
            assert remote.run("print(sum(range(1000)))").stdout == "499500\n"
            assert remote.run("while True: pass", timeout=1).timed_out
        with pytest.raises(SandboxUnavailable, match="refused the token"):
            RemoteSandbox(url, token="wrong")
    assert served.process.returncode == 0, served.output
    assert "Serving the" in served.output and "token required" in served.output


@pytest.mark.slow
@pytest.mark.docker
def test_serve_docker_removes_its_containers_when_stopped() -> None:
    require_docker()
    port = free_port()
    with serve("--backend", "docker", "--port", str(port), "--pool-size", "2",
               "--token", "t") as served:
        with connect_when_up(f"http://127.0.0.1:{port}", served.process, "t") as remote:
            assert "container" in remote.isolation
            assert remote.run("print(input())", stdin="pooled\n").stdout == "pooled\n"
        owner = f"{socket.gethostname()}:{served.process.pid}"
        with contextlib.closing(connect()) as api:
            assert api.containers(filters={"label": f"{LABEL_OWNER}={owner}"})
    assert served.process.returncode == 0, served.output
    with contextlib.closing(connect()) as api:
        left = api.containers(all=True, filters={"label": [f"{LABEL}=1", f"{LABEL_OWNER}={owner}"]})
    assert not left, f"containers left behind by the service: {left}"


@pytest.mark.parametrize(("args", "message"), [
    (["--host", "0.0.0.0"], "Refusing to bind 0.0.0.0 without a token"),
    (["--host", "sandbox.example"], "Refusing to bind sandbox.example without a token"),
    (["--backend", "remote"], "--backend must be docker, local or auto"),
    (["--port", "0"], "--port must be between 1 and 65535"),
    (["--pool-size", "0"], "--pool-size must be between 1 and 256"),
    (["--token", " "], "--token is empty"),
    (["--backend", "local", "--image", "x:1"], "--image is for the docker backend"),
])
def test_serve_refuses_bad_options_with_the_fix(args: list[str], message: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTGYM_SANDBOX_TOKEN", raising=False)
    result = runner.invoke(app, ["sandbox", "serve", *args], terminal_width=300)
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


@pytest.mark.parametrize("form", ["{url}", "[{url}, {url}]"])
def test_rollout_sends_code_env_runs_to_the_service_given_with_k(form: str) -> None:
    with LocalSandbox() as sandbox, ServiceThread(sandbox) as service:
        result = runner.invoke(app, ["rollout", "--env", "Code-LLM-v0", "--policy", "random",
                                     "--episodes", "2", "--concurrency", "1", "--max-turns", "1",
                                     "-k", f"sandbox_url={form.format(url=service.url)}"],
                               terminal_width=200)
        assert result.exit_code == 0, result.output
        runs = httpx2.get(f"{service.url}/health", timeout=10, trust_env=False).json()["runs"]
    close_all()
    assert runs == 2  # one answer per episode, each run on the service
