"""KL estimators as losses: which divergence's gradient each one follows (Schulman 2020; issue 47).

A three-token softmax, pi = softmax([1, 2, 0.5]) = [0.2312, 0.6285, 0.1402] against
pi_ref = softmax([0, 1, 1]) = [0.1554, 0.4223, 0.4223]. For softmax logits theta,
grad_theta KL(pi_ref || pi) = pi - pi_ref = [0.0758, 0.2062, -0.2821] (worked by hand), and the
expectation over the policy's own samples of an estimator's gradient is
sum_x pi(x) grad_theta k(log pi(x), log pi_ref(x)), enumerated here over the three tokens.
"""

from __future__ import annotations

import math

import pytest
import torch

from agentgym.trainers.losses.kl import kl_k1, kl_k2, kl_k3
from agentgym.trainers.losses.policy import policy_loss
from agentgym.trainers.losses.settings import LossSettings

LOGITS = [1.0, 2.0, 0.5]
REF = torch.log_softmax(torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64), -1)


def _expected_gradient(estimator) -> list[float]:
    theta = torch.tensor(LOGITS, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(theta, -1)
    weights = logp.exp().detach()  # the sampling distribution: no gradient through it
    total = sum(weights[x] * estimator(logp[x], REF[x]) for x in range(3))
    return torch.autograd.grad(total, theta)[0].tolist()


def test_k3_as_a_loss_follows_the_forward_kl() -> None:
    pi = torch.softmax(torch.tensor(LOGITS, dtype=torch.float64), -1)
    forward_kl_gradient = (pi - REF.exp()).tolist()  # = grad KL(pi_ref || pi) for softmax logits
    assert forward_kl_gradient == pytest.approx([0.0758, 0.2062, -0.2821], abs=1e-4)
    assert _expected_gradient(kl_k3) == pytest.approx(forward_kl_gradient, abs=1e-12)


def test_k2_as_a_loss_follows_the_reverse_kl() -> None:
    theta = torch.tensor(LOGITS, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(theta, -1)
    reverse = (logp.exp() * (logp - REF)).sum()  # KL(pi || pi_ref), what GRPO means to penalise
    reverse_gradient = torch.autograd.grad(reverse, theta)[0].tolist()
    assert reverse_gradient == pytest.approx([0.0486, 0.1322, -0.1809], abs=1e-4)
    assert _expected_gradient(kl_k2) == pytest.approx(reverse_gradient, abs=1e-12)
    assert _expected_gradient(kl_k3) != pytest.approx(reverse_gradient, abs=1e-3)  # k3's is not it


def test_k1_as_a_loss_has_no_expected_gradient() -> None:
    assert _expected_gradient(kl_k1) == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)


def test_the_loss_adds_the_chosen_estimator_and_k1_goes_to_the_reward_instead() -> None:
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])
    mask = torch.ones(1, 2)
    zero = torch.tensor([0.0])
    k3 = policy_loss(logp, logp.detach(), zero, mask, LossSettings(kl_coef=0.1), ref_logprobs=ref)
    # d = ref - logp = [-0.5, 1.0]: k3 = [e^-0.5 + 0.5 - 1, e^1 - 1 - 1] = [0.10653, 0.71828]
    assert k3.metrics["kl"] == pytest.approx((math.exp(-0.5) + 0.5 - 1.0 + math.exp(1.0) - 1.0 - 1.0) / 2, abs=1e-6)
    k2 = policy_loss(logp, logp.detach(), zero, mask, LossSettings(kl_coef=0.1, kl_penalty="k2"), ref_logprobs=ref)
    assert k2.metrics["kl"] == pytest.approx((0.5 * 0.25 + 0.5 * 1.0) / 2)  # (logp - ref)^2 / 2
    assert k2.loss.item() == pytest.approx(0.1 * 0.3125)
    in_reward = policy_loss(logp, logp.detach(), zero, mask, LossSettings(kl_coef=0.1, kl_penalty="k1_reward"))
    assert in_reward.loss.item() == 0.0 and in_reward.metrics["kl"] == 0.0  # no KL term in the loss
