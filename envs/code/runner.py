"""Run a submission against a problem's tests in a sandbox, and judge the results.

:func:`evaluate` makes one sandbox run per submission: the harness
(:mod:`agentgym.envs.code.harness`) runs every test, visible and hidden, each
in a forked child with its own timeout, and prints a report on a line that
starts with a marker and a random nonce. The expected values stay here: the
report says what the code returned or printed, and :func:`evaluate` compares.

What this protects, and what it does not:

- The agent never sees a hidden test (they are not in any observation), and
  the sandbox never sees a hidden *expected value* of a ``call``, ``expr`` or
  ``stdio`` test, so code cannot read the answers it should compute.
- The code does see every test's *input* while it runs (they are in the
  harness's memory), and the ``assert`` kind carries its expected value into
  the sandbox. Code that digs through the harness's memory could also write a
  forged report; that gains nothing for the first three kinds (the comparison
  happens here) but could fake a passing ``assert`` test. Full secrecy would
  need one sandbox run per test.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import secrets
import traceback
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

from agentgym.envs.code.harness import FILENAME, MARKER, canonical, normalize_output
from agentgym.envs.code.problems import Problem, TestCase
from agentgym.sandbox import ExecResult, Sandbox

__all__ = ["STARTUP_MARGIN", "Evaluation", "Status", "TestOutcome", "evaluate", "values_match"]

Status = Literal["passed", "failed", "error", "timeout", "not_run"]
#: Seconds the sandbox gets on top of the tests' budget: interpreter start, forks, the report.
STARTUP_MARGIN = 10.0
# Room left in the sandbox's output cap around the report line.
_REPORT_SLACK = 512
_REL_TOL, _ABS_TOL = 1e-6, 1e-9
# Returned values longer than this are compared by hash, not parsed here.
_MAX_LITERAL_CHARS = 50_000


@dataclass(frozen=True)
class TestOutcome:
    """What one test did."""

    __test__ = False  # not a pytest test class, despite the name

    test: TestCase
    hidden: bool
    status: Status
    got: str | None = None
    """What the code returned (its ``repr``) or printed; may be cut short."""
    error: str | None = None
    """The traceback (only the submission's frames) or why the test did not finish."""
    output: str | None = None
    """What the code printed while a function test ran (visible tests only)."""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass(frozen=True)
class Evaluation:
    """The verdict on one submission."""

    visible: tuple[TestOutcome, ...]
    hidden: tuple[TestOutcome, ...]
    compile_error: str | None = None
    """The syntax error, when the code did not compile (no test ran)."""
    run_error: str | None = None
    """Why the harness gave no report (the whole run timed out, ran out of memory...)."""
    duration: float = 0.0
    """Seconds the sandbox run took (0 when the code did not compile)."""

    @property
    def scored(self) -> tuple[TestOutcome, ...]:
        """The outcomes that give the score: the hidden tests, or the visible ones if none is."""
        return self.hidden or self.visible

    @property
    def passed(self) -> int:
        """Scored tests passed."""
        return sum(outcome.passed for outcome in self.scored)

    @property
    def score(self) -> float:
        """Fraction of the scored tests passed, in [0, 1]."""
        return self.passed / len(self.scored) if self.scored else 0.0


@cache
def _harness_source() -> str:
    return resources.files("agentgym.envs.code").joinpath("harness.py").read_text("utf-8")


def evaluate(
    sandbox: Sandbox,
    problem: Problem,
    code: str,
    *,
    test_timeout: float = 2.0,
    time_budget: float = 10.0,
) -> Evaluation:
    """Run ``code`` against every test of ``problem`` in one sandbox run and judge it.

    ``test_timeout`` bounds each test, ``time_budget`` all of them together
    (tests left when it is spent count as failed). Never raises for anything
    the code does; raises :class:`~agentgym.errors.SandboxError` only when the
    sandbox itself fails.
    """
    syntax = _syntax_error(code)
    if syntax is not None:
        return _all_failed(problem, "not_run", compile_error=syntax)
    nonce = secrets.token_hex(16)
    payload = {
        "nonce": nonce, "code": code, "mode": problem.mode, "entry_point": problem.entry_point,
        "setup": problem.setup, "test_timeout": test_timeout, "budget": time_budget,
        "report_limit": max(sandbox.limits.output_bytes - _REPORT_SLACK, 1024),
        "tests": [
            {"kind": test.kind, "input": test.input, "show": index < len(problem.visible)}
            for index, test in enumerate(problem.tests)
        ],
    }
    result = sandbox.run(_harness_source(), language="python", stdin=json.dumps(payload),
                         timeout=time_budget + STARTUP_MARGIN)
    report = _find_report(result.stdout, nonce)
    if report is None:
        return _all_failed(problem, "error", run_error=_why_no_report(result, time_budget),
                           duration=result.duration)
    if report.get("compile_error"):
        return _all_failed(problem, "not_run", compile_error=str(report["compile_error"]),
                           duration=result.duration)
    items = report.get("results")
    if not isinstance(items, list) or len(items) != len(problem.tests):
        return _all_failed(problem, "error", run_error="The test harness sent a malformed report.",
                           duration=result.duration)
    outcomes = [
        _judge(test, item, hidden=index >= len(problem.visible))
        for index, (test, item) in enumerate(zip(problem.tests, items, strict=True))
    ]
    split = len(problem.visible)
    return Evaluation(tuple(outcomes[:split]), tuple(outcomes[split:]), duration=result.duration)


def _syntax_error(code: str) -> str | None:
    # Only the parser runs here (never the compiler or the code): a quick answer
    # for the commonest failure, with no sandbox run.
    try:
        ast.parse(code, filename=FILENAME)
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as exc:
        return "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
    return None


def _all_failed(problem: Problem, status: Status, **fields: Any) -> Evaluation:
    split = len(problem.visible)
    outcomes = [TestOutcome(test, index >= split, status)
                for index, test in enumerate(problem.tests)]
    return Evaluation(tuple(outcomes[:split]), tuple(outcomes[split:]), **fields)


def _find_report(stdout: str, nonce: str) -> dict[str, Any] | None:
    prefix = f"{MARKER}{nonce} "
    for line in reversed(stdout.splitlines()):
        if line.startswith(prefix):
            try:
                report = json.loads(line[len(prefix):])
            except ValueError:
                return None
            return report if isinstance(report, dict) else None
    return None


def _why_no_report(result: ExecResult, budget: float) -> str:
    if result.timed_out:
        return f"The tests did not finish within the time limit ({budget:g} s for all tests)."
    if result.oom:
        return "The run was stopped: the sandbox says it went over the memory limit."
    tail = result.stderr.strip()[-600:]
    return (
        f"The test harness stopped without a report (exit code {result.exit_code})."
        + (f"\n{tail}" if tail else "")
    )


def _judge(test: TestCase, item: Any, *, hidden: bool) -> TestOutcome:
    if not isinstance(item, dict):
        return TestOutcome(test, hidden, "error", error="No result for this test.")
    status = item.get("status")
    error = _text(item.get("error"))
    output = None if hidden else _text(item.get("output"))
    if status == "timeout":
        return TestOutcome(test, hidden, "timeout", error=error, output=output)
    if status == "not_run":
        return TestOutcome(test, hidden, "not_run", error=error)
    if status == "failed":  # an assert test whose assertion failed
        return TestOutcome(test, hidden, "failed", output=output)
    if status != "ok":
        return TestOutcome(test, hidden, "error", error=error or "The test failed.", output=output)
    if test.kind == "assert":
        return TestOutcome(test, hidden, "passed", output=output)
    value = item.get("value")
    if not isinstance(value, dict):
        return TestOutcome(test, hidden, "error", error="The code produced no value.",
                           output=output)
    got = _text(value.get("repr"))
    matched = _stdout_matches(test, value) if test.kind == "stdio" else _value_matches(test, value)
    return TestOutcome(test, hidden, "passed" if matched else "failed", got=got, output=output)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _whole_text(value: dict[str, Any]) -> str | None:
    """The value's text if the report carries all of it, else None (it was cut)."""
    text = value.get("repr")
    return text if isinstance(text, str) and value.get("length") == len(text) else None


def _stdout_matches(test: TestCase, value: dict[str, Any]) -> bool:
    expected = normalize_output(test.expected)
    text = _whole_text(value)
    if text is not None:
        return normalize_output(text) == expected
    return value.get("sha256") == _sha256(expected)


def _value_matches(test: TestCase, value: dict[str, Any]) -> bool:
    accepted = (test.expected, *test.alternatives)
    text = _whole_text(value)
    if text is not None and len(text) <= _MAX_LITERAL_CHARS:
        try:
            got = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False  # not a plain value (an object of its own class, nan...)
        return any(values_match(got, expected) for expected in accepted)
    digest = value.get("sha256")
    return any(_sha256(repr(canonical(expected))) == digest for expected in accepted)


def values_match(got: Any, expected: Any) -> bool:
    """Whether a returned value counts as the expected one.

    Python's ``==``, except that a bool matches only a bool (``True`` is not
    ``1``), a tuple and a list with matching items match, and floats match
    within a relative tolerance of 1e-6 (absolute 1e-9); the same rules apply
    inside lists, tuples and dict values.

    >>> values_match((1, 0.30000000000000004), [1, 0.3])
    True
    """
    if isinstance(got, bool) or isinstance(expected, bool):
        return isinstance(got, bool) and isinstance(expected, bool) and got == expected
    if _is_number(got) and _is_number(expected):
        if got == expected:
            return True
        if not (isinstance(got, float) or isinstance(expected, float)):
            return False
        try:
            return math.isclose(got, expected, rel_tol=_REL_TOL, abs_tol=_ABS_TOL)
        except OverflowError:  # an int too large for a float is far from any float
            return False
    if isinstance(got, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(got) == len(expected) and all(map(values_match, got, expected))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(
            values_match(got[key], expected[key]) for key in expected)
    try:
        return bool(got == expected)
    except (TypeError, ValueError, RecursionError):
        return False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
