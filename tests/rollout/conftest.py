"""Fixtures for rollout tests: the tiny model's tokenizer and a stub server that speaks it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentgym.rollout.chat import ChatRenderer
from agentgym.serve.stub import StubServer


@pytest.fixture(scope="session")
def renderer(tiny_model: str) -> ChatRenderer:
    from transformers import AutoTokenizer

    return ChatRenderer(AutoTokenizer.from_pretrained(tiny_model))


@pytest.fixture(scope="session")
def up_ids(renderer: ChatRenderer) -> list[int]:
    """What the stub 'samples': a Sokoban move in the tiny tokenizer, ending with eos."""
    return renderer.tokenizer.encode("<answer>Up</answer>", add_special_tokens=False) + [renderer.eos_id]


@pytest.fixture(scope="session")
def stub(up_ids: list[int]) -> Iterator[StubServer]:
    with StubServer(delay=0.005, completion_ids=up_ids) as server:
        yield server
