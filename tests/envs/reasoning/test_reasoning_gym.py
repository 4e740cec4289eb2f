"""ReasoningGym-LLM-v0: reasoning-gym tasks as single-turn envs, scored by their own checkers."""

from __future__ import annotations

import sys

import gymnasium as gym
import pytest

from agentgym.errors import ConfigError, MissingDependencyError


def test_without_reasoning_gym_making_the_env_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym.envs.reasoning.adapter import ReasoningGymEnv

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import now fails
    with pytest.raises(MissingDependencyError, match=r"scripts/setup.sh reasoning \(from the agentgym repository root; or: pip install reasoning-gym\)"):
        ReasoningGymEnv()
    with pytest.raises(MissingDependencyError, match="needs the reasoning-gym package"):
        gym.make("ReasoningGym-LLM-v0")


reasoning_gym = pytest.importorskip("reasoning_gym")

from agentgym.envs.reasoning.adapter import ReasoningGymEnv, reasoning_gym_tasks

# Tasks whose dataset's example answer is the answer (others accept many answers).
TASKS = ["basic_arithmetic", "leg_counting", "word_sorting", "knights_knaves", "arc_1d",
         "prime_factorization", "fraction_simplification", "sudoku"]
# These check an answer against the rules, and their dataset's example "answer" is not one.
MANY_ANSWERS = {"boxnet", "graph_color", "propositional_logic", "rubiks_cube", "rush_hour"}


@pytest.mark.parametrize("task", TASKS)
def test_the_dataset_answer_scores_one_and_a_wrong_one_less(task: str) -> None:
    env = ReasoningGymEnv(task=task)
    for seed in range(3):
        observation, info = env.reset(seed=seed)
        assert env.entry["question"].strip() in observation and info["task"] == task
        _, reward, terminated, truncated, info = env.step(f"<answer>{env.entry['answer']}</answer>")
        assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
        env.reset(seed=seed)
        _, wrong, terminated, _, info = env.step("<answer>definitely not it</answer>")
        assert wrong < 1.0 and terminated and not info["success"] and info["action_valid"]


def test_a_boxed_answer_counts_too() -> None:
    env = ReasoningGymEnv(task="leg_counting")
    env.reset(seed=5)
    assert env.step(rf"So \boxed{{{env.entry['answer']}}}.")[1] == 1.0


def test_seeds_choose_questions_reproducibly() -> None:
    env = ReasoningGymEnv(task="basic_arithmetic")
    first = [env.reset(seed=seed)[0] for seed in range(10)]
    assert first == [env.reset(seed=seed)[0] for seed in range(10)]
    assert len(set(first)) == 10
    other = ReasoningGymEnv(task="basic_arithmetic", dataset_seed=1)
    assert [other.reset(seed=seed)[0] for seed in range(10)] != first
    assert env.reset(options={"index": 3})[0] == env.reset(options={"index": 3})[0]


def test_the_task_config_reaches_the_generator() -> None:
    env = ReasoningGymEnv(task="basic_arithmetic", config={"min_terms": 6, "max_terms": 6})
    env.reset(seed=0)
    assert env.dataset.config.min_terms == 6


def test_no_answer_is_feedback_with_the_format_penalty() -> None:
    env = ReasoningGymEnv(task="leg_counting", format_penalty=0.3)
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step("I think it is many legs.")
    assert reward == pytest.approx(-0.3) and terminated and info["action_valid"] is False
    assert "<answer></answer>" in observation


def test_a_scorer_that_raises_on_text_scores_zero() -> None:
    # prime_factorization's score_answer calls int() on the answer's parts.
    env = ReasoningGymEnv(task="prime_factorization")
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("<answer>two times x</answer>")
    assert reward == 0.0 and terminated and info["score"] == 0.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"task": "leg_countin"}, "no task 'leg_countin'. Did you mean 'leg_counting'"),
    ({"task": "basic_arithmetic", "config": {"seed": 3}}, r"config\[.seed.\] is set by the env: use dataset_seed="),
    ({"task": "basic_arithmetic", "config": {"no_such_field": 1}}, "reasoning-gym refused config"),
    ({"task": "composite"}, "reasoning-gym refused config {} for task 'composite'"),
    ({"dataset_seed": -1}, "dataset_seed must be at least 0"),
])
def test_bad_configuration_is_a_config_error(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ReasoningGymEnv(**kwargs)


@pytest.mark.parametrize("task", [t for t in reasoning_gym_tasks() if t != "composite"])
def test_every_task_poses_a_question_offline(task: str) -> None:
    # composite mixes other tasks and needs config={"datasets": ...}; the rest need no data.
    env = ReasoningGymEnv(task=task)
    observation, _ = env.reset(seed=0)
    assert observation.strip()
    answer = env.entry["answer"]
    _, reward, terminated, _, _ = env.step(f"<answer>{answer}</answer>")
    assert terminated and 0.0 <= reward <= 1.0
    if task not in MANY_ANSWERS and task != "game_of_life_halting":
        assert reward > 0.0, (task, answer)
