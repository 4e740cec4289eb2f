"""The trl backend: TRL's GRPOTrainer with agentgym's rollouts, advantages, loss and weight sync."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policies import RandomPolicy
from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.batch import row_advantages, token_advantages
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.metrics import read_jsonl
from agentgym.trainers.sft import load_model_and_tokenizer
from agentgym.trainers.trl_backend import (
    AgentGymGRPOTrainer,
    _base_model,
    FixedRollout,
    episode_reward,
    grpo_args,
    run_trl,
    trl_train_on_rows,
)

BANDIT = "Bandit-LLM-v0"


def _rows(tokenizer: Any, episodes: int, group_size: int) -> list[TrajectoryRow]:
    """Bandit episodes of the random well-formed policy, in groups sharing a seed."""
    config = RolloutConfig(env_id=BANDIT, episodes=episodes, group_size=group_size, seed=11)
    return asyncio.run(EnvManager(config, RandomPolicy(5), renderer=ChatRenderer(tokenizer)).run())


def test_one_generation_batch_is_one_training_step(tmp_path: Path) -> None:
    config = TrainConfig(env_id=BANDIT, backend="trl", steps=40, episodes_per_step=32, group_size=8,
                         micro_batch_size=8, kl_coef=0.01, clip_low=0.2, clip_high=0.28)
    args = grpo_args(config, tmp_path)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.steps_per_generation) == (8, 4, 4)
    assert (args.num_generations, args.num_iterations, args.max_steps) == (8, 1, 40)
    assert (args.beta, args.epsilon, args.epsilon_high) == (0.01, 0.2, 0.28)
    assert args.activation_checkpointing is False  # TRL would turn it on


def test_mini_batches_and_epochs_are_optimiser_steps(tmp_path: Path) -> None:
    config = TrainConfig(env_id=BANDIT, backend="trl", steps=10, episodes_per_step=32, group_size=8,
                         micro_batch_size=8, mini_batches=2, epochs=3)
    args = grpo_args(config, tmp_path)
    assert (args.gradient_accumulation_steps, args.steps_per_generation) == (2, 4)
    assert (args.num_iterations, args.max_steps) == (3, 60)


def test_the_optimiser_is_the_one_the_config_names(tmp_path: Path) -> None:
    from transformers import Trainer

    sgd = grpo_args(TrainConfig(env_id=BANDIT, backend="trl", optimizer="sgd", momentum=0.9, lr=0.05), tmp_path)
    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(sgd)
    assert cls is torch.optim.SGD and kwargs["momentum"] == 0.9 and kwargs["lr"] == 0.05
    adamw = grpo_args(TrainConfig(env_id=BANDIT, backend="trl", adam_betas=(0.8, 0.95)), tmp_path)
    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(adamw)
    assert cls is torch.optim.AdamW and kwargs["betas"] == (0.8, 0.95)


def test_a_batch_that_does_not_split_says_what_would(tmp_path: Path) -> None:
    config = TrainConfig(env_id=BANDIT, backend="trl", episodes_per_step=24, group_size=8, micro_batch_size=16)
    with pytest.raises(ConfigError, match=r"whole micro-batches .* e\.g\. --micro-batch-size 12"):
        grpo_args(config, tmp_path)


def test_the_trl_model_comes_with_its_frozen_parameters_frozen(tiny_model: str, tmp_path: Path) -> None:
    config = TrainConfig(env_id=BANDIT, backend="trl", model=tiny_model, frozen_parameters=["model.layers.0.*"])
    model, _, _, _ = _base_model(config, tmp_path, True, None)  # resuming: loaded, no warm-up
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen and all(n.startswith("model.layers.0.") for n in frozen)


def test_the_reward_function_reads_the_episode_reward() -> None:
    assert episode_reward(["p", "q"], ["a", "b"], env_reward=[1, -0.1], trainer_state=None) == [1.0, -0.1]


@pytest.mark.slow
def test_fixed_rows_get_shared_advantages_and_env_tokens_carry_no_loss(tiny_model: str, tmp_path: Path) -> None:
    model, tokenizer = load_model_and_tokenizer(tiny_model)
    rows = _rows(tokenizer, episodes=16, group_size=8)
    config = TrainConfig(env_id=BANDIT, backend="trl", steps=2, episodes_per_step=16, group_size=8,
                         filter_zero_variance=True, out=str(tmp_path))
    trainer = AgentGymGRPOTrainer(config, model, tokenizer, FixedRollout(rows, tokenizer.eos_token_id),
                                  args=grpo_args(config, tmp_path / "trl"))
    model.train()
    output = trainer._generate_and_score_completions([{"prompt": "x"} for _ in rows])

    expected = row_advantages(rows, "grpo", filter_zero_variance=True)
    for i, row in enumerate(rows):
        keep = expected[i] is not None
        width = len(row.completion_ids)
        sampled = output["advantages"][i, :width][torch.tensor(row.completion_mask, dtype=torch.bool)]
        assert sampled.tolist() == pytest.approx([expected[i] or 0.0] * int(sampled.numel()), abs=1e-6)
        assert output["tool_mask"][i, :width].tolist() == [m * keep for m in row.completion_mask]
        assert output["completion_ids"][i, :width].tolist() == row.completion_ids
    assert not output["has_rollout_logprobs"].any()  # a model-free policy: no server logprobs

    timing = trl_train_on_rows(config, rows, steps=2)
    assert timing["steps"] == 1 and timing["train_tokens"] == sum(
        len(r.prompt_ids) + len(r.completion_ids) for r in rows)
    assert timing["train_tokens_per_s"] > 0


@pytest.mark.slow
@pytest.mark.parametrize(("turn_weight", "baseline"), [(1.0, "episode"), (0.0, "turn")])
def test_turn_level_advantages_reach_trl_token_by_token(tiny_model: str, tmp_path: Path, stall_rows,
                                                        turn_weight: float, baseline: str) -> None:
    model, tokenizer = load_model_and_tokenizer(tiny_model)
    config = TrainConfig(env_id="Sokoban-LLM-v0", backend="trl", steps=1, episodes_per_step=3, group_size=3,
                         micro_batch_size=3, advantage="dr_grpo", turn_advantage_weight=turn_weight,
                         baseline=baseline, out=str(tmp_path))
    trainer = AgentGymGRPOTrainer(config, model, tokenizer, FixedRollout(stall_rows, tokenizer.eos_token_id),
                                  args=grpo_args(config, tmp_path / "trl"))
    model.train()
    output = trainer._generate_and_score_completions([{"prompt": "x"} for _ in stall_rows])
    expected = token_advantages(stall_rows, "dr_grpo", turn_weight=turn_weight, baseline=baseline)
    assert expected != token_advantages(stall_rows, "dr_grpo")  # not the plain episode advantage
    assert output["advantages"].shape == output["completion_ids"].shape
    for i, row in enumerate(stall_rows):
        width = len(row.completion_ids)
        assert output["advantages"][i, :width].tolist() == pytest.approx(expected[i], abs=1e-5)
        assert not output["advantages"][i, width:].any()  # padding
    trained = trl_train_on_rows(config, stall_rows, steps=2)  # TRL's own loop shuffles and splits them
    assert trained["steps"] == 1 and math.isfinite(trained["loss"])


@pytest.mark.slow
def test_trl_backend_learns_bandit_with_the_defaults(tmp_path: Path) -> None:
    """The proof that it learns: from chance to >= 0.9 success within 40 steps, no tuning flags."""
    config = TrainConfig(env_id=BANDIT, backend="trl", steps=40, out=str(tmp_path / "run"))
    result = run_trl(config)

    success = [record["success"] for record in read_jsonl(tmp_path / "run" / "metrics.jsonl")]
    assert len(success) == 40
    assert 0.25 <= success[0] <= 0.75, "the format warm-up teaches the format, not the answer"
    assert sum(success[-5:]) / 5 >= 0.9, success
    assert result.final_model is not None and (result.final_model / "model.safetensors").exists()
    assert torch.isfinite(torch.tensor([m["loss"] for m in result.metrics])).all()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_online_trl_run_stopped_half_way_resumes_to_the_same_metrics(tmp_path: Path) -> None:
    """Stopped after 1 of 3 steps, resumed with a fresh built-in server: the same episodes, the same learning."""
    def config(out: str, **changes: object) -> TrainConfig:
        return TrainConfig(env_id=BANDIT, backend="trl", out=str(tmp_path / out), steps=3, group_size=4,
                           episodes_per_step=8, format_warmup_episodes=16, format_warmup_steps=20,
                           checkpoint_every=100, seed=5, **changes)

    run_trl(config("straight"))
    assert run_trl(config("resumed"), stop_after=1).stopped_early
    run_trl(config("resumed", resume=True))  # the warmed-up base from the run folder, synced from the checkpoint
    want = read_jsonl(tmp_path / "straight" / "metrics.jsonl")
    got = read_jsonl(tmp_path / "resumed" / "metrics.jsonl")
    assert [r["step"] for r in got] == [r["step"] for r in want] == [0, 1, 2]
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
