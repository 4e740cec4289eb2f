"""TrainConfig: defaults, validation messages, YAML and flag overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.trainers.config import TrainConfig


def test_defaults_are_valid_and_make_a_loss_config() -> None:
    config = TrainConfig(env_id="Bandit-LLM-v0")
    assert config.episodes_per_step % config.group_size == 0
    assert config.groups_per_step == config.episodes_per_step // config.group_size
    loss = config.loss_config()
    assert (loss.clip_low, loss.clip_high, loss.kl_coef) == (config.clip_low, config.clip_high, config.kl_coef)


def test_needs_an_env_or_a_rollout_file() -> None:
    with pytest.raises(ConfigError, match=r"--env ENV.*--trajectories FILE"):
        TrainConfig()
    assert TrainConfig(trajectories="rows.parquet").env_id is None


@pytest.mark.parametrize(("values", "message"), [
    ({"episodes_per_step": 30, "group_size": 8}, r"episodes_per_step \(30\) must be a multiple of group_size \(8\)"),
    ({"backend": "jax"}, r"backend must be one of fsdp, trl; got 'jax'"),
    ({"advantage": "ppo"}, r"advantage must be one of grpo, grpo_no_std, dr_grpo, rloo"),
    ({"baseline": "step"}, r"baseline must be one of episode, turn; got 'step'"),
    ({"lr": -1.0}, r"lr must be at least 0"),
    ({"top_p": 1.5}, r"top_p must be at most 1"),
    ({"steps": 0}, r"steps must be at least 1"),
    ({"adam_betas": [0.9, 1.0]}, r"adam_betas must be two numbers in \[0, 1\)"),
    ({"mini_batches": 64, "episodes_per_step": 32}, r"mini_batches \(64\) cannot exceed episodes_per_step"),
    ({"clip_low": -0.1}, r"clip_low and clip_high must be >= 0"),
    ({"top_entropy_quantile": 1.5}, r"top_entropy_quantile must be at most 1"),
    ({"max_seconds": -5}, r"max_seconds must be at least 0"),
    ({"optimizer": "adam"}, r"optimizer must be one of adamw, sgd; got 'adam'"),
    ({"optimizer": "sgd", "momentum": 1.0}, r"momentum must be within \[0, 1\)"),
    ({"lora": True, "frozen_parameters": ["model.layers.0.*"]}, r"frozen_parameters and lora do not mix"),
])
def test_bad_values_name_the_field(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrainConfig(env_id="Bandit-LLM-v0", **values)


def test_unknown_field_suggests_the_closest() -> None:
    with pytest.raises(ConfigError, match=r"Unknown train config field 'stepz'\. Did you mean 'steps'\?"):
        TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "stepz": 3})


def test_yaml_round_trip_and_flags_override(tmp_path: Path) -> None:
    config = TrainConfig(env_id="Bandit-LLM-v0", steps=7, lr=3e-4, adam_betas=(0.8, 0.95), lora=True)
    config.save_yaml(tmp_path / "run.yaml")
    loaded = TrainConfig.from_yaml(tmp_path / "run.yaml")
    assert loaded == config
    # A flag left out (None) keeps the file's value; a given one wins.
    updated = loaded.updated({"steps": None, "lr": 1e-3, "seed": 5})
    assert (updated.steps, updated.lr, updated.seed) == (7, 1e-3, 5)


def test_yaml_exponents_without_a_dot_are_numbers(tmp_path: Path) -> None:
    # PyYAML reads 1e-3 as the string "1e-3"; a learning rate must still work.
    (tmp_path / "run.yaml").write_text("env_id: Bandit-LLM-v0\nlr: 1e-3\nformat_warmup_lr: 2e-3\n")
    config = TrainConfig.from_yaml(tmp_path / "run.yaml")
    assert (config.lr, config.format_warmup_lr) == (1e-3, 2e-3)


def test_bad_yaml_files_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Could not read the config file"):
        TrainConfig.from_yaml(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping of field: value"):
        TrainConfig.from_yaml(tmp_path / "list.yaml")
    (tmp_path / "broken.yaml").write_text("steps: [1, 2\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        TrainConfig.from_yaml(tmp_path / "broken.yaml")


def test_each_step_plays_new_seeds() -> None:
    config = TrainConfig(env_id="Bandit-LLM-v0", episodes_per_step=32, group_size=8)
    seeds = [seed for step in range(5) for seed in config.step_seeds(step)]
    assert len(seeds) == 5 * config.groups_per_step and len(set(seeds)) == len(seeds)


def test_a_seed_file_gives_the_steps_its_levels_round_and_round(tmp_path: Path) -> None:
    (tmp_path / "hard.txt").write_text("# levels the model failed\n7\n\n3  # a comment\n11\n")
    config = TrainConfig(env_id="Bandit-LLM-v0", episodes_per_step=16, group_size=8,
                         level_seeds=str(tmp_path / "hard.txt"))
    assert [config.step_seeds(step) for step in range(3)] == [[7, 3], [11, 7], [3, 11]]
    assert config.updated({"steps": 3}).step_seeds(1) == [11, 7]  # the path is kept, the file read again


def test_a_bad_seed_file_fails_when_the_config_is_made(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Cannot read the seed file .*missing.txt.*--failed-seeds-out"):
        TrainConfig(env_id="Bandit-LLM-v0", level_seeds=str(tmp_path / "missing.txt"))
    (tmp_path / "bad.txt").write_text("12\nlevel 4\n")
    with pytest.raises(ConfigError, match=r"bad.txt, line 2: 'level 4' is not a seed"):
        TrainConfig(env_id="Bandit-LLM-v0", level_seeds=str(tmp_path / "bad.txt"))
    (tmp_path / "empty.txt").write_text("# nothing yet\n")
    with pytest.raises(ConfigError, match="holds no seed"):
        TrainConfig(env_id="Bandit-LLM-v0", level_seeds=str(tmp_path / "empty.txt"))


def test_with_no_backend_named_a_trainer_runs_on_its_own_default() -> None:
    """`agentgym train --trainer sft` needs no --backend: sft runs on trl only, grpo defaults to fsdp."""
    assert TrainConfig(trainer="sft", trajectories="rows.parquet").backend == "trl"
    assert TrainConfig(env_id="Bandit-LLM-v0").backend == "fsdp"
    assert TrainConfig(env_id="Bandit-LLM-v0", backend="trl").backend == "trl"
