"""``agentgym export``: a checkpoint becomes a model folder with the weights the run had then."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.trainers.loop.run import train
from agentgym.trainers.settings import TrainConfig


def _train(bandit_rows: Path, out: Path, **changes: object) -> Path:
    config = TrainConfig.from_dict({"trajectories": str(bandit_rows), "out": str(out), "steps": 4, "group_size": 4,
                                    "episodes_per_step": 8, "checkpoint_every": 2, "seed": 3, "lr": 1e-3, **changes})
    result = train(config, device="cpu")
    assert result.final_model is not None
    return result.final_model


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return dict(AutoModelForCausalLM.from_pretrained(folder).state_dict())


def _export(*args: str) -> str:
    result = CliRunner().invoke(app, ["export", *args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(("backend", "lora"), [("fsdp", False), ("fsdp", True), ("trl", False)],
                         ids=["full", "lora", "trl"])
def test_the_newest_checkpoint_exports_the_final_weights_and_an_older_one_its_own(
        bandit_rows: Path, tmp_path: Path, backend: str, lora: bool) -> None:
    run = tmp_path / "run"
    final = _weights(_train(bandit_rows, run, backend=backend, lora=lora))
    assert "written to" in _export(str(run))
    newest = _weights(run / "step-000004")
    assert newest.keys() == final.keys()
    for name, tensor in final.items():
        torch.testing.assert_close(newest[name], tensor, msg=name)
    _export(str(run / "checkpoints" / "step-000002"), "--out", str(tmp_path / "two"))
    older = _weights(tmp_path / "two")
    assert any(not torch.equal(older[name], tensor) for name, tensor in final.items())


def test_a_folder_without_checkpoints_or_a_missing_step_is_refused_saying_what_there_is(
        bandit_rows: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["export", str(tmp_path)])
    assert result.exit_code == 2
    assert "neither a checkpoint folder" in result.output
    run = tmp_path / "run"
    _train(bandit_rows, run)
    result = CliRunner().invoke(app, ["export", str(run), "--step", "3"])
    assert result.exit_code == 2
    assert "no checkpoint of step 3; it has step(s) 2, 4" in result.output
