"""PPO with a critic: GAE, the clipped value loss and whitening worked by hand; the learner on real runs."""

from __future__ import annotations

import math

import pytest
import torch

from agentgym.trainers.engines.batch import to_sequences

from agentgym.trainers.losses.value import (
    explained_variance,
    gae,
    masked_whiten,
    token_gae,
    value_loss,
)


def test_gae_over_tokens_worked_by_hand() -> None:
    # rewards [0, 0, 1], values [0.5, 0.4, 0.8], gamma 0.9, lambda 0.5 (gamma * lambda = 0.45):
    # t=2: delta = 1 + 0.9*0 - 0.8 = 0.2;        A2 = 0.2
    # t=1: delta = 0 + 0.9*0.8 - 0.4 = 0.32;     A1 = 0.32 + 0.45*0.2 = 0.41
    # t=0: delta = 0 + 0.9*0.4 - 0.5 = -0.14;    A0 = -0.14 + 0.45*0.41 = 0.0445
    # returns A + V: [0.5445, 0.81, 1.0]
    advantages, returns = gae([0.0, 0.0, 1.0], [0.5, 0.4, 0.8], gamma=0.9, lam=0.5)
    assert advantages == pytest.approx([0.0445, 0.41, 0.2])
    assert returns == pytest.approx([0.5445, 0.81, 1.0])


def test_token_gae_skips_env_tokens() -> None:
    # The same episode with an env token (mask 0, value 9.9: never read) between the first two sampled tokens:
    # the sampled tokens get the numbers above, the env token 0.
    advantages, returns = token_gae([0.5, 9.9, 0.4, 0.8], [1, 0, 1, 1], reward=1.0, gamma=0.9, lam=0.5)
    assert advantages == pytest.approx([0.0445, 0.0, 0.41, 0.2])
    assert returns == pytest.approx([0.5445, 0.0, 0.81, 1.0])


def test_gae_over_turns_worked_by_hand() -> None:
    # Two turns paid 0.5 and 1.0, turn values [0.2, 0.6], gamma 1, lambda 1:
    # turn 1: delta = 1.0 - 0.6 = 0.4;             A1 = 0.4
    # turn 0: delta = 0.5 + 0.6 - 0.2 = 0.9;       A0 = 0.9 + 0.4 = 1.3
    # returns [1.5, 1.0]: with lambda 1 the reward-to-go, whatever the values.
    advantages, returns = gae([0.5, 1.0], [0.2, 0.6], gamma=1.0, lam=1.0)
    assert advantages == pytest.approx([1.3, 0.4])
    assert returns == pytest.approx([1.5, 1.0])


def test_clipped_value_loss_worked_by_hand() -> None:
    # clip 0.2. Token 1: v 1.0, v_old 0.5, R 2.0: clipped v = 0.5 + 0.2 = 0.7; errors (1-2)^2 = 1 and
    # (0.7-2)^2 = 1.69; the max is the clipped one (counted as clipped), flat in v: no gradient.
    # Token 2: v 0.6, v_old 0.5, R 0: inside the clip, both errors 0.36; gradient 0.5 * 2 * 0.6 / 2 tokens = 0.3.
    # Token 3 is masked out. Loss 0.5 * (1.69 + 0.36) / 2 = 0.5125; clip fraction 1/2.
    values = torch.tensor([[1.0, 0.6, 5.0]], requires_grad=True)
    old = torch.tensor([[0.5, 0.5, 0.0]])
    returns = torch.tensor([[2.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    out = value_loss(values, old, returns, mask, clip=0.2)
    assert out.loss.item() == pytest.approx(0.5125)
    assert out.clip_fraction == pytest.approx(0.5)
    out.loss.backward()
    assert values.grad is not None
    assert values.grad[0].tolist() == pytest.approx([0.0, 0.3, 0.0])


def test_whitening_and_explained_variance_worked_by_hand() -> None:
    # Masked entries 1, 2, 3: mean 2, unbiased variance ((1)^2 + 0 + 1^2) / 2 = 1: whitened -1, 0, 1;
    # the unmasked 7 stays 7.
    x = torch.tensor([1.0, 2.0, 3.0, 7.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0])
    assert masked_whiten(x, mask).tolist() == pytest.approx([-1.0, 0.0, 1.0, 7.0], abs=1e-6)
    # returns [1, 2, 3] (variance 2/3), values [1, 2, 2]: errors [0, 0, 1], variance (mean 1/3) = 2/9;
    # 1 - (2/9) / (2/3) = 2/3.
    returns = torch.tensor([1.0, 2.0, 3.0])
    assert explained_variance(returns, torch.tensor([1.0, 2.0, 2.0]), torch.ones(3)) == pytest.approx(2 / 3)
    assert explained_variance(returns, returns, torch.ones(3)) == pytest.approx(1.0)


# -- the learner -------------------------------------------------------------------------------

from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from agentgym.trainers.loop.run import train  # noqa: E402
from agentgym.trainers.settings import TrainConfig  # noqa: E402


def _config(tmp_path: Path, **settings: Any) -> TrainConfig:
    base = {"trainer": "ppo", "out": str(tmp_path / "run"), "model": "tiny", "lr": 1e-3, "lr_schedule": "constant",
            "checkpoint_every": 100, "micro_batch_size": 8, "seed": 3}
    return TrainConfig.from_dict({**base, **settings})


def test_turn_level_targets_use_the_turn_rewards(make_row: Any) -> None:
    """Two turns paid 0.5 and 1.0 (the episode split into two rows), values read at each turn's first token:
    the numbers of test_gae_over_turns_worked_by_hand, each turn's advantage on all its tokens."""
    from agentgym.trainers.learners.ppo import turn_level_targets

    first = make_row("<answer>Griffin</answer>", reward=1.5)
    second = make_row("<answer>Dragon</answer>", reward=1.5, row_index=1, prompt="Turn two.")
    two_turns = {"turn_rewards": [0.5, 1.0], "num_turns": 2}
    first = first.model_copy(update=two_turns)
    second = second.model_copy(update={**two_turns, "turns": [second.turns[0].model_copy(update={"turn": 1})]})
    values = []
    for row, turn_value in ((first, 0.2), (second, 0.6)):
        row_values = [9.0] * len(row.completion_ids)
        row_values[row.turns[0].start] = turn_value
        values.append(row_values)
    targets = turn_level_targets([first, second], values, gamma=1.0, lam=1.0)
    for row, target, advantage, ret in zip((first, second), targets, (1.3, 0.4), (1.5, 1.0)):
        span = row.turns[0]
        assert target.advantages[span.start:span.end] == pytest.approx([advantage] * (span.end - span.start))
        assert sum(target.value_mask) == 1 and target.value_mask[span.start] == 1
        assert target.returns[span.start] == pytest.approx(ret)


@pytest.mark.slow
@pytest.mark.parametrize("value_model", ["head", "critic"])
def test_the_critic_learns_the_returns_of_fixed_rows(make_row: Any, tmp_path: Path, value_model: str) -> None:
    """With gamma = lambda = 1 the value targets are the episodes' rewards whatever the values: step after
    step on the same rows at a real (Adam) critic lr, the value error falls and the critic explains them."""
    from agentgym.trainers.engines.distributed import Dist
    from trainer_helpers import learn, make_learner
    from agentgym.trainers.learners.ppo import PPOLearner

    rows = [make_row(answer, reward=reward, group=0, index=i, logprob=-1.0)
            for i, (answer, reward) in enumerate([("<answer>Dragon</answer>", 1.0), ("nope", 0.0),
                                                  ("<answer>Phoenix</answer>", 0.5), ("x y z", 0.0)])]
    config = _config(tmp_path, trajectories="unused.parquet", value_model=value_model, critic_lr=1e-3, lr=1e-4,
                     backend="fsdp")
    learner = make_learner(PPOLearner, config, Dist())
    metrics = [learn(learner, rows) for _ in range(10)]
    losses = [m["value_loss"] for m in metrics]
    assert losses[-1] < 0.3 * losses[0], losses
    assert metrics[-1]["explained_variance"] > metrics[0]["explained_variance"]
    assert metrics[0]["return_mean"] == pytest.approx(metrics[-1]["return_mean"])  # fixed targets


@pytest.mark.parametrize("backend", ["fsdp", "trl"])
def test_a_value_head_reads_the_policy_pass_s_own_forward(make_row: Any, tmp_path: Path, backend: str) -> None:
    """With a head on the policy a training micro-batch runs the trunk once, not once for the logprobs and
    again for the values (two sets of activations kept for one backward: PPO's memory was 1.7x GRPO's on
    SmolLM2, docs/results.md). Four short rows are one micro-batch: one forward with gradient a step, and
    the values it gives are the ones a forward of their own gives."""
    from agentgym.trainers.engines.distributed import Dist
    from trainer_helpers import learn, make_learner
    from agentgym.trainers.learners.ppo import PPOLearner

    rows = [make_row(answer, reward=reward, group=0, index=i, logprob=-1.0)
            for i, (answer, reward) in enumerate([("<answer>Dragon</answer>", 1.0), ("nope", 0.0),
                                                  ("<answer>Phoenix</answer>", 0.5), ("x y z", 0.0)])]
    config = _config(tmp_path, trajectories="unused.parquet", value_model="head", backend=backend)
    learner = make_learner(PPOLearner, config, Dist())
    engine, with_gradient = learner.engine, []
    forward = engine.forward

    def counted(model: Any, batch: Any, **options: Any) -> Any:
        with_gradient.append(torch.is_grad_enabled())
        return forward(model, batch, **options)

    engine.forward = counted  # type: ignore[method-assign]
    batch = learner.collate(to_sequences(rows, [0.0] * len(rows)))
    with torch.no_grad():
        own, _ = learner.critic.values(batch)
        _, _, hidden = engine.logprobs_and_hidden(batch)
        shared, _ = learner.critic.values(batch, hidden)
    torch.testing.assert_close(shared, own)
    with_gradient.clear()
    learn(learner, rows)
    assert with_gradient.count(True) == 1, with_gradient


@pytest.mark.slow
def test_online_ppo_on_bandit(tmp_path: Path) -> None:
    """Plays the env through the run's server: every step logs the critic's numbers, the run exports it."""
    result = train(_config(tmp_path, env_id="Bandit-LLM-v0", steps=4, episodes_per_step=8, group_size=4,
                           max_tokens=12, concurrency=8, critic_lr=1e-2, format_warmup_episodes=0), device="cpu")
    assert len(result.metrics) == 4
    for metrics in result.metrics:
        for name in ("policy_loss", "value_loss", "explained_variance", "value_mean", "return_mean",
                     "advantage_mean", "value_clip_fraction", "reward"):
            assert name in metrics and math.isfinite(metrics[name]), name
    assert result.final_model is not None
    saved = torch.load(result.final_model / "critic.pt", weights_only=True)
    assert not saved["separate"] and set(saved["state_dict"]) == {"head.weight", "head.bias"}


@pytest.mark.slow
@pytest.mark.parametrize("value_model", ["head", "critic"])
def test_recorded_rows_train_and_resume_to_the_same_critic(bandit_rows: Path, tmp_path: Path,
                                                          value_model: str) -> None:
    """From a file of rows (whole groups): stopped after a step and resumed, the critic (and policy) end as
    in the uninterrupted run's."""
    common = {"trajectories": str(bandit_rows), "steps": 3, "episodes_per_step": 8, "group_size": 4,
              "value_model": value_model, "critic_lr": 1e-2}
    whole = train(_config(tmp_path / "whole", **common), device="cpu")
    stopped = train(_config(tmp_path / "resumed", **common), stop_after=1, device="cpu")
    assert stopped.stopped_early
    resumed = train(_config(tmp_path / "resumed", resume=True, **common), device="cpu")
    assert len(resumed.metrics) == 2
    assert resumed.metrics[-1]["value_loss"] == pytest.approx(whole.metrics[-1]["value_loss"], rel=1e-4)
    assert whole.final_model is not None and resumed.final_model is not None
    a = torch.load(whole.final_model / "critic.pt", weights_only=True)
    b = torch.load(resumed.final_model / "critic.pt", weights_only=True)
    assert a["separate"] == b["separate"] == (value_model == "critic")
    assert a["state_dict"].keys() == b["state_dict"].keys()
    start = torch.load(stopped.out / "checkpoints" / "step-000001" / "trainer.pt", weights_only=True)
    for name, tensor in a["state_dict"].items():
        assert torch.allclose(tensor, b["state_dict"][name], rtol=1e-5, atol=1e-7), name
    moved = max((a["state_dict"][n] - start["critic"]["model"][n]).abs().max().item() for n in a["state_dict"])
    assert moved > 0  # the critic learned after the resume point


def test_grpo_only_settings_are_errors_for_ppo(tmp_path: Path, bandit_rows: Path) -> None:
    from agentgym.errors import ConfigError

    with pytest.raises(ConfigError, match="grpo.advantage is set"):
        train(_config(tmp_path, trajectories=str(bandit_rows), advantage="rloo"), device="cpu")


@pytest.mark.parametrize("policy_loss", ["gspo", "cispo"])
def test_ppo_takes_the_policy_losses_and_the_overlong_shaping(make_row: Any, tmp_path: Path, policy_loss: str
                                                              ) -> None:
    """PPO reads the loss section as GRPO does: its rewards lose the overlong penalty before GAE (a hard
    limit of 1 token: every episode loses 0.25), and its policy loss is the chosen surrogate."""
    from agentgym.trainers.engines.distributed import Dist
    from trainer_helpers import learn, make_learner
    from agentgym.trainers.learners.ppo import PPOLearner

    rows = [make_row("<answer>Dragon</answer>", reward=1.0, index=0), make_row("nope", reward=0.0, index=1)]
    config = _config(tmp_path, trajectories="unused.parquet", backend="fsdp", policy_loss=policy_loss, epochs=2,
                     overlong_max_tokens=1, overlong_penalty=0.25, whiten_advantages=False)
    metrics = learn(make_learner(PPOLearner, config, Dist()), rows)
    assert metrics["overlong_penalty"] == pytest.approx(0.25) and metrics["overlong_episodes"] == 1.0
    assert metrics["return_mean"] < 0.5 and metrics["updates"] == 2.0
