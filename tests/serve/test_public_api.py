"""The serving modules export what we mean them to, and only that (as tests/test_exports.py)."""

from __future__ import annotations

import importlib

import pytest

MODULES = ["agentgym.serve.app", "agentgym.serve.batch", "agentgym.serve.engine", "agentgym.serve.inputs",
           "agentgym.serve.kv",
           "agentgym.serve.launch", "agentgym.serve.protocol", "agentgym.serve.responses",
           "agentgym.serve.sampling", "agentgym.serve.scheduler", "agentgym.serve.text",
           "agentgym.serve.weights", "agentgym.cli.serve_cmd"]


@pytest.mark.parametrize("name", MODULES)
def test_all_lists_exactly_the_public_names(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        attr for attr, value in vars(module).items()
        if not attr.startswith("_")
        and getattr(value, "__module__", None) == name
        and not isinstance(value, type(importlib))
    }
    assert public <= set(module.__all__)
    assert all(hasattr(module, attr) for attr in module.__all__)


def test_the_engine_api() -> None:
    from agentgym.serve import engine, launch

    assert set(engine.__all__) == {"Engine", "EngineConfig", "Generation", "WeightUpdate"}
    assert set(launch.__all__) == {"BuiltinServer", "default_torch_threads", "free_port", "serve_builtin",
                                   "wait_for_health"}
