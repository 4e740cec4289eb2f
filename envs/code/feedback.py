"""The text the code env shows: the task, and the results of a submission.

Kept apart from the env so the wording can be read (and changed) in one place.
Long inputs, outputs and tracebacks are cut: a traceback keeps its last lines
(where the error is), an output its first ones.
"""

from __future__ import annotations

from agentgym.envs.code.problems import Problem, TestCase
from agentgym.envs.code.runner import Evaluation, TestOutcome

__all__ = ["describe_call", "feedback_text", "task_text"]

_MAX_SHOWN_CHARS = 1500
_MAX_SHOWN_LINES = 30
_MAX_TRACE_LINES = 12
_HEADLINE = {"passed": "passed", "failed": "FAILED", "error": "ERROR", "timeout": "TIMEOUT",
             "not_run": "NOT RUN"}


def _head(text: str, chars: int = _MAX_SHOWN_CHARS, lines: int = _MAX_SHOWN_LINES) -> str:
    """The start of ``text``, with a marker where it was cut."""
    every = text.splitlines()
    joined = "\n".join(every[:lines])
    cut = len(every) > lines or len(joined) > chars
    return joined[:chars] + "\n[... cut ...]" if cut else joined


def _tail(text: str, chars: int = _MAX_SHOWN_CHARS, lines: int = _MAX_TRACE_LINES) -> str:
    """The end of ``text`` (the end of a traceback says what went wrong)."""
    every = text.rstrip("\n").splitlines()
    joined = "\n".join(every[-lines:])
    cut = len(every) > lines or len(joined) > chars
    return "[... cut ...]\n" + joined[-chars:] if cut else joined


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines()) or prefix


def describe_call(problem: Problem, test: TestCase) -> str:
    """How a function test is written for the agent: ``two_sum([2, 7], 9)``."""
    if test.kind == "call":
        return f"{problem.entry_point}({', '.join(repr(arg) for arg in test.input)})"
    return str(test.input)


def _example(problem: Problem, test: TestCase, number: int) -> str:
    if test.kind == "stdio":
        return (f"Example {number}:\nInput:\n{_indent(_head(test.input))}\n"
                f"Expected output:\n{_indent(_head(test.expected))}")
    if test.kind == "assert":
        return f"  {_head(test.input)}"
    return f"  {_head(describe_call(problem, test))} returns {_head(repr(test.expected))}"


def task_text(problem: Problem, answer_hint: str) -> str:
    """The first observation: the statement, what to write, the visible examples."""
    parts = [problem.title or problem.id, problem.statement.strip()]
    if problem.mode == "stdio":
        parts.append("Write a complete Python program that reads standard input and prints "
                     "the answer to standard output.")
    elif problem.signature:
        signature = _indent(problem.signature)
        parts.append(f"Write a Python function with this signature:\n\n{signature}")
    elif problem.entry_point:
        parts.append(f"Write a Python function named {problem.entry_point}.")
    if problem.visible:
        examples = [_example(problem, test, n) for n, test in enumerate(problem.visible, 1)]
        joiner = "\n\n" if problem.mode == "stdio" else "\n"
        parts.append("Examples:\n" + joiner.join(examples))
    hidden = " Hidden tests decide the reward." if problem.hidden else ""
    parts.append(f"Answer with your complete code {answer_hint}.{hidden}")
    return "\n\n".join(parts)


def _outcome_text(problem: Problem, outcome: TestOutcome, number: int) -> str:
    test, status = outcome.test, outcome.status
    head = f"Test {number}: {_HEADLINE[status]}."
    if test.kind == "stdio":
        lines = [f"  input:\n{_indent(_head(test.input))}"]
        if status == "failed":
            lines.append(f"  expected output:\n{_indent(_head(test.expected))}")
            lines.append(f"  your output:\n{_indent(_head(outcome.got or ''))}")
    elif status == "passed" and test.kind != "assert":
        call = _head(describe_call(problem, test), 300)
        lines = [f"  {call} returned {_head(outcome.got or '', 300, 3)}"]
    else:
        lines = [f"  {_head(describe_call(problem, test), 300)}"]
        if status == "failed" and test.kind == "assert":
            lines.append("  The assertion failed.")
        elif status == "failed":
            lines.append(f"  expected: {_head(repr(test.expected), 500, 5)}")
            lines.append(f"  got:      {_head(outcome.got or '', 500, 5)}")
    if outcome.error:
        lines.append(_indent(_tail(outcome.error), "  "))
    if outcome.output and status != "passed":
        lines.append(f"  printed:\n{_indent(_head(outcome.output, 500, 10))}")
    return "\n".join([head, *lines])


def feedback_text(problem: Problem, evaluation: Evaluation, *, show_hidden: bool = True) -> str:
    """What the agent sees after a submission: visible test results, hidden score."""
    if evaluation.compile_error:
        return f"Your code does not compile:\n{_indent(_tail(evaluation.compile_error))}"
    parts = []
    if evaluation.run_error:
        parts.append(f"Your code could not be tested: {_tail(evaluation.run_error)}")
    elif evaluation.visible:
        passed = sum(outcome.passed for outcome in evaluation.visible)
        parts.append(f"Visible tests: {passed} of {len(evaluation.visible)} passed.")
        parts += [_outcome_text(problem, outcome, n)
                  for n, outcome in enumerate(evaluation.visible, 1)]
    if show_hidden and evaluation.hidden:
        passed = sum(outcome.passed for outcome in evaluation.hidden)
        parts.append(f"Hidden tests: {passed} of {len(evaluation.hidden)} passed.")
    return "\n".join(parts)
