"""The trainer registry: built-in trainers, "did you mean", and a third-party trainer plugged in."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from typing import Any

import pytest

from agentgym.errors import ConfigError, PluginLoadWarning, RegistryError, UnknownTrainerError
from agentgym.trainers import registry
from agentgym.trainers.engines.distributed import Dist
from agentgym.trainers.learners.base import Learner
from agentgym.trainers.registry import get_learner_factory, list_trainers, register_trainer, trainer_spec
from agentgym.trainers.settings import TrainConfig

CALLS: list[tuple[str, int]] = []


class EchoLearner(Learner):
    """A third-party trainer's learner: records the rows it is given, learns nothing."""

    def train_step(self, rows: Any) -> dict[str, float]:
        CALLS.append((self.config.run.trainer, len(rows)))
        self.engine.version += 1
        return {"echoed_rows": float(len(rows))}


def echo_trainer(config: TrainConfig, dist: Dist) -> Learner:
    """The plugin's entry point, on a backend of its own (here: the native engine under another name)."""
    from agentgym.trainers.engines.native import NativeEngine

    return EchoLearner(config, NativeEngine(config, dist))


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


def test_grpo_and_sft_run_on_both_backends() -> None:
    names = {spec.name: spec for spec in list_trainers()}
    assert {"grpo", "sft", "distill", "dpo", "ppo"} <= set(names)
    assert names["grpo"].backends == {"fsdp": "agentgym.trainers.learners.grpo:make_grpo",
                                      "trl": "agentgym.trainers.learners.grpo:make_grpo"}
    assert names["grpo"].default_backend == "fsdp"
    assert names["sft"].backends == {"trl": "agentgym.trainers.learners.sft:make_sft", "fsdp": "agentgym.trainers.learners.sft:make_sft"}
    assert names["sft"].default_backend == "trl"


def test_get_learner_factory_imports_the_function() -> None:
    from agentgym.trainers.learners.grpo import make_grpo
    from agentgym.trainers.learners.sft import make_sft

    assert get_learner_factory("grpo", "trl") is get_learner_factory("grpo", "fsdp") is make_grpo
    assert get_learner_factory("grpo") is make_grpo
    assert get_learner_factory("sft") is get_learner_factory("sft", "fsdp") is make_sft


def test_a_misspelt_trainer_says_what_was_meant() -> None:
    with pytest.raises(UnknownTrainerError, match=r"No trainer registered as 'gpro'\. Did you mean 'grpo', 'ppo' or 'dpo'\? "
                                                  r"Registered: distill, dpo, grpo, ppo, sft\."):
        trainer_spec("gpro")
    with pytest.raises(UnknownTrainerError, match="Did you mean 'sft'"):
        get_learner_factory("SFT")
    with pytest.raises(UnknownTrainerError, match=r"'xyz'\. Registered: distill, dpo, grpo, ppo, sft\."):
        get_learner_factory("xyz")


def test_a_backend_the_trainer_lacks_names_the_ones_it_has() -> None:
    with pytest.raises(ConfigError, match=r"'sft' has no backend 'jax'; it runs on fsdp, trl\. Pass --backend"):
        get_learner_factory("sft", "jax")


def test_a_third_party_trainer_plugs_in_and_runs_through_the_skeleton(bandit_rows, tiny_model: str,
                                                                       tmp_path) -> None:
    from agentgym.trainers.loop.run import train

    register_echo()
    assert get_learner_factory("echo", "mybackend") is echo_trainer
    assert trainer_spec("echo").default_backend == "mybackend"
    config = TrainConfig.from_dict({"trainer": "echo", "trajectories": str(bandit_rows), "model": tiny_model,
                                    "steps": 2, "group_size": 4, "episodes_per_step": 8, "out": str(tmp_path / "run")})
    result = train(config, device="cpu")
    assert CALLS == [("echo", 8), ("echo", 8)]  # the skeleton fed it two steps of whole groups
    assert [m["echoed_rows"] for m in result.metrics] == [8.0, 8.0] and result.metrics[1]["policy_version"] == 2.0
    assert result.final_model is not None and (result.final_model / "config.json").exists()
    assert trainer_spec("echo").source == "agentgym"  # registered by a direct call


def test_a_plugin_adds_a_backend_to_a_built_in_trainer() -> None:
    register_trainer("grpo", {"mybackend": "test_trainer_registry:echo_trainer"}, description="ignored")
    assert get_learner_factory("grpo", "mybackend") is echo_trainer
    assert get_learner_factory("grpo") is get_learner_factory("grpo", "fsdp")  # the default stays
    register_trainer("grpo", {"trl": "agentgym.trainers.learners.grpo:make_grpo"}, description="same again")


def test_taking_over_a_registered_backend_is_an_error() -> None:
    with pytest.raises(RegistryError, match="'grpo' backend 'trl' is registered already as "
                                            "agentgym.trainers.learners.grpo:make_grpo"):
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
        get_learner_factory("ghost")
    register_trainer("hollow", {"trl": "test_trainer_registry:no_such_function"}, description="x")
    with pytest.raises(ConfigError, match="test_trainer_registry has no 'no_such_function'"):
        get_learner_factory("hollow")


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
    assert names == ["distill", "dpo", "echo", "grpo", "ppo", "sft"]
    assert get_learner_factory("echo", "mybackend") is echo_trainer
    assert registry.load_trainer_plugins() == []  # each entry point is loaded once
