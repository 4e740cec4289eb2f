from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from sandbox_helpers import require_docker

from agentgym.errors import ConfigError
from agentgym.sandbox import DockerSandbox, ExecResult, Limits, LocalSandbox, Sandbox
from agentgym.sandbox.shared import close_all
from agentgym.tools import PythonTool, ToolWrapper
from agentgym.tools.python import close_shared_sandbox, format_result, shared_sandbox
from fakes import EchoEnv


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """Each backend in turn: the python tool must read the same on both."""
    limits = Limits(timeout=20, memory_mb=256)
    if request.param == "local":
        box: Sandbox = LocalSandbox(limits)
    else:
        require_docker()
        box = DockerSandbox(limits, pool_size=2)
    with box:
        yield box


@pytest.mark.parametrize(("result", "expected"), [
    (ExecResult("42\n", "", 0), "42"),
    (ExecResult("a\n", "Traceback ...\nZeroDivisionError: division by zero\n", 1),
     "a\n[stderr]\nTraceback ...\nZeroDivisionError: division by zero\n[exit status 1]"),
    (ExecResult("", "", None, timed_out=True), "[timed out after 5s]"),
    (ExecResult("", "MemoryError\n", None, oom=True),
     "[stderr]\nMemoryError\n[out of memory: the program went over its memory limit]"),
    (ExecResult("", "", None), "[killed before it exited]"),
    (ExecResult("xxx\n[cut]", "", 0, truncated=True), "xxx\n[cut]\n[output truncated: print less]"),
    (ExecResult("", "", 0), "[no output: print() the values you want to see]"),
])
def test_format_result_says_how_the_run_ended(result: ExecResult, expected: str) -> None:
    assert format_result(result, timeout=5) == expected


def test_runs_code_and_returns_its_output(sandbox: Sandbox) -> None:
    tool = PythonTool(sandbox)
    assert tool.call(code="print(sum(range(10)))") == "45"
    assert tool.call(code="```python\nimport math\nprint(math.factorial(5))\n```") == "120"
    assert asyncio.run(tool.acall(code="print('async')")) == "async"


def test_an_error_in_the_code_is_output_not_an_exception(sandbox: Sandbox) -> None:
    output = PythonTool(sandbox).call(code="x = 1\nprint(x)\n1 / 0")
    assert output.startswith("1\n[stderr]\nTraceback (most recent call last):")
    assert output.endswith("ZeroDivisionError: division by zero\n[exit status 1]")


def test_a_loop_times_out_after_the_tools_timeout(sandbox: Sandbox) -> None:
    assert PythonTool(sandbox, timeout=1).call(code="while True: pass") == "[timed out after 1s]"


def test_memory_and_output_bombs_end_as_text(sandbox: Sandbox) -> None:
    tool = PythonTool(sandbox)
    assert "[out of memory" in tool.call(code="x = bytearray(2 * 1024**3)")
    assert tool.call(code="print('x' * 10_000_000)").endswith("[output truncated: print less]")


def test_calls_do_not_share_state(sandbox: Sandbox) -> None:
    tool = PythonTool(sandbox)
    tool.call(code="open('note.txt', 'w').write('hi')\nsecret = 1")
    assert "FileNotFoundError" in tool.call(code="print(open('note.txt').read())")
    assert "NameError" in tool.call(code="print(secret)")


def test_bad_arguments_and_settings() -> None:
    output = PythonTool(LocalSandbox()).call(source="print(1)")
    assert output == "Error: python got an unknown argument 'source'; its arguments are: 'code'."
    with pytest.raises(ConfigError, match="timeout must be at least 0.001"):
        PythonTool(timeout=0)


def test_the_wrapper_runs_python_in_the_sandbox(sandbox: Sandbox) -> None:
    env = ToolWrapper(EchoEnv(), [PythonTool(sandbox)])
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step("<python>print(2 ** 10)</python>")
    assert observation == '<tool_response name="python">\n1024\n</tool_response>'
    assert (reward, terminated, info["tool_calls"]) == (0.0, False, 1)
    env.close()
    assert sandbox.run("print(1)").stdout == "1\n"  # the wrapper does not close a sandbox it was given


@pytest.fixture
def nothing_shared() -> Iterator[None]:
    """No shared sandbox open: code envs of earlier tests may have left borrows of "auto"."""
    close_all()
    yield
    close_all()


@pytest.mark.usefixtures("nothing_shared")
def test_without_a_sandbox_the_tools_share_one() -> None:
    try:
        first = shared_sandbox()
        assert isinstance(first, Sandbox) and shared_sandbox() is first
        assert PythonTool().call(code="print('shared')") == "shared"
        close_shared_sandbox()
        assert shared_sandbox() is not first
    finally:
        close_shared_sandbox()


@pytest.mark.usefixtures("nothing_shared")
def test_the_tools_and_code_envs_share_one_sandbox() -> None:
    from agentgym.envs.code import CodeEnv

    env = CodeEnv(backend="auto")
    try:
        assert env.sandbox is shared_sandbox()
        close_shared_sandbox()
        assert env.sandbox.run("print(1)").stdout == "1\n"  # still open: the env borrows it
    finally:
        env.close()
        close_shared_sandbox()


def test_a_lone_surrogate_in_the_code_is_run_not_raised(sandbox: Sandbox) -> None:
    # Issue 38: the runner encoded strictly, and a surrogate from the model raised out of step().
    tool = PythonTool(sandbox)
    assert tool.call(code="print(1) # \ud800") == "1"
    assert tool.call(code="print(ascii('\udfff'))") == "'\\ufffd'"


def test_math_tool_env_with_the_local_sandbox_answers_a_surrogate_with_a_result() -> None:
    from agentgym.envs.math.tool import make_math_tool_env

    with LocalSandbox(Limits(timeout=20, memory_mb=256)) as sandbox:
        env = make_math_tool_env(sandbox=sandbox)
        env.reset(seed=0)
        observation, _, terminated, _, info = env.step("<python>print(1) # \ud800</python>")
        env.close()
    assert observation == '<tool_response name="python">\n1\n</tool_response>'
    assert not terminated and info["tool_calls"] == 1
