"""TrainConfig: settings in sections, one name each, checked where they are read, help from docstrings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentgym.errors import ConfigError
from agentgym.trainers.settings import (
    SECTIONS,
    TrainConfig,
    setting_help,
    setting_rows,
    settings_markdown,
)

BANDIT = {"env_id": "Bandit-LLM-v0"}


def test_flat_dotted_and_sectioned_names_mean_the_same_setting() -> None:
    flat = TrainConfig.from_dict({**BANDIT, "lr": 5e-4, "group_size": 4})
    dotted = TrainConfig.from_dict({**BANDIT, "optim.lr": 5e-4, "rollout.group_size": 4})
    nested = TrainConfig.from_dict({"rollout": {**BANDIT, "group_size": 4}, "optim": {"lr": 5e-4}})
    assert flat == dotted == nested
    assert (flat.optim.lr, flat.rollout.group_size) == (5e-4, 4)


def test_every_setting_has_one_name_and_a_help_line() -> None:
    names = [name for model in SECTIONS.values() for name in model.model_fields]
    assert len(names) == len(set(names))
    rows = setting_rows()
    assert len(rows) == len(names)
    assert all(help_text for *_, help_text in rows), [name for _, name, _, text in rows if not text]
    assert setting_help("lr").startswith("Peak learning rate")


def test_needs_an_env_or_a_rollout_file() -> None:
    with pytest.raises(ConfigError, match=r"--env ENV.*--trajectories FILE"):
        TrainConfig()
    assert TrainConfig.from_dict({"trajectories": "rows.parquet"}).rollout.env_id is None


@pytest.mark.parametrize(("values", "message"), [
    ({"episodes_per_step": 30, "group_size": 8}, r"episodes_per_step \(30\) must be a multiple of group_size \(8\)"),
    ({"advantage": "ppo"}, r"grpo.advantage: Input should be 'grpo', 'grpo_no_std', 'dr_grpo', 'rloo' or 'reinforce_pp'"),
    ({"lr": -1.0}, r"optim.lr: Input should be greater than or equal to 0 \(got -1.0\)"),
    ({"top_p": 1.5}, r"rollout.top_p: Input should be less than or equal to 1"),
    ({"steps": 0}, r"run.steps: Input should be greater than or equal to 1"),
    ({"adam_betas": [0.9, 1.0]}, r"adam_betas must be two numbers in \[0, 1\)"),
    ({"mini_batches": 64, "episodes_per_step": 32}, r"mini_batches \(64\) cannot exceed episodes_per_step"),
    ({"clip_low": -0.1}, r"loss.clip_low: Input should be greater than or equal to 0"),
    ({"optimizer": "adam"}, r"optim.optimizer: Input should be 'adamw' or 'sgd' \(got 'adam'\)"),
    ({"momentum": 1.0}, r"optim.momentum: Input should be less than 1"),
    ({"lora": True, "frozen_parameters": ["model.layers.0.*"]}, r"frozen_parameters and lora do not mix"),
    ({"steps": "many"}, r"run.steps: Input should be a valid integer"),
])
def test_bad_values_name_the_setting(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict({**BANDIT, **values})


def test_unknown_or_misplaced_names_say_what_was_meant() -> None:
    with pytest.raises(ConfigError, match=r"Unknown training setting 'stepz'\. Did you mean 'steps'\?"):
        TrainConfig.from_dict({**BANDIT, "stepz": 3})
    with pytest.raises(ConfigError, match=r"'grpo.lr': lr belongs to section 'optim'; write optim.lr or just lr"):
        TrainConfig.from_dict({**BANDIT, "grpo.lr": 3})


def test_yaml_round_trip_in_sections_and_flags_override(tmp_path: Path) -> None:
    config = TrainConfig.from_dict({**BANDIT, "steps": 7, "lr": 3e-4, "adam_betas": (0.8, 0.95), "lora": True})
    config.save_yaml(tmp_path / "run.yaml")
    saved = yaml.safe_load((tmp_path / "run.yaml").read_text())
    assert saved["optim"]["lr"] == 3e-4 and saved["run"]["steps"] == 7  # written in sections
    loaded = TrainConfig.from_yaml(tmp_path / "run.yaml")
    assert loaded == config
    updated = TrainConfig.from_yaml(tmp_path / "run.yaml", {"steps": None, "lr": 1e-3, "seed": 5})
    assert (updated.run.steps, updated.optim.lr, updated.run.seed) == (7, 1e-3, 5)


def test_a_flat_settings_file_of_a_run_folder_from_before_sections_still_loads(tmp_path: Path) -> None:
    """A config.yaml saved by the flat TrainConfig (every field at the top); the one meaning that changed,
    constant_sum's divisor, carries over from its old home, max_tokens."""
    old = {"trainer": "grpo", "backend": "fsdp", "env_id": "Bandit-LLM-v0", "env_kwargs": {}, "model": "tiny",
           "steps": 12, "max_tokens": 24, "aggregation": "constant_sum", "format_warmup_episodes": 0,
           "lr": 1e-3, "adam_betas": [0.9, 0.99], "pack_sequences": True, "group_by_length": False}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    config = TrainConfig.from_yaml(tmp_path / "config.yaml")
    assert (config.run.steps, config.rollout.max_tokens, config.loss.constant_sum_tokens) == (12, 24, 24)
    assert config.native.pack_sequences and config.warmup.format_warmup_episodes == 0


def test_yaml_exponents_without_a_dot_are_numbers(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text("env_id: Bandit-LLM-v0\nlr: 1e-3\nformat_warmup_lr: 2e-3\n")
    config = TrainConfig.from_yaml(tmp_path / "run.yaml")
    assert (config.optim.lr, config.warmup.format_warmup_lr) == (1e-3, 2e-3)


def test_bad_yaml_files_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Could not read the settings file"):
        TrainConfig.from_yaml(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping of name: value"):
        TrainConfig.from_yaml(tmp_path / "list.yaml")
    (tmp_path / "broken.yaml").write_text("steps: [1, 2\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        TrainConfig.from_yaml(tmp_path / "broken.yaml")


def test_a_setting_the_run_would_ignore_is_an_error_that_names_it() -> None:
    sft = TrainConfig.from_dict({"trajectories": "rows.parquet", "trainer": "sft", "clip_low": 0.1})
    with pytest.raises(ConfigError, match=r"loss.clip_low is set, but trainer 'sft'"):
        sft.check_used({"run", "model", "optim", "rollout", "sft"})
    trl = TrainConfig.from_dict({**BANDIT, "backend": "trl", "pack_sequences": True})
    with pytest.raises(ConfigError, match=r"native.pack_sequences is set, but trainer 'grpo' on backend 'trl'"):
        trl.check_used({"run", "model", "optim", "rollout", "grpo"})
    with pytest.raises(ConfigError, match=r"rollout.max_staleness is set.*does not read.*setting"):
        TrainConfig.from_dict({**BANDIT, "max_staleness": 3}).check_used({"run", "rollout"}, {"max_staleness"})
    TrainConfig.from_dict({**BANDIT, "lr": 0.5}).check_used({"run", "model", "optim", "rollout"})  # all read


def test_each_step_plays_new_seeds() -> None:
    config = TrainConfig.from_dict({**BANDIT, "episodes_per_step": 32, "group_size": 8})
    seeds = [seed for step in range(5) for seed in config.step_seeds(step)]
    assert len(seeds) == 5 * config.rollout.groups_per_step and len(set(seeds)) == len(seeds)


def test_a_seed_file_gives_the_steps_its_levels_round_and_round(tmp_path: Path) -> None:
    (tmp_path / "hard.txt").write_text("# levels the model failed\n7\n\n3  # a comment\n11\n")
    config = TrainConfig.from_dict({**BANDIT, "episodes_per_step": 16, "group_size": 8,
                                    "level_seeds": str(tmp_path / "hard.txt")})
    assert [config.step_seeds(step) for step in range(3)] == [[7, 3], [11, 7], [3, 11]]


def test_a_bad_seed_file_fails_when_the_settings_are_made(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Cannot read the seed file .*missing.txt.*--failed-seeds-out"):
        TrainConfig.from_dict({**BANDIT, "level_seeds": str(tmp_path / "missing.txt")})
    (tmp_path / "bad.txt").write_text("12\nlevel 4\n")
    with pytest.raises(ConfigError, match=r"bad.txt, line 2: 'level 4' is not a seed"):
        TrainConfig.from_dict({**BANDIT, "level_seeds": str(tmp_path / "bad.txt")})


def test_the_settings_reference_in_the_docs_is_the_code_s() -> None:
    """docs/training.md's table is generated from the settings' docstrings: regenerate it with
    ``python -c "from agentgym.trainers.settings import settings_markdown; print(settings_markdown())"``."""
    docs = (Path(__file__).parents[2] / "docs" / "training.md").read_text(encoding="utf-8")
    marker = "<!-- generated from trainers/settings.py"
    assert marker in docs
    table = docs.split(marker, 1)[1].split("\n", 1)[1]
    assert table.strip() == settings_markdown().strip()
