"""Envs with tools, registered for the tool tests (gym.make and the rollout manager build envs by id)."""

from __future__ import annotations

import agentgym
from agentgym.tools import FunctionTool, PythonTool, ToolWrapper
from fakes import EchoEnv

__all__ = ["ECHO_PYTHON_ID", "ECHO_TOOLS_ID", "echo_with_peek", "echo_with_python", "peek"]

ECHO_TOOLS_ID = "EchoTools-LLM-v0"
ECHO_PYTHON_ID = "EchoPython-LLM-v0"


def peek(word: str) -> str:
    """Spell a word backwards."""
    return word[::-1]


def echo_with_peek(max_calls: int = 2, **env_kwargs: object) -> ToolWrapper:
    return ToolWrapper(EchoEnv(**env_kwargs), [FunctionTool(peek)], max_calls=max_calls)  # type: ignore[arg-type]


def echo_with_python(max_calls: int = 3, **env_kwargs: object) -> ToolWrapper:
    """EchoEnv with the python tool over the local sandbox (the tests' choice, not Docker)."""
    from agentgym.sandbox import LocalSandbox

    return ToolWrapper(EchoEnv(**env_kwargs), [PythonTool(LocalSandbox(), timeout=20)],  # type: ignore[arg-type]
                       max_calls=max_calls)


agentgym.register(ECHO_TOOLS_ID, "tool_envs:echo_with_peek", family="test",
                  description="Echo a secret word, with a tool that spells words backwards.")
agentgym.register(ECHO_PYTHON_ID, "tool_envs:echo_with_python", family="test",
                  description="Echo a secret word, with the python tool.")
