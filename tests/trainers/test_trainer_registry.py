"""The trainer registry: built-in trainers, "did you mean", and a third-party trainer plugged in with
a settings section and a backend of its own."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import Field

from agentgym.errors import ConfigError, PluginLoadWarning, RegistryError, UnknownTrainerError
from agentgym.trainers import registry, sections
from agentgym.trainers.engines.native import NativeEngine
from agentgym.trainers.learners.base import Learner
from agentgym.trainers.registry import (
    engine_class,
    learner_class,
    list_trainers,
    register_backend,
    register_trainer,
    trainer_spec,
)
from agentgym.trainers.sections import Section, register_section
from agentgym.trainers.settings import TrainConfig

CALLS: list[tuple[str, int, float]] = []


class EchoSettings(Section):
    """The echo trainer: what it adds to each row count it reports."""

    echo_offset: float = Field(0.0, ge=0)
    """Added to every row count the echo trainer reports."""


class EchoLearner(Learner):
    """A third-party trainer's learner: records the rows it is given, learns nothing."""

    sections = frozenset({"rollout", "echo"})

    def train_step(self, rows: Any) -> dict[str, float]:
        offset = self.config.echo.echo_offset
        CALLS.append((self.config.run.trainer, len(rows), offset))
        return {"updates": 1.0, "echoed_rows": float(len(rows)) + offset}


class EchoEngine(NativeEngine):
    """The plugin's own backend (here: the native engine under another name)."""


def register_echo() -> None:
    """What a plugin's entry point does: its settings section, its backend, its trainer."""
    register_section("echo", EchoSettings)
    register_backend("mybackend", "test_trainer_registry:EchoEngine")
    register_trainer("echo", "test_trainer_registry:EchoLearner", backends=("mybackend",),
                     description="Echo the config.")


def broken_plugin() -> None:
    raise RuntimeError("this plugin is broken")


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sees the built-in trainers, backends and sections only, whatever it registers."""
    monkeypatch.setattr(registry, "_TRAINERS", dict(registry._TRAINERS))
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))
    monkeypatch.setattr(registry, "_LOADED_PLUGINS", set())
    monkeypatch.setattr(sections, "SECTIONS", dict(sections.SECTIONS))
    monkeypatch.setattr(sections, "_OWNER", dict(sections._OWNER))
    monkeypatch.setattr("agentgym.trainers.settings.SECTIONS", sections.SECTIONS)
    CALLS.clear()
    yield


def test_every_built_in_trainer_runs_on_both_backends() -> None:
    names = {spec.name: spec for spec in list_trainers()}
    assert set(names) == {"grpo", "sft", "distill", "dpo", "ppo", "rm"}
    for name, spec in names.items():
        assert set(spec.backends) == {"fsdp", "trl"}, name
    assert names["grpo"].learner == "agentgym.trainers.learners.grpo:GRPOLearner"
    assert names["grpo"].default_backend == "fsdp" and names["sft"].default_backend == "trl"


def test_a_trainer_is_one_learner_class_and_a_backend_one_engine_class() -> None:
    from agentgym.trainers.engines.trl import TRLEngine
    from agentgym.trainers.learners.grpo import GRPOLearner
    from agentgym.trainers.learners.sft import SFTLearner

    assert learner_class("grpo") is GRPOLearner and learner_class("sft") is SFTLearner
    assert engine_class("fsdp") is NativeEngine and engine_class("trl") is TRLEngine
    with pytest.raises(ConfigError, match=r"No backend 'jax'; the backends are fsdp, trl"):
        engine_class("jax")


def test_a_misspelt_trainer_says_what_was_meant() -> None:
    with pytest.raises(UnknownTrainerError, match=r"No trainer registered as 'gpro'\. Did you mean 'grpo', 'ppo' or 'dpo'\? "
                                                  r"Registered: distill, dpo, grpo, ppo, rm, sft\."):
        trainer_spec("gpro")
    with pytest.raises(UnknownTrainerError, match="Did you mean 'sft'"):
        learner_class("SFT")
    with pytest.raises(UnknownTrainerError, match=r"'xyz'\. Registered: distill, dpo, grpo, ppo, rm, sft\."):
        learner_class("xyz")


def test_a_backend_the_trainer_lacks_names_the_ones_it_has() -> None:
    with pytest.raises(ConfigError, match=r"'sft' has no backend 'jax'; it runs on fsdp, trl\. Pass --backend"):
        trainer_spec("sft").backend("jax")


def test_a_third_party_trainer_plugs_in_with_its_own_section_and_runs_through_the_loop(
        bandit_rows, tiny_model: str, tmp_path) -> None:
    from agentgym.trainers.loop.run import train

    register_echo()
    assert learner_class("echo") is EchoLearner and engine_class("mybackend") is EchoEngine
    assert trainer_spec("echo").default_backend == "mybackend"
    config = TrainConfig.from_dict({"trainer": "echo", "trajectories": str(bandit_rows), "model": tiny_model,
                                    "steps": 2, "group_size": 4, "episodes_per_step": 8, "out": str(tmp_path / "run"),
                                    "echo.echo_offset": 0.5})
    assert config.echo.echo_offset == 0.5  # the plugin's section, read like any other
    result = train(config, device="cpu")
    assert CALLS == [("echo", 8, 0.5), ("echo", 8, 0.5)]  # the loop fed it two steps of whole groups
    assert [m["echoed_rows"] for m in result.metrics] == [8.5, 8.5] and result.metrics[1]["policy_version"] == 2.0
    assert result.final_model is not None and (result.final_model / "config.json").exists()
    assert trainer_spec("echo").source == "agentgym"  # registered by a direct call


def test_a_plugin_section_set_for_a_trainer_that_does_not_read_it_is_an_error(bandit_rows) -> None:
    register_echo()
    config = TrainConfig.from_dict({"trajectories": str(bandit_rows), "echo_offset": 1.0})
    with pytest.raises(ConfigError, match=r"echo.echo_offset is set, but trainer 'grpo' on backend 'fsdp' does "
                                          r"not read the echo section"):
        registry.check_settings(config)


def test_a_section_may_not_take_another_sections_setting() -> None:
    class Thief(Section):
        """Takes lr."""

        lr: float = 0.1
        """A learning rate."""

    with pytest.raises(RegistryError, match="setting 'lr' belongs to section 'optim' already"):
        register_section("thief", Thief)
    with pytest.raises(RegistryError, match="named 'grpo' is registered already"):
        register_section("grpo", EchoSettings)


def test_taking_over_a_registered_trainer_is_an_error() -> None:
    with pytest.raises(RegistryError, match="'grpo' is registered already with agentgym.trainers.learners.grpo"):
        register_trainer("grpo", "test_trainer_registry:EchoLearner", backends=("fsdp",), description="x")
    register_trainer("grpo", "agentgym.trainers.learners.grpo:GRPOLearner", backends=("fsdp", "trl"),
                     description="the same again is fine")


@pytest.mark.parametrize(("name", "learner", "backends", "message"), [
    ("GRPO", "m:C", ("fsdp",), "lower-case letters"),
    ("x", "m:C", (), "needs at least one backend"),
    ("x", "no_colon", ("fsdp",), "must name its learner as 'module.path:Class', got 'no_colon'"),
    ("x", "m:C", ("jax",), "no backend 'jax' is registered"),
])
def test_bad_registrations_say_what_to_fix(name: str, learner: str, backends: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        register_trainer(name, learner, backends=backends, description="x")


def test_a_learner_that_does_not_import_is_a_clear_error() -> None:
    register_trainer("ghost", "no_such_module_here:Run", backends=("trl",), description="x")
    with pytest.raises(ConfigError, match=r"'ghost' \(no_such_module_here:Run\) could not be imported"):
        learner_class("ghost")
    register_trainer("hollow", "test_trainer_registry:NoSuchClass", backends=("trl",), description="x")
    with pytest.raises(ConfigError, match="test_trainer_registry has no 'NoSuchClass'"):
        learner_class("hollow")


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
    assert names == ["distill", "dpo", "echo", "grpo", "ppo", "rm", "sft"]
    assert learner_class("echo") is EchoLearner
    assert registry.load_trainer_plugins() == []  # each entry point is loaded once
