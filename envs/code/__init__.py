"""The code family: write code that passes hidden tests, run in the sandbox.

``Code-LLM-v0`` (:class:`CodeEnv`) plays problems of the built-in set
(:func:`builtin_problems`, 42 problems written for agentgym) or of a dataset
read by :func:`load_problems` (MBPP, APPS, ``prompt``/``tests`` splits).
"""

from __future__ import annotations

from agentgym.envs.code.env import CodeEnv
from agentgym.envs.code.extract import extract_code
from agentgym.envs.code.loaders import load_problems
from agentgym.envs.code.problems import Problem, TestCase, builtin_problems
from agentgym.envs.code.runner import Evaluation, TestOutcome, evaluate

__all__ = [
    "CodeEnv",
    "Evaluation",
    "Problem",
    "TestCase",
    "TestOutcome",
    "builtin_problems",
    "evaluate",
    "extract_code",
    "load_problems",
]
