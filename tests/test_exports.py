"""The public names are the ones we mean to export (httpx's test_exported_members)."""

from __future__ import annotations

import importlib

import pytest

import agentgym

MODULES = ["agentgym", "agentgym.core", "agentgym.errors", "agentgym.moves", "agentgym.parsing",
           "agentgym.registry", "agentgym.spaces", "agentgym.vector"]


@pytest.mark.parametrize("name", MODULES)
def test_all_lists_exactly_the_public_names(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        attr for attr, value in vars(module).items()
        if not attr.startswith("_")
        and getattr(value, "__module__", name) == name
        and not isinstance(value, type(importlib))
    }
    assert public <= set(module.__all__) | {"annotations"}
    assert all(hasattr(module, attr) for attr in module.__all__)


def test_top_level_api() -> None:
    assert set(agentgym.__all__) == {
        "AgentGymError", "EnvInfo", "Outcome", "TextEnv", "TextSpace", "__version__",
        "env_info", "extract_answer", "extract_boxed", "list_envs", "load_plugins",
        "make", "make_vec", "register", "split_moves",
    }


def test_every_error_derives_from_the_root() -> None:
    from agentgym import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, (errors.AgentGymError, errors.AgentGymWarning)), name
