"""Adversarial tests: each protected property of each backend, one at a time.

"docker" and "bubblewrap" are jails; "subprocess" is the last-resort fallback
and is only held to the properties its docstring promises (limits, timeouts,
output caps, cleanup, a scrubbed environment). Network tests never aim at any
address but loopback.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_helpers import BACKENDS, JAILED, LIMITS, require_docker

from agentgym.sandbox import DockerSandbox, Sandbox

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("sandbox", JAILED, indirect=True)
def test_the_only_network_interface_is_loopback(sandbox: Sandbox) -> None:
    code = ("lines = open('/proc/net/dev').read().splitlines()[2:]\n"
            "print(sorted(line.split(':')[0].strip() for line in lines))")
    result = sandbox.run(code)
    assert result.ok, result
    assert result.stdout.strip() == "['lo']"


@pytest.mark.parametrize("sandbox", JAILED, indirect=True)
def test_names_do_not_resolve(sandbox: Sandbox) -> None:
    # With no interface but lo, a lookup sends nothing off the machine.
    code = ("import socket\n"
            "try:\n    print(socket.getaddrinfo('example.com', 80))\n"
            "except OSError as exc:\n    print('failed', type(exc).__name__)\n")
    result = sandbox.run(code)
    assert result.stdout.startswith("failed"), result


@pytest.fixture
def host_server() -> Iterator[int]:
    """A TCP server on the host's 127.0.0.1 that answers 'host-secret' to anyone who connects."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.sendall(b"host-secret")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    stop.set()
    thread.join()
    server.close()


@pytest.mark.parametrize("sandbox", JAILED, indirect=True)
def test_a_server_on_the_hosts_loopback_is_out_of_reach(sandbox: Sandbox, host_server: int) -> None:
    with socket.create_connection(("127.0.0.1", host_server), timeout=5) as probe:
        assert probe.recv(100) == b"host-secret"  # the server works: the test can fail
    code = ("import socket\n"
            f"try:\n    print(socket.create_connection(('127.0.0.1', {host_server}), 3).recv(100))\n"
            "except OSError as exc:\n    print('failed', type(exc).__name__)\n")
    result = sandbox.run(code)
    assert result.stdout.startswith("failed") and "host-secret" not in result.stdout, result


@pytest.mark.parametrize("sandbox", JAILED, indirect=True)
def test_writes_outside_the_work_dir_fail(sandbox: Sandbox) -> None:
    code = ("import json, os\nwritten = []\n"
            "for path in ['/x', '/etc/x', '/usr/x', '/bin/x', '/tmp/x', '/var/tmp/x', '/root/x',"
            " '/home/x', '../x']:\n"
            "    try:\n        open(path, 'w').write('x')\n        written.append(path)\n"
            "    except OSError:\n        pass\n"
            "open('inside.txt', 'w').write('ok')\n"
            "print(json.dumps(written), open('inside.txt').read())\n")
    result = sandbox.run(code)
    assert result.ok, result
    assert result.stdout.strip() == "[] ok"


@pytest.mark.parametrize("sandbox", BACKENDS, indirect=True)
def test_a_fork_bomb_is_contained_and_the_host_still_runs(sandbox: Sandbox) -> None:
    code = ("import os\n"
            "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
    result = sandbox.run(code, timeout=3)
    assert result.timed_out or result.exit_code is not None
    assert subprocess.run(["true"], timeout=30, check=False).returncode == 0  # the host can still fork
    after = sandbox.run("print('alive')")
    assert after.stdout == "alive\n", after


@pytest.mark.parametrize("sandbox", BACKENDS, indirect=True)
def test_a_memory_bomb_ends_as_oom(sandbox: Sandbox) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(b'x' * 10_000_000)\n"
    result = sandbox.run(code)
    assert result.oom and not result.timed_out and not result.ok, result
    assert sandbox.run("print('next')").stdout == "next\n"


@pytest.mark.parametrize("sandbox", BACKENDS, indirect=True)
def test_an_infinite_loop_times_out_within_the_limit(sandbox: Sandbox) -> None:
    result = sandbox.run("while True:\n    pass\n", timeout=1.0)
    assert result.timed_out and result.exit_code is None and not result.oom, result
    # The runner's own measure: the limit plus a margin. The CPU-seconds limit (the timeout
    # too, by default) can fire a millisecond before the wall clock's: CPU time is counted
    # in ticks, so a busy loop may be charged its second at 0.999 s of wall time.
    assert 0.95 <= result.duration < 1.0 + 2.0


@pytest.mark.parametrize("sandbox", BACKENDS, indirect=True)
def test_a_100_mb_print_is_truncated(sandbox: Sandbox) -> None:
    result = sandbox.run("import sys\nsys.stdout.write('x' * 100_000_000)\nprint('!', file=sys.stderr)")
    assert result.truncated and result.exit_code == 0, result.stderr
    assert result.stdout.startswith("x" * LIMITS.output_bytes)
    assert len(result.stdout) < LIMITS.output_bytes + 200
    assert "truncated" in result.stdout[LIMITS.output_bytes:]
    assert result.stderr == "!\n"


@pytest.mark.parametrize("sandbox", BACKENDS, indirect=True)
def test_the_hosts_environment_is_not_visible(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("AGENTGYM_TEST_SECRET", secret)
    code = ("import os, json\nfound = [k for k, v in os.environ.items() if 'secret-' in v]\n"
            "print(json.dumps(found), sorted(os.environ))")
    result = sandbox.run(code)
    assert result.ok and result.stdout.startswith("[] "), result
    assert secret not in result.stdout
    # bash reads the environment differently; check it too.
    assert sandbox.run("env", language="bash").stdout.count("secret-") == 0


@pytest.mark.parametrize("sandbox", JAILED, indirect=True)
def test_the_hosts_files_are_not_visible(sandbox: Sandbox, tmp_path: Path) -> None:
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text("host-secret")
    home = Path.home() / ".bashrc"
    code = ("import json\nseen = {}\n"
            f"for path in [{str(secret_file)!r}, {str(home)!r}, '/etc/shadow', '/proc/1/environ']:\n"
            "    try:\n        seen[path] = open(path).read()[:50]\n"
            "    except OSError as exc:\n        pass\n"
            "print(json.dumps(seen))\n")
    result = sandbox.run(code)
    assert result.ok, result
    seen = json.loads(result.stdout)
    assert str(secret_file) not in seen and str(home) not in seen and "/etc/shadow" not in seen
    assert "host-secret" not in result.stdout


def _processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (containers share the host's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.mark.parametrize("sandbox", BACKENDS, indirect=True)
def test_sleeping_children_are_killed_at_the_end(sandbox: Sandbox) -> None:
    marker = f"{1000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    code = ("import os, subprocess\n"
            f"subprocess.Popen(['sleep', '{marker}'])\n"
            f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
            "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        os.execvp('sleep', ['sleep', '{marker}'])\n    os._exit(0)\n"
            "import time\ntime.sleep(0.2)\nprint('spawned')\n")
    result = sandbox.run(code)
    assert result.stdout == "spawned\n", result
    assert _processes_with(marker) == []


def test_one_runs_files_are_invisible_to_the_next(fresh_sandbox: Sandbox) -> None:
    # A subprocess with no mount namespace shares the host's /dev/shm (its docstring says so).
    private = fresh_sandbox.name != "subprocess" or getattr(fresh_sandbox, "private_mounts", False)
    shm = "'/dev/shm'" if private else "None"
    first = fresh_sandbox.run(
        "import os, tempfile\nopen('left.txt', 'w').write('secret')\nos.makedirs('d/e')\n"
        "os.chmod('d', 0)\nopen(os.path.join(tempfile.gettempdir(), 't.txt'), 'w').write('x')\n"
        f"shm = {shm}\nif shm and os.path.isdir(shm):\n    open(shm + '/s.txt', 'w').write('x')\n")
    assert first.ok, first
    second = fresh_sandbox.run(
        f"import os, tempfile\nshm = {shm}\n"
        "print(sorted(os.listdir('.')), sorted(os.listdir(tempfile.gettempdir())),"
        " os.listdir(shm) if shm and os.path.isdir(shm) else [])")
    assert second.stdout == "['main.py'] ['main.py'] []\n", second


@pytest.fixture(params=[pytest.param("docker", marks=pytest.mark.docker), "bubblewrap", "subprocess"])
def fresh_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A sandbox that must reuse its one container, so a leak between runs would show."""
    if request.param == "docker":
        require_docker()
        with DockerSandbox(LIMITS, pool_size=1, max_containers=1) as sandbox:
            yield sandbox
        return
    yield request.getfixturevalue({"bubblewrap": "bwrap_sandbox",
                                   "subprocess": "subprocess_sandbox"}[request.param])


@pytest.mark.parametrize("sandbox", BACKENDS, indirect=True)
def test_64_runs_in_parallel_all_return(sandbox: Sandbox) -> None:
    async def many() -> list:
        return await asyncio.gather(*(sandbox.arun(f"print({i} * 2)") for i in range(64)))

    results = asyncio.run(many())
    assert [result.stdout for result in results] == [f"{i * 2}\n" for i in range(64)]


@pytest.mark.parametrize("sandbox", JAILED, indirect=True)
def test_killing_every_process_it_can_is_just_a_result(sandbox: Sandbox) -> None:
    result = sandbox.run("import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('after')")
    assert result.exit_code is None or result.stdout == "after\n"
    assert sandbox.run("print('next')").stdout == "next\n"


@pytest.mark.parametrize("sandbox", BACKENDS, indirect=True)
def test_the_code_runs_unprivileged(sandbox: Sandbox) -> None:
    code = ("import os\nstatus = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
            "print(os.getuid(), os.geteuid(), int(status['CapEff'], 16))")
    uid, euid, capabilities = sandbox.run(code).stdout.split()
    assert uid != "0" and euid != "0" and capabilities == "0"
