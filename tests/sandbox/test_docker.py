"""DockerSandbox itself: clear errors, the pool's reuse and replacement, cleanup on close and on a crash."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
import time

import pytest
from sandbox_helpers import LIMITS

from agentgym.errors import ConfigError, SandboxError, SandboxUnavailable
from agentgym.sandbox import DockerSandbox
from agentgym.sandbox.container import LABEL_ID
from agentgym.sandbox.docker import connect

pytestmark = pytest.mark.timeout(180)

# Which container a run is in: the start time of its PID 1 (the runner), in clock ticks.
_CONTAINER_ID = "print(open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19])"


def _containers_of(sandbox_id: str) -> list[dict]:
    with contextlib.closing(connect()) as api:
        return api.containers(all=True, filters={"label": f"{LABEL_ID}={sandbox_id}"})


def test_no_engine_is_unavailable_with_the_fix() -> None:
    with pytest.raises(SandboxUnavailable, match=r"No Docker engine answers at "
                       r"unix:///nonexistent/docker.sock: .*Start one .*open_sandbox\('local'\)"):
        DockerSandbox(docker_host="unix:///nonexistent/docker.sock")


@pytest.mark.docker
def test_a_missing_image_names_the_build_command(docker_sandbox: DockerSandbox) -> None:
    with pytest.raises(SandboxUnavailable, match=r"The Docker image 'agentgym-sandbox:no-such-tag' "
                       r"is not there: build it with `agentgym sandbox build`"):
        DockerSandbox(image="agentgym-sandbox:no-such-tag")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"pool_size": 5, "max_containers": 2}, r"pool_size <= max_containers .* got pool_size=5"),
    ({"max_containers": 0, "pool_size": 0}, r"max_containers >= 1"),
    ({"work_mb": 0}, r"work_mb must be at least 1, got 0"),
])
def test_pool_settings_are_checked(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DockerSandbox(**kwargs)


@pytest.mark.docker
def test_a_container_is_reused_after_a_clean_run_and_replaced_after_a_timeout(
        docker_sandbox: DockerSandbox) -> None:
    with DockerSandbox(LIMITS, pool_size=1, max_containers=1) as sandbox:
        first = sandbox.run(_CONTAINER_ID).stdout
        assert sandbox.run(_CONTAINER_ID).stdout == first
        assert sandbox.run("while True: pass", timeout=0.5).timed_out
        assert sandbox.run(_CONTAINER_ID).stdout != first


@pytest.mark.docker
def test_close_removes_every_container(docker_sandbox: DockerSandbox) -> None:
    sandbox = DockerSandbox(LIMITS, pool_size=2, max_containers=4)
    assert sandbox.run("print(1)").stdout == "1\n"
    assert _containers_of(sandbox.id)
    sandbox.close()
    sandbox.close()  # twice is fine
    assert _containers_of(sandbox.id) == []
    with pytest.raises(SandboxError, match="This sandbox is closed; open a new one"):
        sandbox.run("print(1)")


_LEFT_OPEN = textwrap.dedent("""
    from agentgym.sandbox import DockerSandbox, Limits
    sandbox = DockerSandbox(Limits(memory_mb=64), pool_size=3)
    sandbox.run("print(1)")
    print(sandbox.id, flush=True)
""")


@pytest.mark.docker
def test_containers_are_removed_at_interpreter_exit(docker_sandbox: DockerSandbox) -> None:
    exited = subprocess.run([sys.executable, "-c", _LEFT_OPEN], capture_output=True, text=True,
                            timeout=120, check=False)
    assert exited.returncode == 0 and exited.stderr == "", exited.stderr
    assert _containers_of(exited.stdout.strip()) == []


_CRASH = textwrap.dedent("""
    import os, signal
    from agentgym.sandbox import DockerSandbox, Limits
    sandbox = DockerSandbox(Limits(memory_mb=64), pool_size=2)
    sandbox.run("print(1)")
    print(sandbox.id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.mark.docker
def test_containers_go_away_when_their_owner_is_killed(docker_sandbox: DockerSandbox) -> None:
    crashed = subprocess.run([sys.executable, "-c", _CRASH], capture_output=True, text=True,
                             timeout=120, check=False)
    assert crashed.returncode == -9, crashed.stderr
    sandbox_id = crashed.stdout.strip()
    deadline = time.monotonic() + 60
    while (any(info["State"] == "running" for info in _containers_of(sandbox_id))
           and time.monotonic() < deadline):
        time.sleep(0.2)
    # Running ones ended by themselves; one the crash caught before its start is swept by
    # the next sandbox made on this host.
    assert not any(info["State"] == "running" for info in _containers_of(sandbox_id))
    DockerSandbox(LIMITS, pool_size=0).close()
    assert _containers_of(sandbox_id) == []


@pytest.mark.docker
def test_arun_leaves_the_event_loop_free(docker_sandbox: DockerSandbox) -> None:
    async def main() -> list[str]:
        events: list[str] = []

        async def ticker() -> None:
            for _ in range(5):
                await asyncio.sleep(0.01)
            events.append("ticks done")

        async def slow() -> None:
            result = await docker_sandbox.arun("import time\ntime.sleep(1.5)\nprint('slept')")
            events.append(result.stdout.strip())

        await asyncio.gather(slow(), ticker())
        return events

    assert asyncio.run(main()) == ["ticks done", "slept"]


@pytest.mark.docker
def test_the_container_is_locked_down(docker_sandbox: DockerSandbox) -> None:
    code = ("import os\nmounts = open('/proc/mounts').read().splitlines()\n"
            "root = [m for m in mounts if m.split()[1] == '/'][0].split()[3].split(',')\n"
            "work = [m for m in mounts if m.split()[1] == '/work'][0].split()[3].split(',')\n"
            "nnp = [l for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0]\n"
            "print('ro' in root, 'noexec' in work, nnp.split()[1], os.getuid())")
    assert docker_sandbox.run(code).stdout == "True True 1 61000\n"
