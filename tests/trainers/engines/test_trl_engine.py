"""The trl engine (TRL's SFTTrainer used as a component) under GRPO, through the run skeleton: offline
runs, resume, the time budget, frozen parameters, its optimiser, and torchrun refused."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.errors import ConfigError
from agentgym.trainers.engines.distributed import Dist
from agentgym.trainers.registry import engine_class
from trainer_helpers import learn, make_learner
from agentgym.trainers.learners.grpo import GRPOLearner
from agentgym.trainers.loop.metrics import read_jsonl
from agentgym.trainers.loop.run import train
from agentgym.trainers.losses.advantages import token_advantages
from agentgym.trainers.research.options import research_advantages
from agentgym.trainers.research.settings import ExperimentalSettings
from agentgym.trainers.settings import TrainConfig

BANDIT = "Bandit-LLM-v0"
_ANSWERS = ["<answer>Dragon</answer>", "<answer>Phoenix</answer>", "<answer>Dragon</answer> now", "what?"]
#: rewards of the four episodes of each group; group g is seeded 100 + g
_REWARDS = [[1.0, 0.3, 0.0, -0.1], [0.3, 1.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.3], [1.0, -0.1, 1.0, 1.0]]
#: what differs between two runs of the same steps: clocks
_TIMES = ("time/", "train_tokens_per_s")


@pytest.fixture
def rollout_file(write_groups, tmp_path: Path) -> Path:
    return write_groups(tmp_path / "rows.parquet", [list(zip(_ANSWERS, rewards)) for rewards in _REWARDS],
                        logprob=-1.0)


def _config(rollout_file: Path, out: Path, **changes: object) -> TrainConfig:
    values: dict[str, object] = {"backend": "trl", "trajectories": str(rollout_file), "out": str(out), "steps": 4,
                                 "group_size": 4, "episodes_per_step": 8, "lr": 1e-3, "seed": 3,
                                 "checkpoint_every": 100, "lr_schedule": "cosine", "mini_batches": 2}
    values.update(changes)
    return TrainConfig.from_dict(values)


def _learner(**changes: object) -> GRPOLearner:
    values: dict[str, object] = {"env_id": BANDIT, "backend": "trl", "group_size": 4, "episodes_per_step": 8}
    learner = make_learner(GRPOLearner, TrainConfig.from_dict({**values, **changes}), Dist())
    assert isinstance(learner, GRPOLearner)
    return learner


def _rows(make_row) -> list:
    answers = ["<answer>Dragon</answer>", "<answer>Phoenix</answer>", "<answer>Dragon</answer>", "nonsense"]
    return [make_row(answer, reward=reward, group=group, index=i, seed=group, prompt=f"Task {group}.")
            for group in range(2) for i, (answer, reward) in enumerate(zip(answers, [1.0, 0.3, 1.0, -0.1]))]


@pytest.mark.slow
def test_agentgym_train_backend_trl_on_a_rollout_file(rollout_file: Path, tmp_path: Path) -> None:
    """`agentgym train --trainer grpo --backend trl --trajectories FILE`: each step two whole groups, in file order."""
    result = CliRunner().invoke(app, [
        "train", "--trainer", "grpo", "--backend", "trl", "--trajectories", str(rollout_file), "--steps", "3",
        "--group-size", "4", "--episodes-per-step", "8", "--out", str(tmp_path / "run")], terminal_width=200)
    assert result.exit_code == 0, result.output
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    for record, groups in zip(records, [(0, 1), (2, 3), (0, 1)]):  # round and round the file
        rewards = [reward for g in groups for reward in _REWARDS[g]]
        assert record["episodes"] == 8 and record["reward"] == pytest.approx(sum(rewards) / 8)
        assert "time/sync" not in record and record["grad_norm"] > 0  # offline: nothing pushed
        assert record["policy_version"] == record["step"]  # one update a step
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert {s["step"] for s in samples} == {1, 2, 3}
    assert (tmp_path / "run" / "final" / "model.safetensors").exists()


@pytest.mark.slow
def test_trl_run_stopped_half_way_resumes_to_the_same_metrics_and_weights(rollout_file: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    straight = train(_config(rollout_file, tmp_path / "straight"), device="cpu")
    stopped = train(_config(rollout_file, tmp_path / "resumed"), stop_after=2, device="cpu")
    assert stopped.stopped_early and len(stopped.metrics) == 2 and stopped.final_model is None
    resumed = train(_config(rollout_file, tmp_path / "resumed", resume=True), device="cpu")
    assert len(resumed.metrics) == 2 and not resumed.stopped_early

    logged = read_jsonl(tmp_path / "resumed" / "metrics.jsonl")
    expected = read_jsonl(tmp_path / "straight" / "metrics.jsonl")
    assert [r["step"] for r in logged] == [r["step"] for r in expected] == [1, 2, 3, 4]
    for got, want in zip(logged, expected):
        assert got.keys() == want.keys() and {"loss", "grad_norm", "entropy", "lr", "clip_fraction"} <= got.keys()
        for key in (k for k in want if not k.startswith(_TIMES)):
            assert got[key] == want[key], (got["step"], key)
    assert straight.final_model is not None and resumed.final_model is not None
    one, two = load_file(straight.final_model / "model.safetensors"), load_file(resumed.final_model / "model.safetensors")
    for name, value in two.items():
        torch.testing.assert_close(value, one[name], atol=0, rtol=0, msg=name)


@pytest.mark.slow
def test_trl_run_out_of_max_seconds_ends_after_a_whole_step_with_a_final_model(rollout_file: Path,
                                                                                tmp_path: Path) -> None:
    timed = train(_config(rollout_file, tmp_path / "run", max_seconds=1e-6), device="cpu")
    assert len(timed.metrics) == 1 and not timed.stopped_early
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [1]
    assert timed.final_model is not None and (timed.final_model / "model.safetensors").exists()


def test_the_trl_backend_refuses_torchrun(rollout_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    message = "The trl backend runs in one process; under torchrun use --backend fsdp"
    config = _config(rollout_file, tmp_path / "run")
    with pytest.raises(ConfigError, match=message):
        make_learner(GRPOLearner, config, Dist(rank=0, world_size=2))  # a rank of a torchrun group
    monkeypatch.setenv("WORLD_SIZE", "2")  # torchrun's environment, before any group is joined
    with pytest.raises(ConfigError, match=message):
        engine_class("trl")(config, Dist())


def test_the_trl_model_comes_with_its_frozen_parameters_frozen(make_row) -> None:
    learner = _learner(frozen_parameters=["model.embed_tokens.*", "model.layers.0.*"])
    before = {n: p.detach().clone() for n, p in learner.engine.model.named_parameters()}
    frozen = {n for n, p in learner.engine.model.named_parameters() if not p.requires_grad}
    assert frozen and all(n.startswith(("model.embed_tokens.", "model.layers.0.")) for n in frozen)
    assert learn(learner, _rows(make_row))["train_sequences"] == 8
    after = dict(learner.engine.model.named_parameters())
    assert all(torch.equal(before[n], after[n]) for n in frozen)
    assert not torch.equal(before["model.layers.1.self_attn.v_proj.weight"],
                           after["model.layers.1.self_attn.v_proj.weight"])


def test_the_optimiser_is_the_one_the_settings_name_and_trl_holds_it() -> None:
    sgd = _learner(optimizer="sgd", momentum=0.9, lr=0.05)
    optimizer = sgd.engine.optimizer
    assert type(optimizer) is torch.optim.SGD and sgd.engine.trainer.optimizer is optimizer
    assert optimizer.param_groups[0]["momentum"] == 0.9 and optimizer.param_groups[0]["lr"] == 0.05
    adamw = _learner(adam_betas=[0.8, 0.95])
    assert type(adamw.engine.optimizer) is torch.optim.AdamW
    assert adamw.engine.optimizer.param_groups[0]["betas"] == (0.8, 0.95)
    assert adamw.engine.trainer.args.activation_checkpointing is False  # TRL would turn it on


def test_mini_batches_and_epochs_are_optimiser_steps(make_row) -> None:
    learner = _learner(mini_batches=2, epochs=3)
    metrics = learn(learner, _rows(make_row))
    assert learner.engine.optimizer_steps == 6 and learner.version == 1
    assert metrics["ratio_mean"] != pytest.approx(1.0, abs=1e-7)  # later updates compare with the step's start


@pytest.mark.slow
@pytest.mark.parametrize(("turn_weight", "baseline"), [(1.0, "episode"), (0.0, "turn")])
def test_turn_level_advantages_train_on_the_trl_engine(stall_rows, turn_weight: float, baseline: str) -> None:
    learner = _learner(env_id="Sokoban-LLM-v0", group_size=3, episodes_per_step=3, micro_batch_size=3,
                       advantage="dr_grpo", turn_advantage_weight=turn_weight, baseline=baseline)
    advantages, _ = learner.compute_advantages(stall_rows)
    plain = token_advantages(stall_rows, "dr_grpo", baseline=baseline)
    settings = ExperimentalSettings(turn_advantage_weight=turn_weight)
    assert advantages == research_advantages(stall_rows, plain, settings, "dr_grpo")[0]
    assert advantages != token_advantages(stall_rows, "dr_grpo")  # not the plain episode advantage
    metrics = learn(learner, stall_rows)
    assert metrics["train_sequences"] == 3 and math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0


# That the trl backend learns needs no 40-step run of its own (six minutes of CI): its steps equal the
# native backend's (test_backends_agree), whose defaults are shown to learn Bandit
# (test_learning.test_grpo_fsdp_defaults_learn_bandit_in_40_steps), and its online loop runs below.


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_online_trl_run_stopped_half_way_resumes_to_the_same_metrics(tmp_path: Path) -> None:
    """Stopped after 1 of 3 steps, resumed with a fresh built-in server: the same episodes, the same learning."""
    def config(out: str, **changes: object) -> TrainConfig:
        return TrainConfig.from_dict({"env_id": BANDIT, "backend": "trl", "out": str(tmp_path / out), "steps": 3,
                                      "group_size": 4, "episodes_per_step": 8, "format_warmup_episodes": 16,
                                      "format_warmup_steps": 20, "checkpoint_every": 100, "seed": 5, **changes})

    train(config("straight"), device="cpu")
    assert train(config("resumed"), stop_after=1, device="cpu").stopped_early
    train(config("resumed", resume=True), device="cpu")  # a fresh server, synced from the checkpoint
    want = read_jsonl(tmp_path / "straight" / "metrics.jsonl")
    got = read_jsonl(tmp_path / "resumed" / "metrics.jsonl")
    assert [r["step"] for r in got] == [r["step"] for r in want] == [1, 2, 3]
    for a, b in zip(got, want):
        for key in ("success", "reward", "valid_actions", "sampled_tokens", "policy_version"):
            assert a[key] == b[key], (a["step"], key)
        for key in ("loss", "grad_norm", "entropy", "lr"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (a["step"], key)
    assert any(r["grad_norm"] > 0 for r in want[1:]), want  # the resumed steps did learn something
    # episodes.jsonl: the resumed run logged the same episodes as the straight one, none twice.
    def played(out: str) -> list[tuple[int, str, bool]]:
        return [(e["step"], e["episode_id"], e["success"]) for e in read_jsonl(tmp_path / out / "episodes.jsonl")]
    assert played("resumed") == played("straight") and len(played("straight")) == 3 * 8


@pytest.mark.parametrize("backend", ["fsdp", "trl"])
def test_the_reference_kept_in_memory_does_not_follow_the_policy(backend: str, tmp_path) -> None:
    """A deep copy of accelerate's prepared model kept calling the original's forward (its
    instance-level wrapper): the KL and DPO's reference were then the live policy. The reference is
    now loaded from a folder, never copied in memory."""
    from agentgym.trainers.engines.distributed import Dist
    from agentgym.trainers.registry import engine_class
    from agentgym.trainers.settings import TrainConfig

    config = TrainConfig.from_dict({"trajectories": "unused.parquet", "backend": backend, "model": "tiny",
                                    "out": str(tmp_path)})
    engine = engine_class(backend)(config, Dist())
    engine.keep_reference(engine.model_path)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        before = engine.reference(ids).logits.clone()
        for parameter in engine.policy().parameters():
            parameter.add_(0.5)
        assert torch.equal(engine.reference(ids).logits, before)
        assert not torch.equal(engine.policy()(ids).logits, before)
