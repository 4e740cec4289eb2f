"""A verifiers single-turn environment, as verifiers documents them: reverse a text.

verifiers' own ``reverse_text`` example (a ``SingleTurnEnv`` whose rubric scores the
answer's similarity to the reversed text), on a few rows made here instead of a hub data
set. ``vf.load_environment("vf_reverse_text")`` imports this module (tests put its folder
on the path). Its reward function is async, as verifiers allows.
"""

from __future__ import annotations

import asyncio
import difflib

import verifiers as vf
from datasets import Dataset

WORDS = ["gymnasium", "verifiers", "openenv", "rollout", "sokoban", "trainer", "sandbox", "agent"]
#: Beats of a clock a test runs on the rollout manager's event loop (see ``heartbeats``).
HEARTBEAT = [0]


async def _heard_beats(beats: int, limit: float = 20.0) -> bool:
    """Whether ``HEARTBEAT`` advanced ``beats`` times while this waited (at most ``limit`` s)."""
    start, waited = HEARTBEAT[0], 0.0
    while HEARTBEAT[0] < start + beats and waited < limit:
        await asyncio.sleep(0.01)
        waited += 0.01
    return HEARTBEAT[0] >= start + beats


def load_environment(num_examples: int = 8, rubric_wait: float = 0.0, heartbeats: int = 0) -> vf.Environment:
    """``rubric_wait``: seconds the rubric awaits (an async judge would) before scoring;
    ``heartbeats``: the rubric scores 0 unless the test's clock ticks that often meanwhile."""
    rows = [{"question": f"Reverse the text: {word}", "answer": word[::-1]}
            for word in (WORDS * 4)[:num_examples]]
    parser = vf.XMLParser(["answer"], answer_field="answer")

    async def reversed_text_similarity(completion: vf.Messages, answer: str, **kwargs: object) -> float:
        await asyncio.sleep(rubric_wait)
        if heartbeats and not await _heard_beats(heartbeats):
            return 0.0
        guess = parser.parse_answer(completion) or ""
        return difflib.SequenceMatcher(None, guess.strip(), answer).ratio()

    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(rows),
        system_prompt="Reverse the text, character by character. Give it inside <answer>...</answer>.",
        parser=parser,
        rubric=vf.Rubric(funcs=[reversed_text_similarity], parser=parser),
    )
