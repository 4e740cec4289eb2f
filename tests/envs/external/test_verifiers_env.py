"""verifiers:NAME ids: verifiers environments (single-turn, tool) played as agentgym envs."""

from __future__ import annotations

import asyncio
import re

import gymnasium as gym
import pytest
import vf_reverse_text

import agentgym
from agentgym.errors import ConfigError, RemoteEnvError
from agentgym.rollout import ScriptedPolicy
from agentgym.rollout.manager import EnvManager, RolloutConfig

REVERSE, TOOLS = "verifiers:vf_reverse_text", "verifiers:vf_tool_math"


def _word(observation: str) -> str:
    return observation.rsplit(": ", 1)[1]


def test_a_single_turn_env_gives_its_rubrics_reward() -> None:
    env = agentgym.make(REVERSE)
    observation, info = env.reset(seed=0)
    word = _word(observation)
    assert observation == f"Reverse the text: {word}" and info["turn"] == 0
    assert "<answer>" in env.get_wrapper_attr("instructions")
    _, reward, terminated, truncated, info = env.step(f"<answer>{word[::-1]}</answer>")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert info["metrics"]["reversed_text_similarity"] == 1.0
    env.reset(seed=0)
    # difflib's ratio, 2 M / T: 3 matching characters of 3 + len(word) in all.
    _, reward, _, _, info = env.step(f"<answer>{word[::-1][:3]}</answer>")
    assert reward == pytest.approx(6 / (3 + len(word))) and info["success"] is (reward >= 0.5)
    with pytest.raises(agentgym.errors.ResetNeeded):
        env.step("again")


def test_the_same_seed_poses_the_same_row() -> None:
    env = agentgym.make(REVERSE)
    assert [env.reset(seed=seed)[0] for seed in range(6)] == [env.reset(seed=seed)[0] for seed in range(6)]
    assert len({env.reset(seed=seed)[0] for seed in range(6)}) > 1


def test_a_tool_env_runs_its_tool_between_turns() -> None:
    env = gym.make("agentgym:Verifiers-LLM-v0", name="vf_tool_math")
    observation, _ = env.reset(seed=1)
    a, b = map(int, re.findall(r"\d+", observation))
    assert "add:" in env.get_wrapper_attr("instructions")
    call = f'<tool_call>{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'
    observation, reward, terminated, _, _ = env.step(call)
    assert (observation, reward, terminated) == (f'<tool_response name="add">\n{a + b}\n</tool_response>', 0.0, False)
    _, reward, terminated, _, info = env.step(f"<answer>{a + b}</answer>")
    assert (reward, terminated, info["metrics"]["add_calls"]) == (1.0, True, 1.0)


def test_the_rollout_manager_plays_it_while_async_rubrics_leave_its_loop_free() -> None:
    """The rubric scores 0 unless a clock on the manager's own event loop ticks while it waits:
    a step that blocked that loop until the rubric finished would stop the clock."""
    config = RolloutConfig(env_id=REVERSE, env_kwargs={"heartbeats": 5}, episodes=4, group_size=2, seed=3)
    policy = ScriptedPolicy(lambda observation: f"<answer>{_word(observation)[::-1]}</answer>")

    async def run() -> list:
        async def clock() -> None:
            while True:
                vf_reverse_text.HEARTBEAT[0] += 1
                await asyncio.sleep(0.005)

        ticking = asyncio.create_task(clock())
        try:
            return await EnvManager(config, policy).run()
        finally:
            ticking.cancel()

    rows = asyncio.run(run())
    assert [(row.reward, row.success, row.error) for row in rows] == [(1.0, True, None)] * 4
    assert rows[0].env_id == REVERSE and rows[0].messages[1].content == rows[1].messages[1].content


def test_a_stalled_env_fails_its_episode_with_the_reason() -> None:
    config = RolloutConfig(env_id=REVERSE, env_kwargs={"rubric_wait": 30.0, "timeout": 0.5}, episodes=2)
    rows = asyncio.run(EnvManager(config, ScriptedPolicy(lambda observation: "<answer>x</answer>")).run())
    assert [row.stop_reason for row in rows] == ["error", "error"]
    assert all("did not answer within 0.5 s" in row.error for row in rows)
    with pytest.raises(RemoteEnvError, match="did not answer"):
        env = agentgym.make(REVERSE, rubric_wait=30.0, timeout=0.2)
        env.reset(seed=0)
        env.step("<answer>x</answer>")


@pytest.mark.parametrize(("env_id", "kwargs", "message"), [
    ("verifiers:no_such_env", {}, "No verifiers environment 'no_such_env' here"),
    (REVERSE, {"num_exmples": 3}, "takes no argument 'num_exmples'; it takes num_examples"),
    (REVERSE, {"split": "test"}, "split must be train or eval"),
    ("verifier:vf_reverse_text", {}, "Did you mean 'verifiers:vf_reverse_text'"),
])
def test_a_bad_id_or_argument_is_one_line(env_id: str, kwargs: dict, message: str) -> None:
    with pytest.raises(agentgym.AgentGymError, match=message) as caught:
        agentgym.make(env_id, **kwargs)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, ConfigError) or "Did you mean" in message
