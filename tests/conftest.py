"""Shared fixtures: a fake env registered once for the core tests."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import agentgym
from agentgym.core import Outcome, TextEnv
from agentgym.parsing import extract_answer, normalize


# Models the tests build (the tiny model) go to one cache per machine, never ~/.cache.
os.environ.setdefault("AGENTGYM_CACHE", str(Path(tempfile.gettempdir()) / "agentgym-test-cache"))

# Property tests: quick in CI; `pytest --hypothesis-profile fuzz` digs deeper.
settings.register_profile("ci", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=3000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


class EchoEnv(TextEnv):
    """The smallest env: say the secret word (drawn from the seed) to win."""

    WORDS = ("apple", "river", "stone", "cloud")

    def __init__(self, max_turns: int = 3, format_penalty: float = 0.5,
                 render_mode: str | None = None) -> None:
        super().__init__(max_turns=max_turns, format_penalty=format_penalty, render_mode=render_mode)
        self.secret = ""

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        self.secret = self.WORDS[int(self.np_random.integers(len(self.WORDS)))]
        return f"The secret word is {self.secret}. Say it."

    def _play(self, action: str) -> Outcome:
        answer = extract_answer(action)
        if answer is None:
            return Outcome("Write <answer>word</answer>.", action_valid=False)
        won = normalize(answer) == self.secret
        return Outcome("Right." if won else "Wrong.", float(won), terminated=won, success=won)

    def _describe(self) -> str:
        return "Repeat the secret word inside <answer></answer>."

    def render_text(self) -> str:
        return f"secret={self.secret} turn={self.turn}"


ECHO_ID = "Echo-LLM-v0"
agentgym.register(ECHO_ID, "conftest:EchoEnv", family="test", description="Echo a secret word.")


@pytest.fixture
def echo_env() -> EchoEnv:
    return EchoEnv()


@pytest.fixture(scope="session")
def tiny_model() -> str:
    """Folder of the tiny local model (built once per machine, then cached)."""
    from agentgym.models import resolve_model

    return resolve_model("tiny")
