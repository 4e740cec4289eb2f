"""Math-LLM-v0: answers in a box or a tag, rewards by math-verify, retries, options, a judge."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import numpy as np
import pytest

import agentgym
from agentgym.envs.math.env import MathEnv, read_answer
from agentgym.envs.math.problems import MathProblem
from agentgym.errors import ConfigError

HALF = {"question": "What is 1/2 + 1/4?", "answer": r"\frac{3}{4}"}


def _env(**kwargs: object) -> MathEnv:
    env = MathEnv(**kwargs)
    env.reset(seed=0, options={"problem": HALF})
    return env


@pytest.mark.parametrize("action", [
    r"1/2 + 1/4 = 3/4, so \boxed{\frac{3}{4}}",
    "<answer>0.75</answer>",
    "<answer>75%</answer>",
    r"First I thought \boxed{1}. No: \boxed{3/4}.",  # the last box counts
    r"<answer>\boxed{\dfrac{3}{4}}</answer>",
])
def test_a_right_answer_earns_one_and_ends_the_episode(action: str) -> None:
    observation, reward, terminated, truncated, info = _env().step(action)
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["success"] and info["correct"] and info["action_valid"]
    assert observation.startswith("Correct")


def test_a_wrong_answer_earns_zero_and_does_not_reveal_the_reference() -> None:
    observation, reward, terminated, _, info = _env().step(r"\boxed{2/3}")
    assert (reward, terminated, info["success"], info["correct"]) == (0.0, True, False, False)
    assert "2/3 is not correct" in observation
    assert "3/4" not in observation and "0.75" not in observation


def test_retries_say_wrong_and_let_the_agent_try_again() -> None:
    env = _env(max_turns=3)
    observation, reward, terminated, truncated, _ = env.step(r"\boxed{1}")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert observation == "1 is not correct. Try again."
    observation, reward, terminated, _, info = env.step("<answer>3/4</answer>")
    assert (reward, terminated, info["success"], info["turn"]) == (1.0, True, True, 2)


def test_the_last_retry_ends_the_episode_truncated() -> None:
    env = _env(max_turns=2)
    env.step(r"\boxed{1}")
    observation, reward, terminated, truncated, _ = env.step(r"\boxed{2}")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert "Try again" not in observation and "turn limit (2)" in observation


@pytest.mark.parametrize(("action", "says"), [
    ("The answer is 3/4.", "No final answer found"),
    ("<answer>   </answer>", "Your answer is empty"),
    (r"\boxed{}", "Your answer is empty"),
    ("<answer>" + "7" * 5000 + "</answer>", "No number or expression could be read"),
])
def test_an_unreadable_answer_is_feedback_with_the_format_penalty(action: str, says: str) -> None:
    observation, reward, _, _, info = _env(format_penalty=0.2, max_turns=2).step(action)
    assert says in observation
    assert reward == pytest.approx(-0.2) and info["action_valid"] is False


def test_a_reference_that_cannot_be_read_ends_the_episode_unscored() -> None:
    env = MathEnv()
    env.reset(options={"problem": {"question": "q?", "answer": "$$"}})
    observation, reward, terminated, _, info = env.step(r"\boxed{1}")
    assert (reward, terminated, info["action_valid"]) == (0.0, True, True)
    assert info["reference_readable"] is False and "not scored" in observation


def test_generated_problems_follow_kinds_levels_and_seeds() -> None:
    env = MathEnv(kinds=["fractions"], levels=4)
    first = [env.reset(seed=seed) for seed in range(10)]
    assert all(info["kind"] == "fractions" and info["level"] == 4 for _, info in first)
    assert first == [env.reset(seed=seed) for seed in range(10)]
    assert len({observation for observation, _ in first}) == 10


def test_the_reference_answer_of_generated_problems_always_verifies() -> None:
    env = MathEnv(levels=(1, 2, 3, 4, 5))
    for seed in range(60):
        env.reset(seed=seed)
        _, reward, *_ = env.step(env.format_action(env.problem.answer))
        assert reward == 1.0, env.problem


def test_problems_are_drawn_from_the_list_or_by_index() -> None:
    problems = [MathProblem(f"What is {n} + {n}?", str(2 * n)) for n in range(20)]
    env = MathEnv(problems=problems)
    asked = {env.reset(seed=seed)[0].split("\n")[0] for seed in range(40)}
    assert len(asked) > 5 and asked <= {p.question for p in problems}
    env.reset(options={"index": 7})
    assert env.step(r"\boxed{14}")[1] == 1.0


def test_stepping_from_worker_threads_scores_like_the_main_thread() -> None:
    # The rollout manager steps envs in a thread pool; the checker must work there too.
    def episode(seed: int) -> float:
        env = MathEnv(levels=(1, 2, 3, 4, 5))
        env.reset(seed=seed)
        return env.step(env.format_action(env.problem.answer))[1]

    with ThreadPoolExecutor(max_workers=3) as pool:
        assert list(pool.map(episode, range(12))) == [1.0] * 12


def test_bad_configuration_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"kinds must be some of .*got \['geometry'\]"):
        MathEnv(kinds=["geometry"])
    with pytest.raises(ConfigError, match=r"levels must be some of .*got 0"):
        MathEnv(levels=0)
    with pytest.raises(ConfigError, match="problems is empty"):
        MathEnv(problems=[])
    with pytest.raises(ConfigError, match="problems item must be a MathProblem or a dict"):
        MathEnv(problems=[{"question": "q"}])
    with pytest.raises(ConfigError, match=r'options\["index"\] needs problems=...'):
        MathEnv().reset(options={"index": 0})
    with pytest.raises(ConfigError, match=r'options\["index"\] must be at most 0'):
        MathEnv(problems=[HALF]).reset(options={"index": 3})


def test_instructions_render_and_random_actions() -> None:
    env = _env(max_turns=2, render_mode="ansi")
    assert r"\boxed{}" in env.instructions and "may try again" in env.instructions
    assert env.render() == f"Problem: {HALF['question']}"
    env.step(r"\boxed{5}")
    assert env.render().endswith("Wrong answer: 5")
    rng = np.random.default_rng(0)
    actions = [env.random_action(rng) for _ in range(30)]
    assert all(read_answer(action) for action in actions)
    assert any(read_answer(action) == HALF["answer"] for action in actions)


def test_registered_and_made_by_id() -> None:
    info = agentgym.env_info("Math-LLM-v0")
    assert info.family == "math"
    env = gym.make("Math-LLM-v0", kinds="linear", levels=[1])
    observation, _ = env.reset(seed=3)
    assert observation.startswith("Solve for x:")


def test_without_math_verify_making_the_env_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "math_verify", None)  # import now fails
    with pytest.raises(MissingDependencyError, match=r"scripts/setup.sh math \(from the agentgym repository root; or: pip install math-verify\)"):
        gym.make("Math-LLM-v0")


def test_last_number_reads_a_bare_reply_by_its_last_number() -> None:
    import gymnasium as gym

    from agentgym.envs.math.env import last_number

    assert last_number("16 - 5 = 11") == "11" and last_number("about -3.5, or 7/2") == "7/2"
    assert last_number("no digits") is None
    lenient = gym.make("Math-LLM-v0", kinds=["arithmetic"], levels=[1], answer_format="last_number")
    lenient.reset(seed=3)  # Compute 17 + 2.
    _, reward, terminated, _, info = lenient.step("17 + 2 = 19")
    assert (reward, terminated, info["success"], info["action_valid"]) == (1.0, True, True, True)
    lenient.reset(seed=3)
    _, reward, _, _, info = lenient.step("So it is \\boxed{20}, not 19")  # a box still wins over the last number
    assert reward == 0.0 and info["answer"] == "20"
    strict = gym.make("Math-LLM-v0", kinds=["arithmetic"], levels=[1])
    strict.reset(seed=3)
    _, reward, _, _, info = strict.step("17 + 2 = 19")
    assert reward == -0.1 and info["action_valid"] is False  # the default format is unchanged
    with pytest.raises(ConfigError, match="answer_format must be one of tagged, last_number"):
        gym.make("Math-LLM-v0", answer_format="loose")
