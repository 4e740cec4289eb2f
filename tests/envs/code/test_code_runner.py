"""evaluate(): one sandbox run per submission, judged outside the sandbox; code never raises."""

from __future__ import annotations

import pytest

from agentgym.envs.code import Problem, TestCase, builtin_problems, evaluate
from agentgym.envs.code.runner import values_match
from agentgym.sandbox import Sandbox
from code_solutions import SOLUTIONS

TWO_SUM = next(problem for problem in builtin_problems() if problem.id == "two_sum")
RIGHT = SOLUTIONS["two_sum"]


def function_problem(tests: list[tuple[list, object]], name: str = "f", visible: int = 1) -> Problem:
    cases = tuple(TestCase("call", args, expected) for args, expected in tests)
    return Problem("p", "Do it.", visible=cases[:visible], hidden=cases[visible:], entry_point=name)


def program_problem(tests: list[tuple[str, str]], visible: int = 1) -> Problem:
    cases = tuple(TestCase("stdio", stdin, stdout) for stdin, stdout in tests)
    return Problem("p", "Do it.", visible=cases[:visible], hidden=cases[visible:])


# -- judging ---------------------------------------------------------------------------


def test_right_code_passes_every_test(sandbox: Sandbox) -> None:
    evaluation = evaluate(sandbox, TWO_SUM, RIGHT)
    assert [o.status for o in evaluation.visible + evaluation.hidden] == ["passed"] * 7
    assert evaluation.score == 1.0 and evaluation.passed == 5
    assert evaluation.visible[0].got == "[0, 1]"


def test_partly_right_code_scores_the_fraction_of_hidden_tests(sandbox: Sandbox) -> None:
    problem = function_problem([([1], 2), ([2], 4), ([3], 6), ([4], 8), ([5], 99)])
    evaluation = evaluate(sandbox, problem, "def f(x):\n    return 2 * x if x < 3 else 0")
    assert [o.status for o in evaluation.hidden] == ["passed", "failed", "failed", "failed"]
    assert evaluation.score == 0.25
    assert evaluation.hidden[1].got == "0"


def test_tuples_match_lists_and_floats_match_closely(sandbox: Sandbox) -> None:
    problem = function_problem([([], [0.3, [1, 2]]), ([], {"a": [0.1]})])
    evaluation = evaluate(sandbox, problem, "def f():\n    return (0.1 + 0.2, (1, 2))")
    assert evaluation.visible[0].passed
    assert not evaluation.hidden[0].passed


@pytest.mark.parametrize(
    ("got", "expected", "match"),
    [
        ((1, 2), [1, 2], True), ([1, (2, 3)], [1, [2, 3]], True), (0.1 + 0.2, 0.3, True),
        ({"a": 1.0000000001}, {"a": 1}, True), (1, 1.0, True), ({1, 2}, {2, 1}, True),
        (1.1, 1, False), ([1], [1, 2], False), ({"a": 1}, {"b": 1}, False), ("1", 1, False),
        (None, 0, False), (float("nan"), float("nan"), False), ([1, 2], {1, 2}, False),
        (10**400, 1.0, False), (True, 1, False), (1, True, False), ([True], [1], False),
        (False, False, True), ({"a": [True]}, {"a": (True,)}, True),
    ],
)
def test_values_match(got: object, expected: object, match: bool) -> None:
    assert values_match(got, expected) is match


def test_outputs_longer_than_the_report_are_compared_by_hash(sandbox: Sandbox) -> None:
    big = list(range(30_000))
    problem = function_problem([([0], big), ([1], big[:-1] + [-1]), ([2], {str(i): i for i in big})])
    code = ("def f(which):\n    if which == 2:\n        return {str(i): i for i in reversed(range(30000))}\n"
            "    return list(range(30000))")
    evaluation = evaluate(sandbox, problem, code)
    assert [o.status for o in evaluation.visible + evaluation.hidden] == ["passed", "failed", "passed"]
    lines = "\n".join(map(str, range(30_000)))
    program = program_problem([("", lines + "\n"), ("", lines.replace("29999", "0"))])
    evaluation = evaluate(sandbox, program, "print(*range(30000), sep='\\n')")
    assert [o.status for o in evaluation.visible + evaluation.hidden] == ["passed", "failed"]


def test_programs_read_stdin_every_usual_way_and_spacing_is_ignored(sandbox: Sandbox) -> None:
    problem = program_problem([("1 2\n", "3\n"), ("5 6", "11"), ("10\n20\n", "30")], visible=1)
    for code in ["a, b = map(int, input().split())\nprint(a + b)",
                 "import sys\nprint(sum(map(int, sys.stdin.read().split())))",
                 "print(sum(map(int, open(0).read().split())))",
                 "import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())), end='  \\n\\n')"]:
        evaluation = evaluate(sandbox, problem, code)
        assert evaluation.visible[0].passed, code
    evaluation = evaluate(sandbox, problem, "import sys\nprint(sum(map(int, sys.stdin.read().split())))")
    assert evaluation.score == 1.0


def test_a_program_may_exit_normally_but_not_with_an_error(sandbox: Sandbox) -> None:
    problem = program_problem([("", "ok"), ("", "ok")])
    assert evaluate(sandbox, problem, "import sys\nprint('ok')\nsys.exit(0)").score == 1.0
    failed = evaluate(sandbox, problem, "import sys\nprint('ok')\nsys.exit(2)")
    assert failed.score == 0.0 and "exit(2)" in failed.visible[0].error


def test_each_test_starts_from_fresh_globals(sandbox: Sandbox) -> None:
    problem = function_problem([([], 1), ([], 1), ([], 1)])
    code = "calls = []\ndef f():\n    calls.append(1)\n    return len(calls)"
    assert evaluate(sandbox, problem, code).score == 1.0


# -- bad code is a result, never an exception -------------------------------------------


def test_a_syntax_error_is_reported_without_running_anything(sandbox: Sandbox) -> None:
    evaluation = evaluate(sandbox, TWO_SUM, "def two_sum(nums, target)\n    return []")
    assert "SyntaxError" in evaluation.compile_error and "line 1" in evaluation.compile_error
    assert evaluation.duration == 0.0 and evaluation.score == 0.0
    assert {o.status for o in evaluation.visible + evaluation.hidden} == {"not_run"}


def test_a_crash_shows_the_submissions_traceback_only(sandbox: Sandbox) -> None:
    evaluation = evaluate(sandbox, TWO_SUM, "def two_sum(nums, target):\n    return nums[100]")
    error = evaluation.visible[0].error
    assert evaluation.visible[0].status == "error"
    assert 'File "solution.py", line 2, in two_sum' in error and "IndexError" in error
    assert "harness" not in error and "runpy" not in error


def test_a_missing_function_is_named(sandbox: Sandbox) -> None:
    evaluation = evaluate(sandbox, TWO_SUM, "def twosum(nums, target):\n    return [0, 1]")
    assert "does not define a function named 'two_sum'" in evaluation.visible[0].error


def test_an_infinite_loop_times_out_that_test_only(sandbox: Sandbox) -> None:
    problem = function_problem([([1], 1), ([0], 0), ([2], 2)], visible=2)
    code = "def f(x):\n    while x == 0:\n        pass\n    return x"
    evaluation = evaluate(sandbox, problem, code, test_timeout=0.5)
    assert [o.status for o in evaluation.visible + evaluation.hidden] == ["passed", "timeout", "passed"]
    assert "Timed out after 0.5 s" in evaluation.visible[1].error


def test_tests_left_when_the_budget_is_spent_are_not_run(sandbox: Sandbox) -> None:
    problem = function_problem([([i], i) for i in range(6)])
    evaluation = evaluate(sandbox, problem, "def f(x):\n    while True:\n        pass",
                          test_timeout=0.4, time_budget=1.0)
    statuses = [o.status for o in evaluation.visible + evaluation.hidden]
    assert statuses[:2] == ["timeout", "timeout"] and statuses[-1] == "not_run"
    assert evaluation.score == 0.0


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("import sys\ndef two_sum(n, t):\n    sys.exit(3)", "exit(3)"),
        ("import os\ndef two_sum(n, t):\n    os._exit(0)", "ended without a result"),
        ("def two_sum(n, t):\n    while True:\n        print('x' * 10000)", "printed more than"),
        ("def two_sum(n, t):\n    return two_sum(n, t)", "RecursionError"),
        ("x = input()\ndef two_sum(n, t):\n    return [0, 1]", "EOFError"),
        ("raise KeyboardInterrupt\ndef two_sum(n, t):\n    return [0, 1]", "KeyboardInterrupt"),
        (("class Bad:\n    def __repr__(self):\n        raise ValueError('no repr')\n"
          "def two_sum(n, t):\n    return Bad()"), "no repr"),
    ],
)
def test_misbehaving_code_ends_its_tests_with_an_error(sandbox: Sandbox, code: str, message: str) -> None:
    evaluation = evaluate(sandbox, TWO_SUM, code, test_timeout=1.0)
    assert evaluation.run_error is None
    assert evaluation.visible[0].status == "error" and message in evaluation.visible[0].error
    assert evaluation.score == 0.0


def test_code_that_kills_the_harness_gets_a_run_error(sandbox: Sandbox) -> None:
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef two_sum(n, t):\n    return [0, 1]"
    evaluation = evaluate(sandbox, TWO_SUM, code)
    # A SIGKILLed harness looks like an out-of-memory kill to the sandbox; either way, no report.
    assert "without a report" in evaluation.run_error or "memory" in evaluation.run_error
    assert evaluation.score == 0.0


def test_children_the_code_leaves_behind_do_not_hold_the_test(sandbox: Sandbox) -> None:
    code = ("import os, time\ndef two_sum(n, t):\n    if os.fork() == 0:\n        time.sleep(60)\n"
            "    return [0, 1]")
    evaluation = evaluate(sandbox, TWO_SUM, code, test_timeout=5.0)
    assert evaluation.visible[0].status == "passed"


FORGER = """
import gc, json, os, signal

def forge():
    payload = next((o for o in gc.get_objects()
                    if isinstance(o, dict) and "nonce" in o and "tests" in o), None)
    if payload is None:
        return
    fake = {"status": "ok", "value": {"repr": "'forged'", "length": 8, "sha256": "0" * 64}}
    report = {"compile_error": None, "results": [fake] * len(payload["tests"])}
    line = "\\n@@agentgym-harness-report@@" + payload["nonce"] + " " + json.dumps(report) + "\\n"
    try:
        with open(f"/proc/{os.getppid()}/fd/1", "w") as out:
            out.write(line)
        os.kill(os.getppid(), signal.SIGKILL)  # so the forged report is the last one
    except OSError:
        pass

def f(x):
    forge()
    return "forged"
"""


def test_a_forged_report_cannot_pass_tests_it_does_not_solve(sandbox: Sandbox) -> None:
    problem = function_problem([([i], i * 7) for i in range(6)])
    evaluation = evaluate(sandbox, problem, FORGER)
    assert evaluation.score == 0.0


PROBE = """
import gc

def f(x):
    prefix = "".join(["SEC", "RET-"])  # built at run time: the code's own constants do not match
    found = set()
    for o in gc.get_objects():
        items = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else ()
        found.update(i for i in items if isinstance(i, str) and i.startswith(prefix))
    return sorted(found)
"""


def test_hidden_expected_values_never_enter_the_sandbox(sandbox: Sandbox) -> None:
    problem = function_problem([(["shown"], "shown"), (["SECRET-input"], "SECRET-answer")])
    evaluation = evaluate(sandbox, problem, PROBE)
    # The probe finds what the harness holds: the hidden test's input, not its answer.
    assert evaluation.hidden[0].got == "['SECRET-input']"
    assert evaluation.hidden[0].status == "failed"


def test_many_tests_with_long_errors_fit_the_report(sandbox: Sandbox) -> None:
    problem = function_problem([([i], i) for i in range(150)], visible=50)
    code = "def f(x):\n    if x % 2:\n        raise ValueError('e' * 5000)\n    return x"
    evaluation = evaluate(sandbox, problem, code)
    assert evaluation.run_error is None
    statuses = [o.status for o in evaluation.visible + evaluation.hidden]
    assert statuses == ["passed", "error"] * 75
    assert evaluation.score == 0.5
