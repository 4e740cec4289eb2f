"""A verifiers tool environment (multi-turn), as verifiers documents them: add with a tool.

A ``ToolEnv`` with one Python function as its tool: the model may call ``add`` any number
of times, then answers; the rubric checks the final answer. Rows are made here.
"""

from __future__ import annotations

import verifiers as vf
from datasets import Dataset


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer

    Returns:
        their sum
    """
    return a + b


def load_environment(num_examples: int = 6, max_turns: int = 4) -> vf.Environment:
    rows = [{"question": f"What is {17 * i + 5} + {29 * i + 8}? Use the add tool.",
             "answer": str(46 * i + 13)} for i in range(num_examples)]
    parser = vf.XMLParser(["answer"], answer_field="answer")

    def correct_answer(completion: vf.Messages, answer: str, **kwargs: object) -> float:
        return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

    return vf.ToolEnv(
        dataset=Dataset.from_list(rows),
        tools=[add],
        max_turns=max_turns,
        system_prompt="Solve the sum. Give the result inside <answer>...</answer>.",
        parser=parser,
        rubric=vf.Rubric(funcs=[correct_answer], parser=parser),
    )
