"""Coding problems and their tests, and the built-in problem set.

A :class:`Problem` is a statement plus tests. It is either a *function*
problem (the agent writes ``entry_point``; tests call it) or a *program*
problem (``entry_point`` is None; each test feeds ``stdin`` and compares
``stdout``). Tests are split into ``visible`` ones, shown to the agent as
examples and run as feedback, and ``hidden`` ones, which give the reward.

A :class:`TestCase` is one of four kinds:

- ``call``: ``entry_point(*input) == expected`` (``input`` is the list of arguments);
- ``expr``: the Python expression ``input`` evaluates to ``expected`` (MBPP's
  ``assert f(x) == 3`` becomes ``expr="f(x)"``, ``expected=3``);
- ``assert``: the Python statement ``input`` runs without an ``AssertionError``;
- ``stdio``: the program, given ``input`` on stdin, prints ``expected``.

Only the ``assert`` kind needs the expected value inside the sandbox; for the
other three the sandbox reports what the code produced and the comparison is
made outside it.

The built-in set (:func:`builtin_problems`) is 42 problems written for this
package, in ``data/problems.jsonl``, one JSON object a line in the *native*
format that :meth:`Problem.from_dict` reads::

    {"id": "two_sum", "title": "Two sum", "statement": "...",
     "entry_point": "two_sum",
     "signature": "def two_sum(nums: list[int], target: int) -> list[int]:",
     "visible": [{"args": [[2, 7, 11, 15], 9], "expected": [0, 1]}],
     "hidden": [{"args": [[3, 3], 6], "expected": [0, 1]}, ...],
     "tags": ["lists"], "difficulty": "easy"}

A test is written ``{"args": [...], "expected": v}`` (call), ``{"expr": "...",
"expected": v}``, ``{"assert": "..."}`` or ``{"stdin": "...", "stdout": "..."}``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

from agentgym.errors import ConfigError

__all__ = ["TEST_KINDS", "Problem", "TestCase", "TestKind", "builtin_problems"]

TestKind = Literal["call", "expr", "assert", "stdio"]
TEST_KINDS: tuple[str, ...] = ("call", "expr", "assert", "stdio")
_DATA_FILE = "problems.jsonl"


@dataclass(frozen=True)
class TestCase:
    """One test of a problem; see the module docstring for the four kinds."""

    __test__ = False  # not a pytest test class, despite the name

    kind: TestKind
    input: Any
    """call: the list of arguments; expr: an expression; assert: a statement; stdio: stdin text."""
    expected: Any = None
    """call and expr: the value; stdio: the stdout text; assert: unused (None)."""
    alternatives: tuple[Any, ...] = ()
    """Other values also accepted (APPS call-based problems accept ``[v]`` or ``v``)."""

    def __post_init__(self) -> None:
        if self.kind not in TEST_KINDS:
            raise ConfigError(f"A test's kind must be one of {TEST_KINDS}, got {self.kind!r}.")
        if self.kind == "call" and not isinstance(self.input, list):
            raise ConfigError(f"A call test's input is the list of arguments, got {self.input!r}.")
        if self.kind == "call":
            try:  # the arguments travel to the sandbox as JSON
                json.dumps(self.input)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"A call test's arguments must be JSON values (lists, dicts, numbers, text), "
                    f"got {self.input!r:.200}."
                ) from None
        if self.kind in ("expr", "assert", "stdio") and not isinstance(self.input, str):
            raise ConfigError(f"A {self.kind} test's input must be text, got {self.input!r}.")
        if self.kind == "stdio" and not isinstance(self.expected, str):
            raise ConfigError(
                f"A stdio test's expected output must be text, got {self.expected!r}."
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TestCase:
        """Read a native test: ``{"args", "expected"}``, ``{"expr", "expected"}``,
        ``{"assert"}`` or ``{"stdin", "stdout"}``."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"A test must be a JSON object, got {data!r}.")
        alternatives = tuple(data.get("alternatives", ()))
        if "args" in data:
            args = data["args"]
            args = list(args) if isinstance(args, tuple) else args
            return cls("call", args, data.get("expected"), alternatives)
        if "expr" in data:
            return cls("expr", data["expr"], data.get("expected"), alternatives)
        if "assert" in data:
            return cls("assert", data["assert"])
        if "stdin" in data or "stdout" in data:
            return cls("stdio", data.get("stdin", ""), data.get("stdout", ""))
        raise ConfigError(
            f"A test needs 'args' (a call), 'expr', 'assert' or 'stdin'/'stdout'; got keys "
            f"{sorted(data)}."
        )

    def to_dict(self) -> dict[str, Any]:
        """The native JSON form read by :meth:`from_dict`."""
        extra = {"alternatives": list(self.alternatives)} if self.alternatives else {}
        if self.kind == "call":
            return {"args": self.input, "expected": self.expected, **extra}
        if self.kind == "expr":
            return {"expr": self.input, "expected": self.expected, **extra}
        if self.kind == "assert":
            return {"assert": self.input}
        return {"stdin": self.input, "stdout": self.expected}


@dataclass(frozen=True)
class Problem:
    """A coding problem: statement, what to write, visible examples and hidden tests.

    Args:
        id: unique name, used by ``reset(options={"problem_id": id})``.
        statement: the task, as shown to the agent.
        visible: tests shown as examples and run as feedback after each answer.
        hidden: tests that give the reward; never shown. A problem with no
            hidden tests is scored on its visible ones.
        entry_point: the function to write; None for a stdin/stdout program.
        signature: the function's ``def`` line (or starter code) shown to the agent.
        setup: code run after the solution and before each test (imports the tests need).
        title, tags, difficulty: descriptive only.
    """

    id: str
    statement: str
    visible: tuple[TestCase, ...]
    hidden: tuple[TestCase, ...]
    entry_point: str | None = None
    signature: str | None = None
    setup: str = ""
    title: str = ""
    tags: tuple[str, ...] = field(default=())
    difficulty: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ConfigError(f"A problem needs a non-empty text id, got {self.id!r}.")
        if not isinstance(self.statement, str) or not self.statement.strip():
            raise ConfigError(f"Problem {self.id!r} has no statement.")
        tests = self.visible + self.hidden
        if not tests:
            raise ConfigError(f"Problem {self.id!r} has no tests: give it visible or hidden tests.")
        stdio = [test.kind == "stdio" for test in tests]
        if any(stdio) and not all(stdio):
            raise ConfigError(f"Problem {self.id!r} mixes stdin/stdout tests with function tests.")
        if all(stdio) and self.entry_point is not None:
            raise ConfigError(
                f"Problem {self.id!r} has stdin/stdout tests, so its entry_point must be None, "
                f"got {self.entry_point!r}."
            )
        if any(test.kind == "call" for test in tests) and not self.entry_point:
            raise ConfigError(f"Problem {self.id!r} has call tests but no entry_point to call.")

    @property
    def mode(self) -> Literal["function", "stdio"]:
        """``"stdio"`` for a program reading stdin, ``"function"`` otherwise."""
        return "stdio" if all(test.kind == "stdio" for test in self.tests) else "function"

    @property
    def tests(self) -> tuple[TestCase, ...]:
        """Every test, visible first."""
        return self.visible + self.hidden

    @property
    def scored(self) -> tuple[TestCase, ...]:
        """The tests that give the reward: the hidden ones, or the visible ones if none is."""
        return self.hidden or self.visible

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Problem:
        """Read a problem in the native format (see the module docstring)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"A problem must be a JSON object, got {type(data).__name__}.")
        missing = {"id", "statement"} - set(data)
        if missing:
            raise ConfigError(f"A problem needs {sorted(missing)}; got keys {sorted(data)}.")
        return cls(
            id=str(data["id"]),
            statement=data["statement"],
            visible=_read_tests(data.get("visible", ()), data["id"]),
            hidden=_read_tests(data.get("hidden", ()), data["id"]),
            entry_point=data.get("entry_point"),
            signature=data.get("signature"),
            setup=data.get("setup") or "",
            title=data.get("title") or "",
            tags=tuple(data.get("tags") or ()),
            difficulty=data.get("difficulty") or "",
        )

    def to_dict(self) -> dict[str, Any]:
        """The native JSON form read by :meth:`from_dict`."""
        return {
            "id": self.id, "title": self.title, "statement": self.statement,
            "entry_point": self.entry_point, "signature": self.signature, "setup": self.setup,
            "visible": [test.to_dict() for test in self.visible],
            "hidden": [test.to_dict() for test in self.hidden],
            "tags": list(self.tags), "difficulty": self.difficulty,
        }


def _read_tests(tests: Any, problem_id: Any) -> tuple[TestCase, ...]:
    if isinstance(tests, (str, bytes)) or not isinstance(tests, Sequence):
        raise ConfigError(f"Problem {problem_id!r}: tests must be a list, got {tests!r}.")
    return tuple(TestCase.from_dict(test) for test in tests)


@functools.cache
def builtin_problems() -> tuple[Problem, ...]:
    """The problems shipped with agentgym (read once, then cached)."""
    text = resources.files("agentgym.envs.code").joinpath("data", _DATA_FILE).read_text("utf-8")
    return tuple(Problem.from_dict(json.loads(line)) for line in text.splitlines() if line.strip())
