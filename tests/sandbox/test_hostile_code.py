"""Hostile input (issue 38): text no UTF-8 encoder takes, and runs that write outside their
work dir (/tmp, /var/tmp, /dev/shm) to leave something for the next run or fill the host's RAM.

Every backend: "docker", "bubblewrap", "subprocess" (the local sandbox without bubblewrap,
held to these properties when it can make a mount namespace here, which its
``private_mounts`` says) and "remote" (a sandbox service over the local sandbox).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator

import pytest
from sandbox_helpers import BACKENDS, LIMITS

from agentgym.sandbox import ExecResult, LocalSandbox, RemoteSandbox, Sandbox, local
from agentgym.sandbox.protocol import FrameReader, build_request, encode, to_result
from agentgym.sandbox.service import ServiceThread

pytestmark = pytest.mark.timeout(180)

WITH_REMOTE = [*BACKENDS, "remote"]


@pytest.fixture(scope="module")
def remote_sandbox() -> Iterator[RemoteSandbox]:
    with LocalSandbox(LIMITS) as backend, ServiceThread(backend) as service, \
            RemoteSandbox(service.url, LIMITS) as sandbox:
        yield sandbox


@pytest.fixture
def any_sandbox(request: pytest.FixtureRequest) -> Sandbox:
    if request.param == "remote":
        return request.getfixturevalue("remote_sandbox")
    name = {"docker": "docker_sandbox", "bubblewrap": "bwrap_sandbox",
            "subprocess": "subprocess_sandbox"}[request.param]
    return request.getfixturevalue(name)


def _valid_utf8(result: ExecResult) -> bool:
    """Whether the result's text can be written as UTF-8 (no lone surrogates)."""
    try:
        result.stdout.encode("utf-8")
        result.stderr.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# -- text --------------------------------------------------------------------------------------


@pytest.mark.parametrize("any_sandbox", WITH_REMOTE, indirect=True)
@pytest.mark.parametrize(("code", "stdin", "files", "stdout"), [
    # a lone surrogate in a comment is U+FFFD in a comment: the code runs
    ("print(1) # \ud800", "", None, "1\n"),
    ("print(ascii('\udfff'))", "", None, "'\\ufffd'\n"),
    ("print(input())", "a\udfffb", None, "a\ufffdb\n"),
    ("print(open('n\ufffd.txt').read())", "", {"n\ud800.txt": "x\ud800"}, "x\ufffd\n"),
    # a surrogate pair is the character it encodes
    ("print(ascii('\ud83d\ude00'))", "", None, "'\\U0001f600'\n"),
    # control characters are valid text and pass as they are
    ("print(ascii('\x1b[31m\x07\x7f\x0b'))", "", None, "'\\x1b[31m\\x07\\x7f\\x0b'\n"),
    ("import sys\nprint(sys.stdin.buffer.read())", "\x00\x1b\r", None, "b'\\x00\\x1b\\r'\n"),
    # bytes that are not UTF-8 in the output are U+FFFD
    ("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe ok\\n')", "", None, "\ufffd\ufffd ok\n"),
])
def test_text_no_utf8_encoder_takes_runs_and_comes_back_valid(
        any_sandbox: Sandbox, code: str, stdin: str, files: dict | None, stdout: str) -> None:
    result = any_sandbox.run(code, stdin=stdin, files=files)
    assert result.stdout == stdout, result
    assert result.ok and _valid_utf8(result)


@pytest.mark.parametrize("any_sandbox", WITH_REMOTE, indirect=True)
def test_a_nul_in_the_code_is_the_codes_error_not_the_sandboxs(any_sandbox: Sandbox) -> None:
    result = any_sandbox.run("print(1)\x00\ud800")
    assert result.exit_code == 1 and "null bytes" in result.stderr, result
    assert _valid_utf8(result)
    bash = any_sandbox.run("echo '\ud800' | od -An -c | tr -s ' '", language="bash")
    assert bash.ok and bash.stdout.split() == ["357", "277", "275", "\\n"], bash  # U+FFFD


# -- leaks between runs and to the host ------------------------------------------------------


def _require_private(sandbox: Sandbox) -> None:
    if isinstance(sandbox, LocalSandbox) and sandbox.name == "subprocess" \
            and not sandbox.private_mounts:
        pytest.skip("no mount namespace here: this subprocess sandbox shares /tmp and /dev/shm "
                    "(its isolation says so)")


@pytest.mark.parametrize("sandbox", BACKENDS, indirect=True)
def test_a_file_left_in_tmp_is_invisible_to_the_next_run_and_to_the_host(sandbox: Sandbox) -> None:
    _require_private(sandbox)
    marker = f"agentgym-test-{uuid.uuid4().hex}"
    paths = [f"/tmp/{marker}", f"/var/tmp/{marker}", f"/dev/shm/{marker}"]
    first = sandbox.run(f"for path in {paths!r}:\n    try:\n        open(path, 'w').write('s')\n"
                        "    except OSError:\n        pass\nprint('done')")
    assert first.stdout == "done\n", first
    second = sandbox.run(f"import os\nprint([p for p in {paths!r} if os.path.exists(p)])")
    assert second.stdout == "[]\n", second
    assert [path for path in paths if glob.glob(path)] == []


@pytest.mark.parametrize("sandbox", BACKENDS, indirect=True)
def test_dev_shm_cannot_hold_more_than_the_memory_limit(sandbox: Sandbox) -> None:
    _require_private(sandbox)
    marker = f"agentgym-test-{uuid.uuid4().hex}"
    # Files of 32 MiB each (under the file size limit), up to 1.25 times the memory limit.
    code = (f"written = 0\ntry:\n    for i in range({LIMITS.memory_mb * 5 // 4 // 32}):\n"
            f"        with open(f'/dev/shm/{marker}-{{i}}', 'wb') as f:\n"
            "            for _ in range(32):\n                f.write(b'x' * 2**20)\n"
            "                written += 1\nexcept (OSError, MemoryError) as exc:\n"
            "    print('stopped', type(exc).__name__)\nprint(written)")
    result = sandbox.run(code)
    assert result.stdout.startswith("stopped"), result
    assert int(result.stdout.split()[-1]) < LIMITS.memory_mb
    assert glob.glob(f"/dev/shm/{marker}*") == []


def test_without_a_mount_namespace_it_says_tmp_is_the_hosts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "_private_mounts_work", lambda python, user: False)
    sandbox = LocalSandbox(LIMITS, use_bwrap=False)
    assert not sandbox.private_mounts
    assert "/tmp and /dev/shm are the host's" in sandbox.isolation
    # Its temp dir is still the run's own dir, removed after it.
    result = sandbox.run("import os, tempfile\nprint(tempfile.gettempdir() == os.getcwd() "
                         "== os.environ['HOME'])")
    assert result.stdout == "True\n", result


def test_with_a_mount_namespace_tmp_is_the_runs_own_dir(subprocess_sandbox: LocalSandbox) -> None:
    _require_private(subprocess_sandbox)
    result = subprocess_sandbox.run("import os, tempfile\nprint(os.getcwd(), tempfile.gettempdir(),"
                                    " os.listdir('/tmp'), os.listdir('/dev/shm'))")
    assert result.stdout == "/tmp /tmp ['main.py'] []\n", result
    assert "private /tmp and /dev/shm" in subprocess_sandbox.isolation


def test_as_a_user_the_runner_makes_its_mounts_in_a_user_namespace_and_keeps_no_capability(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The path a non-root host takes without bubblewrap, driven here as ``nobody`` from root."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start the runner as another user")
    host_dir = tempfile.mkdtemp(prefix="agentgym-sandbox-", dir="/tmp")
    os.chown(host_dir, 65534, 65534)
    try:
        command, _ = local._command(local._default_python(), host_dir, None, True, None, 4)
        code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                "open('/tmp/left', 'w').write('s')\n"
                "status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
                "print(os.getuid(), int(status['CapEff'], 16), libc.umount2(b'/tmp', 2),"
                " sorted(os.listdir('/tmp')), os.listdir('/dev/shm'))")
        request = build_request(code, language="python", stdin="", files=None, timeout=20,
                                limits=LIMITS)
        finished = subprocess.run(command, input=encode(request), capture_output=True, timeout=60,
                                  cwd=host_dir, env={"PATH": "/usr/bin:/bin"}, user=65534,
                                  group=65534, extra_groups=[], check=False)
        messages = FrameReader().feed(finished.stdout)
        if messages and "error" in messages[0]:
            pytest.skip(f"no user namespaces here: {messages[0]['error']}")
        result = to_result(messages[1])
    finally:
        shutil.rmtree(host_dir)
    # nobody, no capability, /tmp cannot be unmounted (-1) to reach the host's
    assert result.stdout == "65534 0 -1 ['left', 'main.py'] []\n", result



def test_bubblewraps_dev_is_read_only(bwrap_sandbox: LocalSandbox) -> None:
    # bwrap's /dev is a tmpfs in RAM that no limit counts: nothing may be written there.
    result = bwrap_sandbox.run("try:\n    open('/dev/agentgym', 'w').write('x' * 2**20)\n"
                               "except OSError as exc:\n    print(exc.strerror)\n"
                               "open('/dev/null', 'w').write('devices still work')\nprint('ok')")
    assert result.stdout == "Read-only file system\nok\n", result
