"""The built-in problem set: its shape, and every problem validated by a reference solution."""

from __future__ import annotations

import json

import pytest

from agentgym.envs.code import Problem, TestCase, builtin_problems, evaluate
from agentgym.errors import ConfigError
from agentgym.sandbox import Sandbox
from code_solutions import SOLUTIONS, WRONG

PROBLEMS = builtin_problems()
IDS = [problem.id for problem in PROBLEMS]


def test_the_set_has_at_least_30_varied_problems() -> None:
    assert len(PROBLEMS) >= 30
    assert len(set(IDS)) == len(IDS)
    tags = {tag for problem in PROBLEMS for tag in problem.tags}
    assert {"strings", "lists", "math", "dicts", "algorithms", "stdin/stdout"} <= tags
    assert {problem.mode for problem in PROBLEMS} == {"function", "stdio"}
    assert {problem.difficulty for problem in PROBLEMS} == {"easy", "medium"}


@pytest.mark.parametrize("problem", PROBLEMS, ids=IDS)
def test_each_problem_has_a_statement_examples_and_hidden_tests(problem: Problem) -> None:
    assert len(problem.statement) > 40 and problem.title
    assert 2 <= len(problem.visible) <= 3
    assert len(problem.hidden) >= 5
    assert not set(map(repr, problem.visible)) & set(map(repr, problem.hidden))
    if problem.mode == "function":
        assert problem.signature.startswith(f"def {problem.entry_point}(")
        assert all(test.kind == "call" for test in problem.tests)
    else:
        assert problem.entry_point is None and problem.signature is None


def test_every_problem_has_a_reference_and_a_wrong_solution() -> None:
    assert set(SOLUTIONS) == set(IDS) == set(WRONG)


@pytest.mark.parametrize("problem", PROBLEMS, ids=IDS)
def test_the_reference_solution_passes_every_test(sandbox: Sandbox, problem: Problem) -> None:
    evaluation = evaluate(sandbox, problem, SOLUTIONS[problem.id])
    failed = [(o.test, o.status, o.got, o.error) for o in evaluation.visible + evaluation.hidden
              if not o.passed]
    assert failed == []
    assert evaluation.score == 1.0


@pytest.mark.parametrize("problem", PROBLEMS, ids=IDS)
def test_a_wrong_solution_fails_a_hidden_test(sandbox: Sandbox, problem: Problem) -> None:
    evaluation = evaluate(sandbox, problem, WRONG[problem.id], test_timeout=1.0)
    assert evaluation.compile_error is None and evaluation.run_error is None
    assert evaluation.score < 1.0


def test_problems_round_trip_through_the_native_format() -> None:
    for problem in PROBLEMS:
        assert Problem.from_dict(json.loads(json.dumps(problem.to_dict()))) == problem


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"id": "x", "statement": "s", "visible": [], "hidden": []}, "has no tests"),
        ({"id": "", "statement": "s", "hidden": [{"stdin": "", "stdout": ""}]}, "non-empty text id"),
        ({"id": "x", "statement": " ", "hidden": [{"stdin": "", "stdout": ""}]}, "no statement"),
        ({"id": "x", "statement": "s", "hidden": [{"args": [1], "expected": 1}]}, "no entry_point"),
        ({"id": "x", "statement": "s", "entry_point": "f",
          "hidden": [{"args": [1], "expected": 1}, {"stdin": "", "stdout": ""}]}, "mixes"),
        ({"id": "x", "statement": "s", "entry_point": "f", "hidden": [{"stdin": "", "stdout": ""}]},
         "entry_point must be None"),
        ({"id": "x", "statement": "s", "hidden": [{"input": 1}]}, "A test needs 'args'"),
        ({"id": "x", "statement": "s", "entry_point": "f", "hidden": [{"args": 3}]},
         "list of arguments"),
        ({"id": "x", "statement": "s", "hidden": "assert f(1) == 1"}, "tests must be a list"),
        ({"id": "x", "statement": "s", "entry_point": "f", "hidden": [{"args": [{1, 2}]}]},
         "arguments must be JSON values"),
        ({"statement": "s"}, r"needs \['id'\]"),
    ],
)
def test_malformed_problems_say_what_is_wrong(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Problem.from_dict(data)


def test_a_problem_without_hidden_tests_is_scored_on_its_visible_ones() -> None:
    test = TestCase("call", [1], 2)
    problem = Problem("double", "Double it.", visible=(test,), hidden=(), entry_point="double")
    assert problem.scored == (test,)
