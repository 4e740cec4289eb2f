"""A rollout through the real env manager, with a policy that uses the python tool and then answers."""

from __future__ import annotations

import asyncio
import re

from agentgym.rollout import ScriptedPolicy
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.rows import TrajectoryRow
from tool_envs import ECHO_PYTHON_ID


def use_python_then_answer(observation: str) -> str:
    """Compute the answer with the tool, then answer with what the tool printed."""
    printed = re.search(r'<tool_response name="python">\n(.*?)\n</tool_response>', observation, re.DOTALL)
    if printed:
        return f"<answer>{printed.group(1)}</answer>"
    secret = re.search(r"secret word is (\w+)", observation).group(1)  # type: ignore[union-attr]
    # The answer only comes from running the code: the secret reversed, then reversed back.
    return f"<python>\nword = {secret[::-1]!r}\nprint(word[::-1].upper())\n</python>"


def rollout(config: RolloutConfig) -> list[TrajectoryRow]:
    return asyncio.run(EnvManager(config, ScriptedPolicy(use_python_then_answer)).run())


def test_a_rollout_calls_the_python_tool_then_answers() -> None:
    config = RolloutConfig(env_id=ECHO_PYTHON_ID, episodes=4, group_size=2, max_turns=2)
    rows = rollout(config)
    assert len(rows) == 4
    for row in rows:
        assert row.error is None
        assert row.success and row.terminated and row.stop_reason == "terminated"
        assert row.num_turns == 2 and row.turn_rewards == [0.0, 1.0]  # a tool turn, then the answer
        system, task, call, response, answer, verdict = row.messages
        assert "# Tools" in system.content and "<python>code</python>" in system.content
        assert call.role == "assistant" and call.content.startswith("<python>")
        secret = re.search(r"secret word is (\w+)", task.content).group(1)  # type: ignore[union-attr]
        assert response.content == f'<tool_response name="python">\n{secret.upper()}\n</tool_response>'
        assert answer.content == f"<answer>{secret.upper()}</answer>" and verdict.content == "Right."


def test_tool_turns_do_not_use_the_envs_turns() -> None:
    # One env turn: the tool turn before it is free, so the answer still counts.
    config = RolloutConfig(env_id=ECHO_PYTHON_ID, episodes=1, max_turns=1)
    (row,) = rollout(config)
    assert row.success and row.num_turns == 2 and row.invalid_actions == 0


def test_tool_output_is_recorded_as_env_tokens(tiny_model: str) -> None:
    from transformers import AutoTokenizer

    from agentgym.rollout.chat import ChatRenderer

    renderer = ChatRenderer(AutoTokenizer.from_pretrained(tiny_model))
    config = RolloutConfig(env_id=ECHO_PYTHON_ID, episodes=1, max_turns=2, max_context_tokens=8192)
    manager = EnvManager(config, ScriptedPolicy(use_python_then_answer), renderer=renderer)
    (row,) = asyncio.run(manager.run())
    assert row.success and row.error is None
    decode = renderer.tokenizer.decode
    sampled = [i for i, m in zip(row.completion_ids, row.completion_mask, strict=True) if m]
    from_env = [i for i, m in zip(row.completion_ids, row.completion_mask, strict=True) if not m]
    # The model is trained on its call and its answer, never on what the tool printed.
    assert "<python>" in decode(sampled) and "<answer>" in decode(sampled)
    assert '<tool_response name="python">' in decode(from_env)
    assert "<tool_response" not in decode(sampled)
    assert decode(row.prompt_ids).count("# Tools") == 1
