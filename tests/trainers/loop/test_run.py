"""The run skeleton: offline from a Parquet file, resume, the time budget, online against the built-in
server (the weight push, the format warm-up's KL reference), and run folders from before sections."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import yaml

from agentgym.errors import ConfigError
from agentgym.rollout.storage import RolloutWriter
from agentgym.trainers.loop.checkpoint import export_checkpoint, list_checkpoints
from agentgym.trainers.loop.metrics import read_jsonl
from agentgym.trainers.loop.run import train
from agentgym.trainers.settings import SECTIONS, TrainConfig

#: what differs between two runs of the same steps: clocks
_TIMES = ("time/", "train_tokens_per_s")


def _offline(bandit_rows: Path, out: Path, **changes: object) -> TrainConfig:
    values: dict[str, object] = {"trajectories": str(bandit_rows), "out": str(out), "steps": 4, "group_size": 4,
                                 "episodes_per_step": 8, "checkpoint_every": 2, "seed": 3}
    values.update(changes)
    return TrainConfig.from_dict(values)


def test_offline_training_logs_checkpoints_and_saves_a_model(bandit_rows: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    result = train(_offline(bandit_rows, tmp_path / "run"), device="cpu")
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4]  # numbered as the console numbers them
    for record in records:
        assert record["episodes"] == 8 and 0.0 <= record["success"] <= 1.0
        assert record["train_sequences"] == 8 and "time/sync" not in record  # offline: nothing pushed
        assert record["policy_version"] == record["step"]  # one update a step
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step-000002", "step-000004"]
    assert result.final_model is not None
    AutoModelForCausalLM.from_pretrained(result.final_model)
    saved = TrainConfig.from_yaml(tmp_path / "run" / "config.yaml")
    assert saved.run.steps == 4 and saved.run.backend == "fsdp"  # the trainer's default, written down
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert samples and {"step", "reward", "success", "messages"} <= samples[0].keys()
    assert not (tmp_path / "run" / "episodes.jsonl").exists()  # offline: no episode was played


def test_resumed_run_ends_as_the_uninterrupted_one(bandit_rows: Path, tmp_path: Path) -> None:
    straight = train(_offline(bandit_rows, tmp_path / "straight"), device="cpu")
    stopped = train(_offline(bandit_rows, tmp_path / "resumed"), stop_after=1, device="cpu")
    assert stopped.stopped_early and len(stopped.metrics) == 1
    resumed = train(_offline(bandit_rows, tmp_path / "resumed", resume=True), device="cpu")
    assert len(resumed.metrics) == 3
    logged = read_jsonl(tmp_path / "resumed" / "metrics.jsonl")
    expected = read_jsonl(tmp_path / "straight" / "metrics.jsonl")
    assert [r["step"] for r in logged] == [1, 2, 3, 4]
    assert resumed.earlier == logged[:1]  # the step before the resume: the whole run's summary starts there
    for got, want in zip(logged, expected):
        assert got.keys() == want.keys() and {"loss", "grad_norm", "entropy", "lr", "success"} <= got.keys()
        for key in (k for k in want if not k.startswith(_TIMES)):
            assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-9), (got["step"], key)
    assert straight.final_model is not None and resumed.final_model is not None


def test_max_seconds_ends_the_run_with_a_final_model_and_resume_goes_on(bandit_rows: Path, tmp_path: Path) -> None:
    timed = train(_offline(bandit_rows, tmp_path / "run", max_seconds=1e-6), device="cpu")
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [1]
    assert not timed.stopped_early and timed.final_model is not None
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step-000001"]
    resumed = train(_offline(bandit_rows, tmp_path / "run", resume=True), device="cpu")
    assert len(resumed.metrics) == 3
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [1, 2, 3, 4]


def test_an_existing_run_needs_resume(bandit_rows: Path, tmp_path: Path) -> None:
    train(_offline(bandit_rows, tmp_path / "run", steps=2), device="cpu")
    with pytest.raises(ConfigError, match=r"already holds a training run \(finished: its model is .*final\)\. "
                                          r"Continue it with --resume, or train again into another folder, "
                                          r"e\.g\. --out .*run-2\."):
        train(_offline(bandit_rows, tmp_path / "run", steps=2), device="cpu")


def test_a_bandit_rows_without_usable_rows_is_refused(make_row, tmp_path: Path) -> None:
    path = tmp_path / "failed.parquet"
    with RolloutWriter(path) as writer:
        writer.add([make_row().model_copy(update={"error": "TimeoutError"})])
    with pytest.raises(ConfigError, match="holds no usable rows"):
        train(_offline(path, tmp_path / "run"), device="cpu")


@pytest.mark.slow
def test_online_run_syncs_weights_into_the_builtin_server(tmp_path: Path) -> None:
    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "out": str(tmp_path / "run"), "steps": 2,
                                    "group_size": 4, "episodes_per_step": 8, "format_warmup_episodes": 8,
                                    "format_warmup_steps": 2, "filter_zero_variance": False})
    # Without the filter every step trains, so every step pushes (a step that trains nothing does not).
    result = train(config, device="cpu")
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert len(records) == 2 and result.final_model is not None
    for record in records:
        assert record["episodes"] == 8
        assert record["time/rollout"] > 0 and record["time/sync"] > 0 and record["time/train"] > 0
        assert record["stale_rows"] == 0
    assert [r["policy_version"] for r in records] == [1.0, 2.0]
    # The rows of step 2 were sampled by the weights pushed after step 1: version 1.
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert {s["step"] for s in samples} == {1, 2}
    # One line per episode played, ids unique within a step, what metrics.jsonl's success averages.
    episodes = read_jsonl(tmp_path / "run" / "episodes.jsonl")
    for step, record in enumerate(records, start=1):
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
    from agentgym.trainers.loop.sync import served_weight_version

    python = vllm_python()
    if python is None:
        pytest.skip(f"no Python that can import vllm: {INSTALL_HINT}")
    with VLLMServer(tiny_model, python=python, served_model_name="tiny", max_model_len=1024) as server:
        config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "out": str(tmp_path / "run"), "steps": 2,
                                        "group_size": 4, "episodes_per_step": 8, "base_url": server.base_url,
                                        "engine": "vllm", "model": "tiny", "format_warmup_episodes": 8,
                                        "format_warmup_steps": 2, "filter_zero_variance": False})
        train(config, device="cpu")
        assert served_weight_version(server.url) == "2"
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["episodes"] == 8 and r["errors"] == 0 and r["time/sync"] > 0 for r in records)


def _flat(config: TrainConfig) -> dict[str, object]:
    """``config`` as run folders saved it before sections: every setting at the top."""
    dumped = config.model_dump(mode="json")
    flat = {name: value for section in SECTIONS for name, value in dumped[section].items()}
    flat.pop("constant_sum_tokens")  # the one setting the flat layout did not have
    return flat


def test_a_run_folder_with_a_flat_config_from_before_sections_exports_and_resumes(
        bandit_rows: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    train(_offline(bandit_rows, out, steps=2), device="cpu")
    (out / "config.yaml").write_text(yaml.safe_dump(_flat(_offline(bandit_rows, out, steps=2, backend="fsdp"))))
    exported = export_checkpoint(list_checkpoints(out)[-1], tmp_path / "exported")
    assert (exported / "config.json").exists()
    resumed = train(TrainConfig.from_yaml(out / "config.yaml", {"resume": True, "steps": 4}), device="cpu")
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3, 4] and len(resumed.metrics) == 2
    assert "run" in yaml.safe_load((out / "config.yaml").read_text())  # saved again, in sections


@pytest.mark.slow
def test_after_a_push_the_servers_logprobs_are_the_trainers(make_row, tiny_model: str) -> None:
    """The importance correction compares the server's logprobs with the trainer's: after a weight push
    they must be the same numbers (within 1e-4 nats) for the same tokens."""
    import openai

    from agentgym.serve.launch import BuiltinServer
    from agentgym.trainers.engines.batch import TrainSequence, collate
    from agentgym.trainers.engines.distributed import Dist
    from trainer_helpers import learn, make_learner
    from agentgym.trainers.learners.grpo import GRPOLearner
    from agentgym.trainers.loop.sync import make_weight_sync

    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "model": tiny_model, "backend": "fsdp",
                                    "group_size": 4, "episodes_per_step": 8, "lr": 1e-2})
    learner = make_learner(GRPOLearner, config, Dist())
    rows = [make_row(answer, reward=reward, index=i)
            for i, (answer, reward) in enumerate([("<answer>Dragon</answer>", 1.0), ("<answer>Phoenix</answer>", 0.0),
                                                  ("<answer>Dragon</answer>", 1.0), ("nonsense", -0.1)])]
    assert learn(learner, rows)["train_sequences"] == 4
    prompt = [1, 40, 41, 42, 43, 44]
    with BuiltinServer(learner.engine.model_path) as server:
        api_key = server.api_key or "unused"
        with contextlib.closing(make_weight_sync("builtin", server.url, model_name=server.model_name,
                                                 api_key=server.api_key)) as sync:
            assert sync.push(learner.weights(), version=1).version == 1
        with openai.OpenAI(base_url=server.base_url, api_key=api_key, max_retries=0, timeout=60.0) as client:
            response = client.completions.create(model=server.model_name, prompt=prompt, max_tokens=12,
                                                 temperature=1.0, seed=7, logprobs=1,
                                                 extra_body={"return_token_ids": True})
    body = response.model_dump()
    assert body.get("policy_version") == 1
    choice = body["choices"][0]
    sampled, served = choice["token_ids"], choice["logprobs"]["token_logprobs"]
    assert len(sampled) == len(served) > 0
    sequence = TrainSequence(input_ids=prompt + sampled, prompt_length=len(prompt), loss_mask=[1] * len(sampled),
                             rollout_logprobs=served, has_rollout_logprobs=True, advantages=[0.0] * len(sampled))
    batch = collate([sequence], pack=False, pad_id=learner.engine.pad_id)
    trained = learner.engine.logprobs(batch)[0][0, :len(sampled)].detach()
    assert max(abs(float(a) - b) for a, b in zip(trained, served)) < 1e-4


@pytest.mark.slow
def test_the_first_grpo_step_after_the_format_warm_up_starts_at_its_kl_reference(tmp_path: Path) -> None:
    """The KL reference is the model RL starts from, after the warm-up: the first step's KL is about 0
    (with a reference taken before the warm-up it would be the warm-up's whole change)."""
    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "model": "tiny", "steps": 1, "kl_coef": 0.05,
                                    "out": str(tmp_path / "run")})
    result = train(config, device="cpu")
    assert result.metrics[0]["kl"] < 0.01
    assert (tmp_path / "run" / "reference" / "config.json").exists()  # kept for a resumed run
