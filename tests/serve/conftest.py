"""Servers for the serving tests: the built-in one, and real vLLM when it is installed.

``server`` is parametrised over both, so ``test_conformance.py`` runs the same
checks against each; the vLLM case is marked ``vllm`` and skipped when no
interpreter can import vLLM (``scripts/setup_vllm.sh`` makes one). Every
server binds 127.0.0.1 on a free port and is stopped when its scope ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from serve_helpers import MAX_MODEL_LEN, MODEL_NAME, RunningServer

from agentgym.serve.launch import BuiltinServer


@pytest.fixture(scope="session")
def tokenizer(tiny_model: str) -> Any:
    """The tiny model's tokenizer, to build token-id prompts and decode answers."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="session", params=["builtin", pytest.param("vllm", marks=pytest.mark.vllm)])
def server(request: pytest.FixtureRequest, tiny_model: str) -> Iterator[RunningServer]:
    """A running OpenAI-compatible server with the tiny model, built-in or vLLM."""
    if request.param == "builtin":
        with BuiltinServer(tiny_model, served_model_name=MODEL_NAME, max_model_len=MAX_MODEL_LEN) as built:
            yield RunningServer("builtin", built.url, MODEL_NAME, MAX_MODEL_LEN, api_key=built.api_key)
        return
    real = request.getfixturevalue("real_vllm")  # the session's (tests/conftest.py)
    yield RunningServer("vllm", real.url, real.model_name, real.max_model_len)


@pytest.fixture(scope="module")
def keyed_server(tiny_model: str) -> Iterator[RunningServer]:
    """A built-in server of its own (its weights change in tests), wanting an API key."""
    with BuiltinServer(tiny_model, served_model_name=MODEL_NAME, max_model_len=MAX_MODEL_LEN,
                       api_key="sesame") as built:
        yield RunningServer("builtin", built.url, MODEL_NAME, MAX_MODEL_LEN, api_key="sesame")
