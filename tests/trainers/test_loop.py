"""The fsdp loop: offline from a Parquet file, resume, and online against the built-in server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.rollout.storage import RolloutWriter
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.fsdp.checkpoint import list_checkpoints
from agentgym.trainers.loop import run_training
from agentgym.trainers.metrics import read_jsonl


def _offline(bandit_rows: Path, out: Path, **changes: object) -> TrainConfig:
    values: dict[str, object] = {"trajectories": str(bandit_rows), "out": str(out), "steps": 4, "group_size": 4,
                                 "episodes_per_step": 8, "checkpoint_every": 2, "seed": 3}
    values.update(changes)
    return TrainConfig(**values)


def test_offline_training_logs_checkpoints_and_saves_a_model(bandit_rows: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    result = run_training(_offline(bandit_rows, tmp_path / "run"), device="cpu")
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    for record in records:
        assert record["episodes"] == 8 and 0.0 <= record["success"] <= 1.0
        assert record["train_sequences"] == 8 and record["time/sync"] == 0.0
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step-000002", "step-000004"]
    assert result.final_model is not None
    AutoModelForCausalLM.from_pretrained(result.final_model)
    assert TrainConfig.from_yaml(tmp_path / "run" / "config.yaml").steps == 4
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert samples and {"step", "reward", "success", "messages"} <= samples[0].keys()
    assert not (tmp_path / "run" / "episodes.jsonl").exists()  # offline: no episode was played


def test_resumed_run_ends_as_the_uninterrupted_one(bandit_rows: Path, tmp_path: Path) -> None:
    straight = run_training(_offline(bandit_rows, tmp_path / "straight"), device="cpu")
    stopped = run_training(_offline(bandit_rows, tmp_path / "resumed"), stop_after=1, device="cpu")
    assert stopped.stopped_early and len(stopped.metrics) == 1
    resumed = run_training(_offline(bandit_rows, tmp_path / "resumed", resume=True), device="cpu")
    assert len(resumed.metrics) == 3
    logged = read_jsonl(tmp_path / "resumed" / "metrics.jsonl")
    expected = read_jsonl(tmp_path / "straight" / "metrics.jsonl")
    assert [r["step"] for r in logged] == [0, 1, 2, 3]
    for got, want in zip(logged, expected):
        for key in ("success", "reward", "loss", "grad_norm", "entropy", "kl", "lr", "train_sequences"):
            assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-9), (got["step"], key)
    assert straight.final_model is not None and resumed.final_model is not None


def test_max_seconds_ends_the_run_with_a_final_model_and_resume_goes_on(bandit_rows: Path, tmp_path: Path) -> None:
    timed = run_training(_offline(bandit_rows, tmp_path / "run", max_seconds=1e-6), device="cpu")
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [0]
    assert not timed.stopped_early and timed.final_model is not None
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step-000001"]
    resumed = run_training(_offline(bandit_rows, tmp_path / "run", resume=True), device="cpu")
    assert len(resumed.metrics) == 3
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [0, 1, 2, 3]


def test_an_existing_run_needs_resume(bandit_rows: Path, tmp_path: Path) -> None:
    run_training(_offline(bandit_rows, tmp_path / "run", steps=2), device="cpu")
    with pytest.raises(ConfigError, match=r"already holds a training run\. Continue it with --resume"):
        run_training(_offline(bandit_rows, tmp_path / "run", steps=2), device="cpu")


def test_a_bandit_rows_without_usable_rows_is_refused(make_row, tmp_path: Path) -> None:
    path = tmp_path / "failed.parquet"
    with RolloutWriter(path) as writer:
        writer.add([make_row().model_copy(update={"error": "TimeoutError"})])
    with pytest.raises(ConfigError, match="holds no usable rows"):
        run_training(_offline(path, tmp_path / "run"), device="cpu")


@pytest.mark.slow
def test_online_run_syncs_weights_into_the_builtin_server(tmp_path: Path) -> None:
    config = TrainConfig(env_id="Bandit-LLM-v0", out=str(tmp_path / "run"), steps=2, group_size=4,
                         episodes_per_step=8, format_warmup_episodes=8, format_warmup_steps=2)
    result = run_training(config, device="cpu")
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert len(records) == 2 and result.final_model is not None
    for record in records:
        assert record["episodes"] == 8
        assert record["time/rollout"] > 0 and record["time/sync"] > 0 and record["time/train"] > 0
        assert record["stale_rows"] == 0
    assert [r["policy_version"] for r in records] == [1.0, 2.0]
    # The rows of step 1 were sampled by the weights pushed after step 0: version 1.
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert {s["step"] for s in samples} == {0, 1}
    # One line per episode played, ids unique within a step, what metrics.jsonl's success averages.
    episodes = read_jsonl(tmp_path / "run" / "episodes.jsonl")
    for step, record in enumerate(records):
        played = [e for e in episodes if e["step"] == step]
        assert len({e["episode_id"] for e in played}) == 8
        assert sum(e["success"] for e in played) / 8 == pytest.approx(record["success"])
        assert all(e["turns"] >= 1 and isinstance(e["seed"], int) for e in played)
    assert (tmp_path / "run" / "sync" / "model.safetensors").exists()
    assert json.loads((list_checkpoints(tmp_path / "run")[-1] / "state.json").read_text())["step"] == 2


@pytest.mark.vllm
@pytest.mark.slow
def test_online_run_against_real_vllm_pushes_each_step(tmp_path: Path, tiny_model: str) -> None:
    from agentgym.serve.vllm import INSTALL_HINT, VLLMServer, vllm_python
    from agentgym.trainers.sync import served_weight_version

    python = vllm_python()
    if python is None:
        pytest.skip(f"no Python that can import vllm: {INSTALL_HINT}")
    with VLLMServer(tiny_model, python=python, served_model_name="tiny", max_model_len=1024) as server:
        config = TrainConfig(env_id="Bandit-LLM-v0", out=str(tmp_path / "run"), steps=2, group_size=4,
                             episodes_per_step=8, base_url=server.base_url, engine="vllm", model="tiny",
                             format_warmup_episodes=8, format_warmup_steps=2)
        run_training(config, device="cpu")
        assert served_weight_version(server.url) == "2"
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1]
    assert all(r["episodes"] == 8 and r["errors"] == 0 and r["time/sync"] > 0 for r in records)
