"""Hostile text through every registered env: no exception, UTF-8 out, a huge action cut.

Surrogates, control characters, NUL and a 10 MB action, stepped through
``gym.make`` (so the tool-wrapped envs go through their :class:`ToolWrapper`).
How fast a huge action steps is in ``benchmarks/bench_envs.py``, not here.
"""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentgym
from agentgym.core import MAX_ACTION_CHARS
from agentgym.errors import SandboxUnavailable

ENV_IDS = [info.id for info in agentgym.list_envs() if info.family != "test"]
HUGE = 10_000_000


def _hostile_actions(env: gym.Env) -> dict[str, str]:
    """What a model (or a broken client) might send, written in and out of the env's format."""
    fmt = env.unwrapped.format_action
    return {
        "lone high surrogate": "\ud800",
        "lone low surrogate in the format": fmt("\udfff"),
        "surrogates around a move": fmt("\ud800 1 \udfff"),
        "boxed surrogate": "\\boxed{\ud800}",
        "python call with a surrogate": "<python>print(1) # \ud800</python>",
        "search with a surrogate": "<search>\ud800 born</search>",
        # JSON spells a lone surrogate in plain ASCII: the tool wrapper decodes it.
        "JSON tool call with an escaped surrogate": (
            '<tool_call>{"name": "search", "arguments": {"query": "\\ud800"}}</tool_call>'),
        "NUL": "\x00",
        "NUL in the format": fmt("\x00"),
        "control characters": "\x01\x02\x1b[31m\x7f\x08\r\x0c\x1c\x85",
        "control characters in the format": fmt("\x1b[2J\x07"),
        # As long as an action is read, and built so that a parser that backtracks or
        # rescans would take seconds to minutes (each of these once did, or could).
        "thousands of open boxes": "\\boxed{" * (MAX_ACTION_CHARS // 7),
        "thousands of opening tags": "<answer>" * (MAX_ACTION_CHARS // 8),
        "one long word in the format": fmt("reveal" * (MAX_ACTION_CHARS // 7)),
        "filler words in the format": fmt("- " * (MAX_ACTION_CHARS // 3)),
        "open parentheses in the format": fmt("(" * (MAX_ACTION_CHARS // 2)),
        "tool calls left open": "<tool_call>{" * (MAX_ACTION_CHARS // 12),
    }


def _huge_actions(env: gym.Env) -> dict[str, str]:
    fmt = env.unwrapped.format_action
    return {
        "10 MB of one letter": "x" * HUGE,
        "10 MB inside the format": fmt("a" * HUGE),
        "10 MB of numbers inside the format": fmt("1 " * (HUGE // 2)),
        "10 MB of opening tags": "<answer>" * (HUGE // 8),
    }


def _step(env: gym.Env, action: str) -> tuple[str, float, dict]:
    env.reset(seed=0)
    try:
        observation, reward, _, _, info = env.step(action)
    except SandboxUnavailable as exc:  # no sandbox on this machine: not the env's doing
        pytest.skip(f"no sandbox here: {exc}")
    return observation, float(reward), info


def _check(observation: str, reward: float, info: dict, label: str) -> None:
    observation.encode("utf-8")  # raises if a surrogate got through
    assert observation.strip(), label
    assert math.isfinite(reward), label
    assert isinstance(info["action_valid"], bool), label
    assert isinstance(info["success"], bool), label


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_hostile_text_steps_and_the_observation_is_utf8(env_id: str) -> None:
    env = gym.make(env_id, disable_env_checker=True)
    for label, action in _hostile_actions(env).items():
        observation, reward, info = _step(env, action)
        _check(observation, reward, info, label)
        assert "action_cut" not in info, label
        for value in info.values():  # info built from the action is valid UTF-8 too
            if isinstance(value, str):
                value.encode("utf-8")
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_a_10_mb_action_is_cut_with_a_note(env_id: str) -> None:
    env = gym.make(env_id, disable_env_checker=True)
    read = env.unwrapped.max_action_chars  # 65,536 unless the env reads more (Code-LLM-v0)
    for label, action in _huge_actions(env).items():
        observation, reward, info = _step(env, action)
        _check(observation, reward, info, label)
        assert info["action_cut"] == len(action), label
        assert (f"[Your action was {len(action):,} characters long; only the first {read:,} "
                "were read.]") in observation, label
    env.close()


def test_the_tool_wrapper_hands_tools_valid_utf8() -> None:
    """A lone surrogate reaches the search tool as U+FFFD, from the text or from JSON."""
    env = gym.make("SearchQA-LLM-v0", disable_env_checker=True)
    env.reset(seed=0)
    for action in ("<search>\ud800 born</search>",
                   '<tool_call>{"name": "search", "arguments": {"query": "\\ud800 born"}}</tool_call>'):
        observation, _, _, _, info = env.step(action)
        observation.encode("utf-8")
        assert info["tool_results"][0]["arguments"] == {"query": "\ufffd born"}
    env.close()


def test_the_tool_wrapper_cuts_a_huge_tool_call_before_running_it() -> None:
    env = gym.make("SearchQA-LLM-v0", disable_env_checker=True)
    env.reset(seed=0)
    observation, _, _, _, info = env.step("<search>" + "paris " * (HUGE // 6))
    assert info["tool_turn"] is True and info["action_cut"] == 8 + 6 * (HUGE // 6)
    assert observation.startswith(f"[Your action was {info['action_cut']:,} characters long; "
                                  f"only the first {MAX_ACTION_CHARS:,} were read.]")
    assert len(info["tool_results"][0]["arguments"]["query"]) == MAX_ACTION_CHARS - len("<search>")
    env.close()


# Random text built from what parsers look for and what breaks encoders.
_PIECES = st.sampled_from(["<answer>", "</answer>", "\\boxed{", "}", "||", "<search>", "</search>",
                           "<python>", "</python>", "reveal", "row", "1", "9", " ", "\n", ","])
_ANY_CHARACTER = st.characters(codec=None, exclude_categories=())  # surrogates and controls too
_HOSTILE_TEXT = st.lists(st.one_of(_PIECES, _ANY_CHARACTER, st.text(_ANY_CHARACTER, max_size=20)),
                         max_size=30).map("".join)


@pytest.mark.parametrize("env_id", ["Sudoku-LLM-v0", "Minesweeper-LLM-v0", "Math-LLM-v0",
                                    "SearchQA-LLM-v0"])
@settings(max_examples=40)
@given(actions=st.lists(_HOSTILE_TEXT, min_size=1, max_size=3))
def test_random_hostile_text_steps(env_id: str, actions: list[str]) -> None:
    env = gym.make(env_id, disable_env_checker=True)
    env.reset(seed=0)
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        _check(observation, float(reward), info, repr(action))
        if terminated or truncated:
            env.reset(seed=0)
    env.close()
