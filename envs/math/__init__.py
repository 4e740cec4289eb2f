r"""Maths environments: ``Math-LLM-v0`` and, with a python tool, ``MathTool-LLM-v0``.

Answers are checked by ``math-verify`` (``scripts/setup.sh math``):
:mod:`~agentgym.envs.math.verify`. Problems come from a seeded generator of
graded problems (:mod:`~agentgym.envs.math.problems`) or from a dataset
(:func:`~agentgym.envs.math.loading.load_math_dataset`, GSM8K and MATH styles).
"""

from __future__ import annotations

from agentgym.envs.math.env import MathEnv, read_answer
from agentgym.envs.math.loading import extract_reference, load_math_dataset
from agentgym.envs.math.problems import KINDS, LEVELS, MathProblem, generate_problem
from agentgym.envs.math.verify import Verdict, check_answer

__all__ = [
    "KINDS",
    "LEVELS",
    "MathEnv",
    "MathProblem",
    "Verdict",
    "check_answer",
    "extract_reference",
    "generate_problem",
    "load_math_dataset",
    "read_answer",
]
