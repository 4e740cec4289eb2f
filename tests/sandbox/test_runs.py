"""Ordinary runs, the same on every backend: output, exit codes, stdin, files, bash, timeouts."""

from __future__ import annotations

import asyncio

import pytest
from sandbox_helpers import BACKENDS

from agentgym.errors import ConfigError
from agentgym.sandbox import ExecResult, Sandbox

pytestmark = [pytest.mark.timeout(120), pytest.mark.parametrize("sandbox", BACKENDS, indirect=True)]


def test_stdout_stderr_and_exit_code(sandbox: Sandbox) -> None:
    result = sandbox.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)")
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
    assert not result.ok and not result.timed_out and not result.oom and not result.truncated


def test_a_clean_run_is_ok(sandbox: Sandbox) -> None:
    result = sandbox.run("print(sum(range(1000)))")
    assert result == ExecResult("499500\n", "", 0, duration=result.duration)
    assert result.ok and result.duration > 0


def test_an_exception_prints_a_traceback_of_the_code_only(sandbox: Sandbox) -> None:
    result = sandbox.run("def f():\n    return 1 / 0\nf()\n")
    assert result.exit_code == 1
    assert result.stderr.startswith("Traceback (most recent call last):\n  File ")
    assert "main.py\", line 3, in <module>" in result.stderr
    assert result.stderr.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "runner" not in result.stderr and "<string>" not in result.stderr


def test_a_syntax_error_is_reported_like_python(sandbox: Sandbox) -> None:
    result = sandbox.run("print(")
    assert result.exit_code == 1 and "SyntaxError" in result.stderr and "Traceback" not in result.stderr


def test_sys_exit_with_a_message(sandbox: Sandbox) -> None:
    result = sandbox.run("import sys\nsys.exit('bad input')")
    assert (result.exit_code, result.stderr) == (1, "bad input\n")


def test_stdin_reaches_the_code(sandbox: Sandbox) -> None:
    result = sandbox.run("a, b = map(int, input().split())\nprint(a + b)", stdin="2 40\n")
    assert result.stdout == "42\n"


def test_files_are_written_before_the_run(sandbox: Sandbox) -> None:
    files = {"data/in.txt": "hello", "blob.bin": b"\x00\xff", "helper.py": "VALUE = 7\n"}
    code = ("import helper\nprint(open('data/in.txt').read(), open('blob.bin', 'rb').read(),"
            " helper.VALUE, __name__)")
    result = sandbox.run(code, files=files)
    assert result.stdout == "hello b'\\x00\\xff' 7 __main__\n", result


def test_unicode_survives_both_ways(sandbox: Sandbox) -> None:
    result = sandbox.run("print(input()[::-1], '✓')", stdin="héllo 世界\n")
    assert result.stdout == "界世 olléh ✓\n"


def test_bash(sandbox: Sandbox) -> None:
    result = sandbox.run("read name\necho \"hi $name\"\ncat f.txt\necho oops >&2\nexit 4",
                         language="bash", stdin="ada\n", files={"f.txt": "from a file\n"})
    assert (result.stdout, result.stderr, result.exit_code) == ("hi ada\nfrom a file\n", "oops\n", 4)


def test_bash_timeout(sandbox: Sandbox) -> None:
    result = sandbox.run("sleep 30", language="bash", timeout=0.5)
    assert result.timed_out and result.exit_code is None


def test_a_timeout_override_applies_to_one_run(sandbox: Sandbox) -> None:
    assert sandbox.run("import time\ntime.sleep(0.3)\nprint('done')", timeout=5).stdout == "done\n"
    assert sandbox.run("import time\ntime.sleep(5)", timeout=0.3).timed_out
    assert sandbox.run("print('default')").stdout == "default\n"


def test_output_before_a_timeout_is_kept(sandbox: Sandbox) -> None:
    result = sandbox.run("import time\nprint('started', flush=True)\ntime.sleep(30)", timeout=0.5)
    assert result.timed_out and result.stdout == "started\n"


def test_arun_gives_the_same_result(sandbox: Sandbox) -> None:
    result = asyncio.run(sandbox.arun("print(input())", stdin="async"))
    assert result.stdout == "async\n"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"language": "ruby"}, r"language must be one of python, bash; got 'ruby'"),
    ({"files": {"../x": "a"}}, r"'../x' is not a relative path inside the work dir"),
    ({"files": {"/etc/x": "a"}}, r"'/etc/x' is not a relative path"),
    ({"files": {"main.py": "a"}}, r"'main.py' would overwrite the code itself"),
    ({"files": {"x": 3}}, r"files\['x'\] must be str or bytes, got int"),
    ({"timeout": 0}, r"timeout must be a positive number of seconds, got 0"),
    ({"stdin": None}, r"stdin must be a str, got NoneType"),
])
def test_wrong_arguments_are_config_errors(sandbox: Sandbox, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        sandbox.run("print(1)", **kwargs)
