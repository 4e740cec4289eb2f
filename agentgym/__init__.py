"""agentgym: a Gymnasium-compatible gym for training LLM agents.

>>> import gymnasium as gym
>>> import agentgym
>>> env = gym.make("Sokoban-LLM-v0")
>>> observation, info = env.reset(seed=0)
>>> observation, reward, terminated, truncated, info = env.step("<answer>Up</answer>")

Importing agentgym registers every built-in env and every env that installed
packages declare in the ``agentgym.envs`` entry-point group.
"""

from __future__ import annotations

from agentgym.core import Outcome, TextEnv
from agentgym.errors import AgentGymError
from agentgym.parsing import extract_answer, extract_boxed, split_moves
from agentgym.registry import EnvInfo, env_info, list_envs, load_plugins, make, register
from agentgym.spaces import TextSpace
from agentgym.vector import make_vec

import agentgym.envs  # noqa: E402,F401  (registers the built-in envs; imports no env code)

__version__ = "0.1.0"

__all__ = [
    "AgentGymError",
    "EnvInfo",
    "Outcome",
    "TextEnv",
    "TextSpace",
    "__version__",
    "env_info",
    "extract_answer",
    "extract_boxed",
    "list_envs",
    "load_plugins",
    "make",
    "make_vec",
    "register",
    "split_moves",
]

load_plugins()
