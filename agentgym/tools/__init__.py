"""Tools for agents, and the wrapper that gives any env tools.

>>> from agentgym.tools import PythonTool, ToolWrapper
>>> import agentgym
>>> env = ToolWrapper(agentgym.make("Sokoban-LLM-v0"), [PythonTool()])   # doctest: +SKIP

A :class:`Tool` is a name, a JSON schema of its arguments and a call that
returns text; :class:`ToolWrapper` finds tool calls in an action (``<tool_call>``
JSON or ``<name>...</name>`` tags, see :mod:`agentgym.tools.calls`), runs them
and returns their output as the next observation.
"""

from __future__ import annotations

from agentgym.tools.base import FunctionTool, Tool, check_arguments
from agentgym.tools.calls import CallProblem, ParsedCalls, ToolCall, parse_tool_calls
from agentgym.tools.python import PythonTool
from agentgym.tools.wrapper import ToolWrapper, describe_tools

__all__ = [
    "CallProblem",
    "FunctionTool",
    "ParsedCalls",
    "PythonTool",
    "Tool",
    "ToolCall",
    "ToolWrapper",
    "check_arguments",
    "describe_tools",
    "parse_tool_calls",
]
