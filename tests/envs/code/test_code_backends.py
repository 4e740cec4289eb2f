"""The code env reads the same on every sandbox backend: local, and Docker where it runs.

The built-in problems' reference solutions run locally in test_code_problems.py;
here they run once more in the Docker sandbox, whose Python is the image's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sandbox_helpers import require_docker

from agentgym.envs.code import CodeEnv, builtin_problems, evaluate
from agentgym.sandbox import DockerSandbox, LocalSandbox, Sandbox
from code_solutions import SOLUTIONS, WRONG

FENCE = "```"


def open_docker() -> Sandbox:
    require_docker()
    return DockerSandbox(pool_size=2)


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    with LocalSandbox() if request.param == "local" else open_docker() as box:
        yield box


@pytest.mark.docker
def test_in_docker_every_reference_solution_passes_and_wrong_ones_fail() -> None:
    with open_docker() as docker:
        for problem in builtin_problems():
            assert evaluate(docker, problem, SOLUTIONS[problem.id]).score == 1.0, problem.id
        for problem in builtin_problems()[:8]:
            assert evaluate(docker, problem, WRONG[problem.id]).score < 1.0, problem.id


def test_an_episode_of_revisions(backend: Sandbox) -> None:
    env = CodeEnv(sandbox=backend, test_timeout=0.5, time_budget=2.0, max_turns=4)
    env.reset(options={"problem_id": "two_sum"})
    answers = [
        ("def two_sum(nums, target)\n    pass", "does not compile", 0.0),
        ("def two_sum(nums, target):\n    while True:\n        pass", "TIMEOUT", 0.0),
        ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", "could not be tested", 0.0),
        (SOLUTIONS["two_sum"], "Hidden tests: 5 of 5 passed.", 1.0),
    ]
    for source, shown, expected_reward in answers:
        observation, reward, terminated, _, info = env.step(f"{FENCE}python\n{source}\n{FENCE}")
        assert shown in observation and reward == expected_reward
        assert info["sandbox"] == backend.name
    assert terminated and info["success"]


def test_a_program_reads_stdin(backend: Sandbox) -> None:
    env = CodeEnv(sandbox=backend)
    env.reset(options={"problem_id": "shortest_path_grid"})
    _, reward, terminated, _, _ = env.step(f"<answer>{SOLUTIONS['shortest_path_grid']}</answer>")
    assert reward == 1.0 and terminated
