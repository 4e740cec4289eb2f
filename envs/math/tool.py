"""``MathTool-LLM-v0``: :class:`~agentgym.envs.math.env.MathEnv` with a python tool.

The agent may run Python (``<python>print(3/7 + 2/9)</python>`` or an
OpenAI-style ``<tool_call>``) in the sandbox before it answers. Tool turns do
not use up answer turns; ``max_calls`` caps them per episode (see
:class:`~agentgym.tools.ToolWrapper`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentgym.tools import PythonTool, ToolWrapper

from agentgym.envs.math.env import MathEnv

if TYPE_CHECKING:
    from agentgym.sandbox import Sandbox

__all__ = ["make_math_tool_env"]


def make_math_tool_env(*, max_calls: int = 4, python_timeout: float | None = 10.0,
                       sandbox: Sandbox | None = None, **math_options: Any) -> ToolWrapper:
    """``ToolWrapper(MathEnv(**math_options), [PythonTool(sandbox, timeout=python_timeout)])``.

    ``math_options`` are :class:`MathEnv`'s arguments (an unknown one is a
    ``TypeError`` there). ``sandbox`` is where the code runs (its owner closes
    it); None: the process's shared sandbox, Docker when its image is built,
    else the local fallback.
    """
    return ToolWrapper(MathEnv(**math_options), [PythonTool(sandbox, timeout=python_timeout)],
                       max_calls=max_calls)
