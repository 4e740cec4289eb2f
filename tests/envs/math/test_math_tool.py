"""MathTool-LLM-v0: the math env with the python tool, through ToolWrapper."""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium as gym
import pytest

from agentgym.envs.math.tool import make_math_tool_env
from agentgym.sandbox import LocalSandbox
from agentgym.tools import ToolWrapper

PROBLEM = {"question": "What is 3/7 + 2/9?", "answer": "41/63"}


@pytest.fixture
def sandbox() -> Iterator[LocalSandbox]:
    with LocalSandbox() as box:
        yield box


def test_the_agent_computes_with_python_then_answers(sandbox: LocalSandbox) -> None:
    env = make_math_tool_env(sandbox=sandbox, python_timeout=20)
    assert isinstance(env, ToolWrapper)
    env.reset(seed=0, options={"problem": PROBLEM})
    code = "from fractions import Fraction as F\nprint(F(3, 7) + F(2, 9))"
    observation, reward, terminated, _, info = env.step(f"<python>{code}</python>")
    assert "41/63" in observation and (reward, terminated) == (0.0, False)
    assert info["tool_turn"] and info["tool_calls"] == 1
    _, reward, terminated, _, info = env.step(r"So the sum is \boxed{\frac{41}{63}}.")
    assert (reward, terminated, info["success"]) == (1.0, True, True)


def test_made_by_id_with_the_math_options_and_the_tools_in_the_instructions() -> None:
    env = gym.make("MathTool-LLM-v0", kinds=["linear"], levels=2, max_turns=2, max_calls=3)
    observation, _ = env.reset(seed=1)
    assert observation.startswith("Solve for x:")
    instructions = env.get_wrapper_attr("instructions")
    assert "python" in instructions and "at most 3 tool calls" in instructions
    assert env.unwrapped.max_turns == 2
    env.close()


def test_an_unknown_option_is_not_swallowed() -> None:
    with pytest.raises(TypeError, match="no_such_option"):
        make_math_tool_env(no_such_option=1)
