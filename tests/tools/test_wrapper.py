from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given
from hypothesis import strategies as st

import agentgym
from agentgym.errors import ConfigError, EnvUsageError, ResetNeeded
from agentgym.tools import FunctionTool, Tool, ToolWrapper
from fakes import EchoEnv
from tool_envs import ECHO_TOOLS_ID


def peek(word: str) -> str:
    """Spell a word backwards."""
    return word[::-1]


def shout(text: str, times: int = 1) -> str:
    """Write a text in capitals."""
    return text.upper() * times


def wrapped(max_calls: int = 3, **options: object) -> ToolWrapper:
    return ToolWrapper(EchoEnv(max_turns=2), [FunctionTool(peek), FunctionTool(shout)],
                       max_calls=max_calls, **options)  # type: ignore[arg-type]


def started(env: ToolWrapper, seed: int = 0) -> str:
    """Reset and return the secret word of the episode."""
    observation, info = env.reset(seed=seed)
    assert info == {"turn": 0, "success": False, "tool_calls": 0}
    return observation.split("secret word is ")[1].split(".")[0]


def test_a_tool_turn_returns_the_output_and_the_episode_goes_on() -> None:
    env = wrapped()
    secret = started(env)
    observation, reward, terminated, truncated, info = env.step("Let me see. <peek>stone</peek>")
    assert observation == '<tool_response name="peek">\nenots\n</tool_response>'
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["action_valid"] is True and info["success"] is False
    assert info["turn"] == 0  # the env has not played a turn
    assert info["tool_turn"] is True and info["tool_calls"] == 1
    assert info["tool_results"] == [{"name": "peek", "status": "ok", "arguments": {"word": "stone"},
                                     "output": "enots"}]
    observation, reward, terminated, _, info = env.step(f"<answer>{secret}</answer>")
    assert (observation, reward, terminated) == ("Right.", 1.0, True)
    assert info["success"] is True and info["turn"] == 1 and info["tool_calls"] == 1
    assert "tool_turn" not in info


def test_several_calls_in_one_action_run_in_order_in_both_formats() -> None:
    env = wrapped()
    started(env)
    call = json.dumps({"name": "shout", "arguments": {"text": "ab", "times": 2}})
    observation, *_, info = env.step(f"<peek>xy</peek> and <tool_call>{call}</tool_call>")
    assert observation == ('<tool_response name="peek">\nyx\n</tool_response>\n'
                           '<tool_response name="shout">\nABAB\n</tool_response>')
    assert info["tool_calls"] == 2


def test_an_answer_written_next_to_a_tool_call_is_not_read() -> None:
    env = wrapped()
    secret = started(env)
    _, reward, terminated, _, info = env.step(f"<peek>a</peek><answer>{secret}</answer>")
    assert (reward, terminated, info["tool_turn"]) == (0.0, False, True)


def test_a_malformed_call_is_feedback_with_the_envs_format_penalty() -> None:
    env = wrapped()
    started(env)
    observation, reward, terminated, _, info = env.step('<tool_call>{"name": "peek"}</tool_call>')
    assert observation == ("<tool_error>peek needs the argument 'word' (string).</tool_error>")
    assert reward == -0.5  # EchoEnv's format_penalty
    assert info["action_valid"] is False and not terminated
    assert info["tool_results"][0]["status"] == "invalid"
    env = wrapped(format_penalty=0.2)
    started(env)
    assert env.step("<tool_call>oops</tool_call>")[1] == -0.2


def test_calls_past_the_cap_are_refused_then_tool_actions_go_to_the_env() -> None:
    env = wrapped(max_calls=2)
    started(env)
    observation, reward, _, _, info = env.step("<peek>a</peek><peek>b</peek><peek>c</peek>")
    assert observation.count("<tool_response") == 2
    refusal = "Not run: the 2 tool calls of this episode are used up. Answer now."
    assert f"<tool_error>{refusal}</tool_error>" in observation
    assert observation.endswith("You have used all 2 tool calls: your next message must be your answer.")
    assert [r["status"] for r in info["tool_results"]] == ["ok", "ok", "refused"]
    assert (reward, info["action_valid"]) == (-0.5, False)
    # Calls spent: the next tool action is the env's to judge (an unreadable answer here).
    observation, reward, _, _, info = env.step("<peek>d</peek>")
    assert observation.startswith("[Your tool calls were not run: all 2 tool calls of this episode are used")
    assert observation.endswith("Write <answer>word</answer>.")
    assert (reward, info["action_valid"], info["turn"], info["tool_calls"]) == (-0.5, False, 1, 2)
    assert "tool_turn" not in info


def test_an_agent_that_only_calls_tools_ends_within_calls_plus_turns() -> None:
    env = wrapped(max_calls=3)
    started(env)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step("<peek>again</peek>")
        steps, done = steps + 1, terminated or truncated
    assert steps == 3 + 2  # max_calls + EchoEnv(max_turns=2)
    assert truncated
    with pytest.raises(ResetNeeded, match=r"ToolWrapper.step\(\) needs reset\(\) first"):
        env.step("<peek>more</peek>")


def test_reset_gives_the_calls_back() -> None:
    env = wrapped(max_calls=1)
    started(env)
    env.step("<peek>a</peek>")
    started(env, seed=1)
    assert env.step("<peek>a</peek>")[4]["tool_results"][0]["status"] == "ok"


def test_a_long_output_keeps_its_start_and_end() -> None:
    env = wrapped(max_output_chars=200)
    started(env)
    observation, *_ = env.step(f"<shout>{'a' * 1000 + 'end'}</shout>")
    output = observation.split("\n")[1:-1]
    assert output[0].startswith("AAA") and output[-1].endswith("AEND")
    assert "[... 803 characters cut ...]" in observation
    assert len("\n".join(output)) <= 200


def test_instructions_add_the_tools_and_both_formats() -> None:
    env = wrapped(max_calls=5)
    text = env.instructions
    assert text.startswith(EchoEnv(max_turns=2).instructions)
    assert "<peek>word</peek>" in text and "<shout>text</shout>" in text
    assert '<tool_call>{"name": "peek", "arguments": {"word": "..."}}</tool_call>' in text
    assert "at most 5 tool calls" in text and "do not count towards the turn limit" in text
    for tool in env.tools.values():
        assert json.dumps(tool.openai_schema()) in text
    # What the rollout manager reads, through the wrappers gym.make adds too.
    outer = gym.wrappers.OrderEnforcing(gym.wrappers.PassiveEnvChecker(env))
    assert outer.get_wrapper_attr("instructions") == text
    assert outer.unwrapped.instructions != text  # the bare env's stay as they were


def test_misuse_raises_with_the_fix() -> None:
    env = wrapped()
    with pytest.raises(ResetNeeded, match=r"needs reset\(\) first"):
        env.step("<peek>a</peek>")
    started(env)
    with pytest.raises(EnvUsageError, match="Actions are text: step\\(\\) needs a str, got int"):
        env.step(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(("tools", "options", "expected"), [
    ([], {}, "ToolWrapper needs a list of at least one Tool"),
    ([FunctionTool(peek), FunctionTool(shout, name="PEEK")], {}, "Two tools are named 'PEEK'"),
    ([FunctionTool(peek, name="tool_call")], {}, "'tool_call' is taken"),
    ([peek], {}, "ToolWrapper takes Tool instances, got function; wrap a function with FunctionTool"),
    ([FunctionTool(peek)], {"max_calls": 0}, "max_calls must be at least 1"),
    ([FunctionTool(peek)], {"format_penalty": -1.0}, "format_penalty must be at least 0"),
])
def test_bad_configuration_is_refused(tools: list[Tool], options: dict, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        ToolWrapper(EchoEnv(), tools, **options)


def test_close_closes_the_tools_and_the_env() -> None:
    closed: list[str] = []

    class Closing(FunctionTool):
        def close(self) -> None:
            closed.append(self.name)

    env = ToolWrapper(EchoEnv(), [Closing(peek), Closing(shout)])
    env.close()
    env.close()
    assert closed == ["peek", "shout", "peek", "shout"]


@pytest.mark.filterwarnings("ignore:.*is different from the unwrapped version")
def test_check_env_passes_on_a_registered_env_with_tools() -> None:
    env = gym.make(ECHO_TOOLS_ID)
    check_env(env)
    env.close()


@pytest.mark.filterwarnings("ignore:.*is different from the unwrapped version")
def test_check_env_passes_on_an_env_wrapped_by_hand() -> None:
    env = ToolWrapper(gym.make("Echo-LLM-v0"), [FunctionTool(peek)])
    # The render and close checks rebuild the env from env.spec, which a wrapper
    # made by hand supports only by recording its arguments, and tools holding a
    # sandbox cannot be copied; a registered env with tools passes them (above).
    check_env(env, skip_render_check=True, skip_close_check=True)
    env.close()


@given(actions=st.lists(st.one_of(
    st.text(max_size=60),
    st.sampled_from(["<peek>x</peek>", "<peek></peek>", "<tool_call>{</tool_call>", "<answer>stone</answer>",
                     '<tool_call>{"name": "shout", "arguments": {"text": "a", "times": 99}}</tool_call>',
                     "<shout>" + "z" * 5000]),
), min_size=1, max_size=8))
def test_any_text_gives_a_valid_step(actions: list[str]) -> None:
    env = wrapped(max_calls=2, max_output_chars=500)
    env.reset(seed=0)
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        assert observation in env.observation_space and np.isfinite(reward)
        assert {"action_valid", "success", "turn", "tool_calls"} <= info.keys()
        assert info["tool_calls"] <= 2
        if terminated or truncated:
            env.reset(seed=0)


def test_a_registered_env_with_tools_is_made_by_id() -> None:
    env = agentgym.make(ECHO_TOOLS_ID, max_turns=4)
    assert env.get_wrapper_attr("max_calls") == 2
    assert "# Tools" in env.get_wrapper_attr("instructions")
    env.reset(seed=0)
    assert env.step("<peek>ab</peek>")[0] == '<tool_response name="peek">\nba\n</tool_response>'
    env.close()
