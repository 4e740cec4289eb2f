"""Code-LLM-v0 with the real local sandbox: tasks, rewards, feedback, revisions, config."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the ids)
from agentgym.envs.code import CodeEnv, builtin_problems
from agentgym.errors import ConfigError
from agentgym.sandbox import LocalSandbox, Sandbox
from code_solutions import SOLUTIONS

ID = "Code-LLM-v0"
FENCE = "```"


def code(source: str) -> str:
    return f"Here is my solution.\n{FENCE}python\n{source.strip()}\n{FENCE}"


def two_sum_env(sandbox: Sandbox, **kwargs: object) -> CodeEnv:
    env = gym.make(ID, sandbox=sandbox, **kwargs).unwrapped
    assert isinstance(env, CodeEnv)
    env.reset(seed=0, options={"problem_id": "two_sum"})
    return env


# Checks neighbours only: right on the visible examples and on 3 of the 5 hidden tests.
PARTLY_RIGHT = """
def two_sum(nums, target):
    for i in range(len(nums) - 1):
        if nums[i] + nums[i + 1] == target:
            return [i, i + 1]
"""


# -- the task --------------------------------------------------------------------------


def test_the_task_shows_statement_signature_and_examples_but_no_hidden_test(sandbox: Sandbox) -> None:
    env = gym.make(ID, sandbox=sandbox).unwrapped
    observation, info = env.reset(seed=0, options={"problem_id": "two_sum"})
    assert info == {"turn": 0, "success": False, "problem_id": "two_sum"}
    assert "Return the indices [i, j]" in observation
    assert "def two_sum(nums: list[int], target: int) -> list[int]:" in observation
    assert "two_sum([2, 7, 11, 15], 9) returns [0, 1]" in observation
    problem = env.problem
    for test in problem.hidden:
        assert repr(test.input[0]) not in observation
    assert f"{FENCE}python" in observation


def test_a_program_problem_shows_input_and_output_examples(sandbox: Sandbox) -> None:
    env = gym.make(ID, sandbox=sandbox).unwrapped
    observation, _ = env.reset(options={"problem_id": "sum_pairs"})
    assert "reads standard input" in observation
    assert "Input:\n    2\n    1 2\n    10 -3\nExpected output:\n    3\n    7" in observation


def test_problems_are_drawn_from_the_seed(sandbox: Sandbox) -> None:
    env = gym.make(ID, sandbox=sandbox).unwrapped
    drawn = [env.reset(seed=seed)[1]["problem_id"] for seed in range(40)]
    assert drawn == [env.reset(seed=seed)[1]["problem_id"] for seed in range(40)]
    assert len(set(drawn)) > 15


def test_an_unknown_problem_id_suggests_close_ones(sandbox: Sandbox) -> None:
    env = gym.make(ID, sandbox=sandbox).unwrapped
    with pytest.raises(ConfigError, match="No problem with id 'two_sums'. Did you mean 'two_sum'"):
        env.reset(options={"problem_id": "two_sums"})
    with pytest.raises(ConfigError, match=r"Unknown reset options \['level'\]"):
        env.reset(options={"level": 3})


# -- rewards ---------------------------------------------------------------------------


def test_a_right_answer_scores_1_and_ends_the_episode(sandbox: Sandbox) -> None:
    env = two_sum_env(sandbox)
    observation, reward, terminated, truncated, info = env.step(code(SOLUTIONS["two_sum"]))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["success"] and info["action_valid"] and info["score"] == 1.0
    assert (info["passed"], info["total"], info["visible_passed"], info["visible_total"]) == (5, 5, 2, 2)
    assert info["sandbox"] == sandbox.name
    assert "Visible tests: 2 of 2 passed." in observation and "Hidden tests: 5 of 5 passed." in observation
    assert "solved" in observation


def test_a_partly_right_answer_is_scored_when_the_episode_ends(sandbox: Sandbox) -> None:
    env = two_sum_env(sandbox, max_turns=2)
    observation, reward, terminated, truncated, info = env.step(code(PARTLY_RIGHT))
    assert (reward, terminated, truncated) == (0.0, False, False)  # the reward comes at the end
    assert info["score"] == pytest.approx(0.6) and not info["success"]
    assert "Hidden tests: 3 of 5 passed." in observation and "1 turn(s) left" in observation
    observation, reward, terminated, truncated, info = env.step(code(PARTLY_RIGHT))
    assert reward == pytest.approx(0.6) and truncated and not terminated
    assert "turn limit (2) is reached" in observation


def test_a_single_turn_episode_scores_its_one_answer(sandbox: Sandbox) -> None:
    env = two_sum_env(sandbox, max_turns=1)
    _, reward, terminated, truncated, info = env.step(code(PARTLY_RIGHT))
    assert reward == pytest.approx(0.6) and terminated and not truncated and not info["success"]


def test_revising_after_feedback_can_still_solve(sandbox: Sandbox) -> None:
    env = two_sum_env(sandbox)
    wrong = "def two_sum(nums, target):\n    return [0, 1]"
    observation, reward, terminated, _, _ = env.step(code(wrong))
    assert reward == 0.0 and not terminated
    assert "Test 2: FAILED.\n  two_sum([3, 2, 4], 6)\n  expected: [1, 2]\n  got:      [0, 1]" in observation
    assert "Test 1: passed.\n  two_sum([2, 7, 11, 15], 9) returned [0, 1]" in observation
    _, reward, terminated, _, info = env.step(code(SOLUTIONS["two_sum"]))
    assert reward == 1.0 and terminated and info["turn"] == 2 and info["success"]


def test_the_last_code_counts_not_the_best(sandbox: Sandbox) -> None:
    env = two_sum_env(sandbox, max_turns=2)
    env.step(code(PARTLY_RIGHT))
    _, reward, *_ = env.step(code("def two_sum(nums, target):\n    return None"))
    assert reward == 0.0


def test_a_program_problem_is_solved_through_stdin(sandbox: Sandbox) -> None:
    env = gym.make(ID, sandbox=sandbox).unwrapped
    env.reset(options={"problem_id": "sum_pairs"})
    observation, reward, terminated, _, _ = env.step("<answer>print(3)</answer>")
    assert reward == 0.0 and not terminated
    assert "Test 2: FAILED.\n  input:\n    1\n    0 0\n  expected output:\n    0\n  your output:\n    3" in observation
    _, reward, terminated, _, _ = env.step(code(SOLUTIONS["sum_pairs"]))
    assert reward == 1.0 and terminated


def test_success_needs_every_hidden_test_not_the_visible_ones(sandbox: Sandbox) -> None:
    rows = [{"task_id": 2, "text": "Return the elements the two tuples share.",
             "test_list": ["assert set(similar((3, 4), (4, 5))) == set((4,))",
                           "assert similar((1,), (1,)) == (1,)"]}]
    env = CodeEnv(problems=rows, sandbox=sandbox)
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step(
        "<answer>def similar(a, b):\n    return (1,)</answer>")
    assert ("Test 1: FAILED.\n  assert set(similar((3, 4), (4, 5))) == set((4,))\n"
            "  The assertion failed.") in observation
    assert "Every hidden test passed" in observation
    assert reward == 1.0 and terminated and info["success"]


# -- bad answers -----------------------------------------------------------------------


def test_an_answer_without_code_is_invalid_and_costs_the_penalty(sandbox: Sandbox) -> None:
    env = two_sum_env(sandbox, format_penalty=0.2, max_turns=2)
    observation, reward, terminated, _, info = env.step("I would use a hash map.")
    assert info["action_valid"] is False and reward == pytest.approx(-0.2) and not terminated
    assert "No code found" in observation and f"{FENCE}python" in observation
    assert "sandbox" not in info  # nothing ran


def test_an_answer_without_code_on_the_last_turn_keeps_the_last_score(sandbox: Sandbox) -> None:
    env = two_sum_env(sandbox, format_penalty=0.2, max_turns=2)
    env.step(code(PARTLY_RIGHT))
    _, reward, _, truncated, info = env.step("Done.")
    assert truncated and info["action_valid"] is False
    assert reward == pytest.approx(0.6 - 0.2)


def test_code_longer_than_the_limit_is_invalid(sandbox: Sandbox) -> None:
    env = two_sum_env(sandbox)
    observation, _, _, _, info = env.step(code("x = 1\n" * 20_000))
    assert info["action_valid"] is False and "longer than 100000 characters" in observation


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        ("def two_sum(nums, target)\n    return []", "Your code does not compile:"),
        ("def two_sum(nums, target):\n    return nums[99]", "IndexError: list index out of range"),
        ("def two_sum(nums, target):\n    while True:\n        pass", "Test 1: TIMEOUT."),
        ("import sys\nsys.exit(1)", "The code called exit(1)."),
        ("print('hi')", "does not define a function named 'two_sum'"),
    ],
)
def test_broken_code_is_feedback_never_an_exception(sandbox: Sandbox, source: str, shown: str) -> None:
    env = two_sum_env(sandbox, test_timeout=0.3, time_budget=1.0)
    observation, reward, terminated, _, info = env.step(code(source))
    assert shown in observation
    assert info["action_valid"] is True and reward == 0.0 and not terminated
    assert info["score"] == 0.0


def test_same_seed_and_answers_give_the_same_episode(sandbox: Sandbox) -> None:
    def play(seed: int) -> list[str]:
        env = gym.make(ID, sandbox=sandbox)
        observations = [env.reset(seed=seed)[0]]
        for answer in ("def f(:", "print(1)", "no code"):
            observations.append(env.step(code(answer) if answer != "no code" else answer)[0])
        return observations

    assert play(3) == play(3)
    assert play(3) != play(4)


# -- problems and sandboxes ------------------------------------------------------------


def test_problems_and_datasets_can_be_given(sandbox: Sandbox, tmp_path: Path) -> None:
    rows = [{"id": "double", "prompt": "Write double(x).",
             "tests": ["assert double(1) == 2", "assert double(3) == 6"]}]
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n")
    for env in (CodeEnv(problems=rows, sandbox=sandbox), CodeEnv(dataset=path, sandbox=sandbox)):
        observation, _ = env.reset(seed=0)
        assert "double(1) returns 2" in observation and "Write double(x)." in observation
        _, reward, terminated, _, _ = env.step(code("def double(x):\n    return 2 * x"))
        assert reward == 1.0 and terminated
    assert CodeEnv(problems=builtin_problems()[:2], sandbox=sandbox).problems == builtin_problems()[:2]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"problems": [], }, "No problems to play"),
        ({"problems": [], "dataset": "x.jsonl"}, "Give problems or dataset, not both"),
        ({"test_timeout": 0}, "test_timeout must be at least 0.01"),
        ({"time_budget": 1.0, "test_timeout": 2.0}, "time_budget must be at least 2.0"),
        ({"sandbox": "docker"}, "sandbox must be an agentgym Sandbox"),
        ({"backend": "podman"}, "backend must be one of auto, docker, local, remote, or sandbox "
                                "service URLs"),
    ],
)
def test_bad_config_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CodeEnv(**kwargs)


def test_a_given_sandbox_is_left_open_by_close(sandbox: Sandbox) -> None:
    env = two_sum_env(sandbox)
    env.step(code(SOLUTIONS["two_sum"]))
    env.close()
    assert sandbox.run("print(1)").stdout == "1\n"


def test_envs_share_one_sandbox_opened_lazily_and_closed_by_the_last() -> None:
    first, second = (gym.make(ID, backend="local").unwrapped for _ in range(2))
    first.reset(seed=0, options={"problem_id": "two_sum"})
    assert first._sandbox is None  # nothing opened before code has to run
    _, reward, _, _, info = first.step(code(SOLUTIONS["two_sum"]))
    assert reward == 1.0 and info["sandbox"] in ("bubblewrap", "subprocess")
    assert isinstance(first.sandbox, LocalSandbox) and second.sandbox is first.sandbox
    shared = first.sandbox
    first.close()
    assert second.sandbox.run("print(1)").stdout == "1\n"  # still open for the other env
    second.close()
    third = gym.make(ID, backend="local").unwrapped
    assert third.sandbox is not shared  # the last close closed it; a new one opens
    third.close()


def test_instructions_and_render(sandbox: Sandbox) -> None:
    env = two_sum_env(sandbox, render_mode="ansi", max_turns=4)
    assert "fenced block" in env.instructions and "4 turn(s)" in env.instructions
    assert "<answer></answer>" in env.instructions
    assert env.render() == "Problem two_sum, turn 0 of 4."
    env.step(code(SOLUTIONS["two_sum"]))
    assert "Hidden tests: 5 of 5 passed." in env.render()


def test_hidden_results_can_be_kept_quiet(sandbox: Sandbox) -> None:
    env = two_sum_env(sandbox, show_hidden=False)
    observation, *_ = env.step(code(PARTLY_RIGHT))
    assert "Hidden" not in observation and "Visible tests: 2 of 2 passed." in observation
