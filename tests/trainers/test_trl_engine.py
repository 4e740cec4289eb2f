"""The trl backend offline (``--trajectories FILE``) and its resume: no server, real TRL, real Parquet."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.errors import ConfigError
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.metrics import read_jsonl
from agentgym.trainers.trl_backend import run_trl

_ANSWERS = ["<answer>Dragon</answer>", "<answer>Phoenix</answer>", "<answer>Dragon</answer> now", "what?"]
#: rewards of the four episodes of each group; group g is seeded 100 + g
_REWARDS = [[1.0, 0.3, 0.0, -0.1], [0.3, 1.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.3], [1.0, -0.1, 1.0, 1.0]]


@pytest.fixture
def rollout_file(write_groups, tmp_path: Path) -> Path:
    return write_groups(tmp_path / "rows.parquet", [list(zip(_ANSWERS, rewards)) for rewards in _REWARDS],
                        logprob=-1.0)


def _config(rollout_file: Path, out: Path, **changes: object) -> TrainConfig:
    values: dict[str, object] = {"backend": "trl", "trajectories": str(rollout_file), "out": str(out), "steps": 4,
                                 "group_size": 4, "episodes_per_step": 8, "lr": 1e-3, "seed": 3,
                                 "checkpoint_every": 100, "lr_schedule": "cosine", "mini_batches": 2}
    values.update(changes)
    return TrainConfig(**values)


@pytest.mark.slow
def test_agentgym_train_backend_trl_on_a_rollout_file(rollout_file: Path, tmp_path: Path) -> None:
    """`agentgym train --trainer grpo --backend trl --trajectories FILE`: each step two whole groups, in file order."""
    result = CliRunner().invoke(app, [
        "train", "--trainer", "grpo", "--backend", "trl", "--trajectories", str(rollout_file), "--steps", "3",
        "--group-size", "4", "--episodes-per-step", "8", "--out", str(tmp_path / "run")], terminal_width=200)
    assert result.exit_code == 0, result.output
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2]
    for record, groups in zip(records, [(0, 1), (2, 3), (0, 1)]):  # round and round the file
        rewards = [reward for g in groups for reward in _REWARDS[g]]
        assert record["episodes"] == 8 and record["reward"] == pytest.approx(sum(rewards) / 8)
        assert record["time/sync"] == 0.0 and record["grad_norm"] > 0 and record["policy_version"] == record["step"] + 1
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert {s["step"] for s in samples} == {0, 1, 2}
    assert (tmp_path / "run" / "final" / "model.safetensors").exists()


@pytest.mark.slow
def test_trl_run_stopped_half_way_resumes_to_the_same_metrics_and_weights(rollout_file: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    straight = run_trl(_config(rollout_file, tmp_path / "straight"))
    stopped = run_trl(_config(rollout_file, tmp_path / "resumed"), stop_after=2)
    assert stopped.stopped_early and len(stopped.metrics) == 2 and stopped.final_model is None
    resumed = run_trl(_config(rollout_file, tmp_path / "resumed", resume=True))
    assert len(resumed.metrics) == 2 and not resumed.stopped_early

    logged = read_jsonl(tmp_path / "resumed" / "metrics.jsonl")
    expected = read_jsonl(tmp_path / "straight" / "metrics.jsonl")
    assert [r["step"] for r in logged] == [r["step"] for r in expected] == [0, 1, 2, 3]
    for got, want in zip(logged, expected):
        for key in ("reward", "success", "loss", "grad_norm", "entropy", "lr", "clip_fraction", "ratio_mean"):
            assert got[key] == want[key], (got["step"], key)
    assert straight.final_model is not None and resumed.final_model is not None
    one, two = load_file(straight.final_model / "model.safetensors"), load_file(resumed.final_model / "model.safetensors")
    for name, value in two.items():
        torch.testing.assert_close(value, one[name], atol=0, rtol=0, msg=name)


def test_a_file_whose_groups_do_not_make_a_step_says_what_to_change(rollout_file: Path, tmp_path: Path) -> None:
    config = _config(rollout_file, tmp_path / "run", group_size=3, episodes_per_step=6, mini_batches=1)
    with pytest.raises(ConfigError, match=r"is 8 episodes \(whole groups\).*Set --episodes-per-step to a multiple"):
        run_trl(config)
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_the_trl_backend_refuses_torchrun(rollout_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="The trl backend runs in one process .* under torchrun use --backend fsdp"):
        run_trl(_config(rollout_file, tmp_path / "run"))


@pytest.mark.slow
def test_trl_run_out_of_max_seconds_ends_after_a_whole_step_with_a_final_model(rollout_file: Path,
                                                                                tmp_path: Path) -> None:
    timed = run_trl(_config(rollout_file, tmp_path / "run", max_seconds=1e-6))
    assert len(timed.metrics) == 1 and not timed.stopped_early
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [0]
    assert timed.final_model is not None and (timed.final_model / "model.safetensors").exists()
