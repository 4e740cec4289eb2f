"""PPO with a critic, the pure pieces: GAE, advantage whitening, the clipped value loss, explained variance.

As verl computes them (``verl/trainer/ppo/core_algos.py``): GAE over an episode's steps, the
step after the last one terminal (value 0) when the episode ended and the value of the state it
was cut in when it was truncated (a turn budget, the context limit: verl's response-length cut
treats every end as terminal), the advantage whitened over the batch's
steps, and the value loss the larger of the clipped and the unclipped squared error, halved.
A step is a sampled token (token-level GAE) or a turn (turn-level); env and tool tokens are
not steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentgym.trainers.losses.masked import masked_mean

__all__ = ["ValueLoss", "explained_variance", "gae", "masked_whiten", "token_gae", "value_loss"]


def gae(rewards: Sequence[float], values: Sequence[float], gamma: float, lam: float, last_value: float = 0.0
        ) -> tuple[list[float], list[float]]:
    """Generalised advantage estimation over one episode's steps: (advantages, returns).

    ``delta_t = r_t + gamma * V_{t+1} - V_t``, ``A_t = delta_t + gamma * lam * A_{t+1}`` and the value
    target ``R_t = A_t + V_t``. Past the last step ``V`` is ``last_value``: 0 when the episode ended
    (terminal), the value of the state it was cut in when it was truncated (the return goes on there).
    """
    if len(rewards) != len(values):
        raise ValueError(f"{len(rewards)} rewards but {len(values)} values: one of each per step")
    advantages = [0.0] * len(rewards)
    running, next_value = 0.0, last_value
    for t in range(len(rewards) - 1, -1, -1):
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
        next_value = values[t]
    return advantages, [a + v for a, v in zip(advantages, values)]


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps)`` over the masked entries (the unbiased variance, as verl's
    ``masked_whiten``); entries off the mask are left as they are."""
    mask = mask.to(values.dtype)
    count = mask.sum()
    mean = (values * mask).sum() / count.clamp(min=1.0)
    var = (((values - mean) ** 2) * mask).sum() / (count - 1).clamp(min=1.0)
    return torch.where(mask.bool(), (values - mean) * torch.rsqrt(var + eps), values)


@dataclass
class ValueLoss:
    """The value loss of a batch and the share of its tokens where the clipped error was the larger."""

    loss: torch.Tensor
    clip_fraction: float


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip: float) -> ValueLoss:
    """verl's clipped value loss: ``0.5 * mean(max((v - R)^2, (clip(v, v_old +- clip) - R)^2))`` over ``mask``.

    ``values`` [B, T] the critic's now (differentiable), ``old_values`` its values when the
    rollout's advantages were computed, ``returns`` the GAE targets.
    """
    old = old_values.detach()
    clipped = old + (values - old).clamp(-clip, clip)
    unclipped_error = (values - returns) ** 2
    clipped_error = (clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(unclipped_error, clipped_error), mask)
    with torch.no_grad():
        fraction = masked_mean((clipped_error > unclipped_error).to(values.dtype), mask).item()
    return ValueLoss(loss=loss, clip_fraction=fraction)


def explained_variance(returns: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 - Var(R - V) / Var(R)`` over ``mask``: 1 a perfect critic, 0 no better than a constant."""
    mask = mask.to(returns.dtype)
    count = mask.sum().clamp(min=1.0)

    def variance(x: torch.Tensor) -> torch.Tensor:
        mean = (x * mask).sum() / count
        return (((x - mean) ** 2) * mask).sum() / count

    spread = variance(returns)
    if spread.item() <= 1e-12:
        return 0.0
    return float(1.0 - variance(returns - values) / spread)


def token_gae(values: Sequence[float], mask: Sequence[int], reward: float, gamma: float, lam: float,
              last_value: float = 0.0) -> tuple[list[float], list[float]]:
    """Token-level GAE over an episode's completion tokens: the steps are the sampled ones (``mask`` 1),
    the episode's reward comes at the last of them; env and tool tokens (``mask`` 0) are skipped and get
    advantage and return 0. ``last_value``: see :func:`gae`. (advantages, returns), one per token."""
    steps = [i for i, sampled in enumerate(mask) if sampled]
    rewards = [0.0] * len(steps)
    if steps:
        rewards[-1] = reward
    advantages, returns = gae(rewards, [values[i] for i in steps], gamma, lam, last_value)
    per_token_advantages, per_token_returns = [0.0] * len(mask), [0.0] * len(mask)
    for i, advantage, target in zip(steps, advantages, returns):
        per_token_advantages[i], per_token_returns[i] = advantage, target
    return per_token_advantages, per_token_returns
