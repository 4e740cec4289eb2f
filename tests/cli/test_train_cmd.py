"""``agentgym train`` and ``agentgym report`` from the command line (offline runs: no server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.trainers.settings import TrainConfig
from agentgym.trainers.loop.metrics import read_jsonl

runner = CliRunner()


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory: pytest.TempPathFactory, tiny_model: str) -> Path:
    """Random-policy Bandit episodes recorded in the tiny model's tokens."""
    path = tmp_path_factory.mktemp("rows") / "bandit.parquet"
    result = runner.invoke(app, ["rollout", "--env", "Bandit-LLM-v0", "--policy", "random", "--episodes", "16",
                                 "--group-size", "4", "--out", str(path), "--show", "0"])
    assert result.exit_code == 0, result.output
    return path


def _train(rows_file: Path, out: Path, *extra: str) -> object:
    return runner.invoke(app, ["train", "--trajectories", str(rows_file), "--steps", "2", "--group-size", "4",
                               "--episodes-per-step", "8", "--out", str(out), *extra], terminal_width=200)


def test_train_offline_then_report(rows_file: Path, tmp_path: Path) -> None:
    result = _train(rows_file, tmp_path / "run", "-s", "pack_sequences=true", "-s", "lr=5e-4")
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())  # the console wraps long lines
    assert "step 2/2" in output and "Success rate " in output
    assert f"agentgym report {tmp_path / 'run'}" in output
    assert len(read_jsonl(tmp_path / "run" / "metrics.jsonl")) == 2
    config = TrainConfig.from_yaml(tmp_path / "run" / "config.yaml")
    assert config.native.pack_sequences is True and config.optim.lr == 5e-4
    assert config.rollout.trajectories == str(rows_file)
    report = runner.invoke(app, ["report", str(tmp_path / "run")])
    assert report.exit_code == 0, report.output
    assert (tmp_path / "run" / "report.html").read_text().count("<svg") >= 6


def test_flags_override_the_config_file(rows_file: Path, tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(f"trajectories: {rows_file}\nsteps: 5\nlr: 1e-4\nseed: 9\n")
    result = runner.invoke(app, ["train", "--config", str(tmp_path / "run.yaml"), "--steps", "1", "--group-size", "4",
                                 "--episodes-per-step", "4", "--turn-budget", "5", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    config = TrainConfig.from_yaml(tmp_path / "run" / "config.yaml")
    assert (config.run.steps, config.optim.lr, config.run.seed, config.rollout.turn_budget) == (1, 1e-4, 9, 5)


@pytest.mark.parametrize(("args", "message"), [
    (["train", "--steps", "2"], "Give an env to train on (--env ENV) or a rollout file"),
    (["train", "--env", "Bandit-LLM-v0", "-s", "stepz=3"], "Unknown training setting 'stepz'. Did you mean 'steps'?"),
    (["train", "--env", "Bandit-LLM-v0", "-s", "lr"], "--set takes KEY=VALUE, got 'lr'."),
    (["train", "--env", "Bandit-LLM-v0", "--backend", "jax"], "Trainer 'grpo' has no backend 'jax'; it runs on fsdp, trl."),
    (["train", "--env", "Bandit-LLM-vO"], "Bandit-LLM-v0"),  # did you mean
])
def test_bad_flags_say_what_to_do(args: list[str], message: str, tmp_path: Path) -> None:
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "run")], terminal_width=300)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_report_of_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path)], terminal_width=300)
    assert result.exit_code == 2 and "has no metrics.jsonl" in result.output
