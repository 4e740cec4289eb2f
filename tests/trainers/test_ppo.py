"""PPO with a critic: GAE, the clipped value loss and whitening worked by hand; the learner on real runs."""

from __future__ import annotations

import pytest
import torch

from agentgym.trainers.ppo_losses import explained_variance, gae, masked_whiten, token_gae, value_loss


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
