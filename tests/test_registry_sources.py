"""Sources of envs from outside: SCHEME:REST ids in the registry (agentgym.registry.register_source)."""

from __future__ import annotations

import pytest

import agentgym
from agentgym.errors import ConfigError, DuplicateEnvError, UnknownEnvError
from agentgym.registry import env_info, list_sources, register_source


def test_a_source_id_has_the_sources_metadata_and_its_argument() -> None:
    info = env_info("openenv:http://127.0.0.1:9")
    assert (info.id, info.family, info.source, info.extra) == ("openenv:http://127.0.0.1:9", "openenv", "openenv", "interop")
    assert info.kwargs == {"base_url": "http://127.0.0.1:9"} and "remote" in info.tags
    assert [source.scheme for source in list_sources()] == ["openenv", "rm", "verifiers"]


def test_make_fills_the_argument_from_the_id_and_refuses_it_twice() -> None:
    env = agentgym.make("openenv:http://127.0.0.1:9/")
    assert env.unwrapped.base_url == "http://127.0.0.1:9"
    with pytest.raises(ConfigError, match="sets base_url already"):
        agentgym.make("openenv:http://127.0.0.1:9", base_url="http://127.0.0.1:10")


def test_ids_that_are_not_sources_keep_their_meaning() -> None:
    with pytest.raises(UnknownEnvError, match="No environment registered as 'nosuch:thing'"):
        env_info("nosuch:thing")
    assert env_info("Sokoban-LLM-v0").source == "agentgym"


def test_a_source_is_registered_once() -> None:
    source = list_sources()[0]
    assert register_source(source.scheme, source.gym_id, source.entry_point, argument=source.argument,
                           description=source.description, example=source.example, tags=source.tags,
                           extra=source.extra) == source
    with pytest.raises(DuplicateEnvError, match="registered already"):
        register_source("openenv", "Other-LLM-v0", "x:Y", argument="url", description="d", example="e")
    with pytest.raises(ConfigError, match="lower-case"):
        register_source("Open Env", "Other-LLM-v0", "x:Y", argument="url", description="d", example="e")
