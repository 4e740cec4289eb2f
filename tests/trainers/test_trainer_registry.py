"""The trainer registry: built-in trainers, "did you mean", and a third-party trainer plugged in."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from typing import Any

import pytest

from agentgym.errors import ConfigError, PluginLoadWarning, RegistryError, UnknownTrainerError
from agentgym.trainers import registry
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.registry import get_trainer, list_trainers, register_trainer, trainer_spec

CALLS: list[tuple[str, Any]] = []


def echo_trainer(config: TrainConfig, console: Any = None) -> dict[str, Any]:
    """A third-party trainer: records that it ran and what it was given."""
    CALLS.append((config.trainer, console))
    return {"trained": config.env_id}


def register_echo() -> None:
    """What a plugin's entry point does."""
    register_trainer("echo", {"mybackend": "test_trainer_registry:echo_trainer"}, description="Echo the config.")


def broken_plugin() -> None:
    raise RuntimeError("this plugin is broken")


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sees the built-in trainers only, whatever it registers."""
    monkeypatch.setattr(registry, "_TRAINERS", dict(registry._TRAINERS))
    monkeypatch.setattr(registry, "_LOADED_PLUGINS", set())
    CALLS.clear()
    yield


def test_grpo_runs_on_both_backends_and_sft_on_trl() -> None:
    names = {spec.name: spec for spec in list_trainers()}
    assert {"grpo", "sft"} <= set(names)
    assert names["grpo"].backends == {"fsdp": "agentgym.trainers.loop:run_training",
                                      "trl": "agentgym.trainers.trl_backend:run_trl"}
    assert names["grpo"].default_backend == "fsdp"
    assert names["sft"].backends == {"trl": "agentgym.trainers.sft:run_sft"}


def test_get_trainer_imports_the_function() -> None:
    from agentgym.trainers.loop import run_training
    from agentgym.trainers.sft import run_sft
    from agentgym.trainers.trl_backend import run_trl

    assert get_trainer("grpo", "trl") is run_trl
    assert get_trainer("grpo", "fsdp") is get_trainer("grpo") is run_training
    assert get_trainer("sft") is get_trainer("sft", "trl") is run_sft


def test_a_misspelt_trainer_says_what_was_meant() -> None:
    with pytest.raises(UnknownTrainerError, match=r"No trainer registered as 'gpro'\. Did you mean 'grpo'\? "
                                                  r"Registered: grpo, sft\."):
        trainer_spec("gpro")
    with pytest.raises(UnknownTrainerError, match="Did you mean 'sft'"):
        get_trainer("SFT")
    with pytest.raises(UnknownTrainerError, match=r"'dpo-xyz'\. Registered: grpo, sft\."):
        get_trainer("dpo-xyz")


def test_a_backend_the_trainer_lacks_names_the_ones_it_has() -> None:
    with pytest.raises(ConfigError, match=r"'sft' has no backend 'fsdp'; it runs on trl\. Pass --backend"):
        get_trainer("sft", "fsdp")


def test_a_third_party_trainer_plugs_in() -> None:
    register_echo()
    run = get_trainer("echo", "mybackend")
    assert run is echo_trainer
    config = TrainConfig(trainer="echo", env_id="Bandit-LLM-v0")
    assert run(config, console=None) == {"trained": "Bandit-LLM-v0"}
    assert CALLS == [("echo", None)]
    assert trainer_spec("echo").source == "agentgym"  # registered by a direct call


def test_a_plugin_adds_a_backend_to_a_built_in_trainer() -> None:
    register_trainer("grpo", {"mybackend": "test_trainer_registry:echo_trainer"}, description="ignored")
    assert get_trainer("grpo", "mybackend") is echo_trainer
    assert get_trainer("grpo") is get_trainer("grpo", "fsdp")  # the default stays
    register_trainer("grpo", {"trl": "agentgym.trainers.trl_backend:run_trl"}, description="same again")


def test_taking_over_a_registered_backend_is_an_error() -> None:
    with pytest.raises(RegistryError, match="'grpo' backend 'trl' is registered already as "
                                            "agentgym.trainers.trl_backend:run_trl"):
        register_trainer("grpo", {"trl": "test_trainer_registry:echo_trainer"}, description="x")


@pytest.mark.parametrize(("name", "backends", "message"), [
    ("GRPO", {"trl": "m:f"}, "lower-case letters"),
    ("x", {}, "needs at least one backend"),
    ("x", {"trl": "no_colon"}, "must map to 'module.path:function', got 'no_colon'"),
    ("x", {"Bad Backend": "m:f"}, "must map to"),
])
def test_bad_registrations_say_what_to_fix(name: str, backends: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        register_trainer(name, backends, description="x")


def test_an_entry_point_that_does_not_import_is_a_clear_error() -> None:
    register_trainer("ghost", {"trl": "no_such_module_here:run"}, description="x")
    with pytest.raises(ConfigError, match=r"'ghost' \(no_such_module_here:run\) could not be imported"):
        get_trainer("ghost")
    register_trainer("hollow", {"trl": "test_trainer_registry:no_such_function"}, description="x")
    with pytest.raises(ConfigError, match="test_trainer_registry has no 'no_such_function'"):
        get_trainer("hollow")


def test_plugins_load_from_entry_points_and_a_broken_one_is_only_a_warning(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = [
        importlib.metadata.EntryPoint("echo", "test_trainer_registry:register_echo", registry.ENTRY_POINT_GROUP),
        importlib.metadata.EntryPoint("broken", "test_trainer_registry:broken_plugin", registry.ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(registry.importlib.metadata, "entry_points",
                        lambda group: entries if group == registry.ENTRY_POINT_GROUP else [])
    with pytest.warns(PluginLoadWarning, match="'broken' .* failed to load: RuntimeError: this plugin is broken"):
        names = [spec.name for spec in list_trainers()]
    assert names == ["echo", "grpo", "sft"]
    assert get_trainer("echo", "mybackend") is echo_trainer
    assert registry.load_trainer_plugins() == []  # each entry point is loaded once
