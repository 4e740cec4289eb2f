"""The clipped, importance-corrected policy loss of GRPO and PPO, over the policy's sampled tokens.

Departures from the papers, on purpose:
- The importance-sampling correction (Yao et al. 2025, "Your efficient RL
  framework secretly brings you off-policy RL training") reweights by
  pi_old / pi_rollout, the gap between the trainer's and the server's
  numerics; truncated (TIS) caps the weight, masked (MIS) drops the tokens
  (or whole sequences) whose weight is over the cap.
- ``top_entropy_quantile`` (Wang et al. 2025, "Beyond the 80/20 Rule:
  High-Entropy Minority Tokens Drive Effective Reinforcement Learning", TRL's
  option of the same name) keeps the policy term on the highest-entropy
  tokens of each forward batch only; the KL term keeps every token. In a
  multi-turn text game most tokens are the answer's fixed markup: their
  gradient is tiny but, summed over long failed episodes, one-signed, and
  Adam scales it up to a full step (docs/log.md, 2026-11-27).
- ``negative_advantage_weight`` scales the negative advantages only. At 1
  (the default) it is GRPO; at 0 only the better-than-average samples teach
  (positive sample reinforcement, Zhu et al. 2025, "The Surprising
  Effectiveness of Negative Reinforcement in LLM Reasoning", which weights the
  positive side instead to keep pass@k: here the aim is the greedy pass@1).

Shapes: ``B`` sequences, ``T`` completion tokens per sequence, padded; ``mask`` is 1 on the
tokens the policy sampled (env replies and padding are 0 and carry no loss).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentgym.errors import ConfigError

from agentgym.trainers.losses.kl import kl_k3
from agentgym.trainers.losses.masked import masked_mean
from agentgym.trainers.settings import Correction, CorrectionLevel, LossAggregation

__all__ = [
    "LOSS_METRICS",
    "LossConfig",
    "LossOutput",
    "high_entropy_mask",
    "importance_weights",
    "policy_loss",
]


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, top_quantile: float) -> torch.Tensor:
    """1 on the masked tokens whose entropy is in the top ``top_quantile`` of them, else 0.

    The cut is the ``1 - top_quantile`` quantile of the masked tokens' entropies
    (ties at the cut are kept, as in TRL); 1 keeps every masked token, 0 only the
    highest. Never differentiated.
    """
    if not 0.0 <= top_quantile <= 1.0:
        raise ConfigError(f"top_entropy_quantile must be within [0, 1] (1: every token), got {top_quantile}.")
    valid = mask.bool()
    if top_quantile >= 1.0 or not valid.any():
        return valid.to(mask.dtype)
    values = entropy.detach().float()
    cut = torch.quantile(values[valid], 1.0 - top_quantile)
    return (valid & (values >= cut)).to(mask.dtype)


def importance_weights(old_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, mask: torch.Tensor,
                       *, mode: Correction = "truncate", level: CorrectionLevel = "token",
                       cap: float = 2.0) -> torch.Tensor:
    """Weights that correct for the server sampling with slightly different numbers than the trainer.

    ratio = pi_old / pi_rollout per token, or per sequence (the product over its
    sampled tokens). ``truncate`` caps the weight at ``cap``; ``mask`` gives 0
    where it is over ``cap``; ``none`` gives 1 everywhere. Never differentiated.
    """
    if mode == "none":
        return torch.ones_like(old_logprobs)
    if mode not in ("truncate", "mask"):
        raise ConfigError(f"importance correction mode must be none, truncate or mask, got {mode!r}.")
    log_ratio = (old_logprobs - rollout_logprobs).detach() * mask
    if level == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).expand_as(old_logprobs)
    elif level != "token":
        raise ConfigError(f"importance correction level must be token or sequence, got {level!r}.")
    ratio = torch.exp(log_ratio.clamp(max=20.0))  # exp(20) is already far past any cap
    if mode == "truncate":
        return ratio.clamp(max=cap)
    return (ratio <= cap).to(old_logprobs.dtype)


@dataclass(frozen=True)
class LossConfig:
    """How the policy loss is computed."""

    clip_low: float = 0.2
    """PPO clip below 1: the ratio is kept within [1 - clip_low, ...]."""
    clip_high: float = 0.2
    """PPO clip above 1 (DAPO's clip-higher uses a larger value, e.g. 0.28)."""
    aggregation: LossAggregation = "token_mean"
    """token_mean: over every sampled token of the batch (DAPO, TRL's default);
    sequence_mean: per sequence, then over sequences (the GRPO paper);
    constant_sum: summed and divided by ``max_tokens`` (Dr. GRPO)."""
    max_tokens: int = 1024
    """The constant of ``constant_sum``."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the reference model (0: no reference needed)."""
    correction: Correction = "truncate"
    """Importance-sampling correction against the rollout logprobs."""
    correction_level: CorrectionLevel = "token"
    correction_cap: float = 2.0
    negative_advantage_weight: float = 1.0
    """Scale of the negative advantages (1: GRPO; 0: learn from the better-than-average samples only)."""
    top_entropy_quantile: float = 1.0
    """Share of each forward batch's tokens, by entropy, that carry the policy term (1: all of them)."""

    def __post_init__(self) -> None:
        if self.clip_low < 0 or self.clip_high < 0:
            raise ConfigError(f"clip_low and clip_high must be >= 0, got {self.clip_low}, {self.clip_high}.")
        if self.aggregation not in ("token_mean", "sequence_mean", "constant_sum"):
            raise ConfigError(f"aggregation must be token_mean, sequence_mean or constant_sum, "
                              f"got {self.aggregation!r}.")
        if self.max_tokens < 1 or self.kl_coef < 0 or self.correction_cap <= 0:
            raise ConfigError("max_tokens must be >= 1, kl_coef >= 0 and correction_cap > 0.")
        if not 0.0 <= self.negative_advantage_weight <= 1.0:
            raise ConfigError(f"negative_advantage_weight must be within [0, 1] (1: GRPO, 0: the positive "
                              f"side only), got {self.negative_advantage_weight}.")
        if not 0.0 <= self.top_entropy_quantile <= 1.0:
            raise ConfigError(f"top_entropy_quantile must be within [0, 1] (1: every token, 0.2: the paper's "
                              f"choice), got {self.top_entropy_quantile}.")


#: The per-token means :func:`policy_loss` reports beside ``tokens``; trainers weight them by
#: ``tokens`` to combine micro-batches and ranks.
LOSS_METRICS = ("clip_fraction", "ratio_mean", "kl", "is_weight_mean", "policy_token_share")


@dataclass
class LossOutput:
    """The loss to backpropagate and what to log about it (detached floats)."""

    loss: torch.Tensor
    metrics: dict[str, float]


def _aggregate(per_token: torch.Tensor, mask: torch.Tensor, config: LossConfig) -> torch.Tensor:
    if config.aggregation == "token_mean":
        return masked_mean(per_token, mask)
    if config.aggregation == "sequence_mean":
        has_tokens = mask.sum(dim=-1) > 0
        per_sequence = masked_mean(per_token, mask, dim=-1)
        return per_sequence[has_tokens].mean() if has_tokens.any() else per_token.sum() * 0.0
    return (per_token * mask).sum() / (config.max_tokens * per_token.shape[0])


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, config: LossConfig = LossConfig(), *,
                rollout_logprobs: torch.Tensor | None = None,
                ref_logprobs: torch.Tensor | None = None,
                entropy: torch.Tensor | None = None) -> LossOutput:
    """The clipped surrogate loss of PPO/GRPO over the policy's sampled tokens.

    Args:
        logprobs: [B, T] log pi_theta of the sampled tokens (differentiable).
        old_logprobs: [B, T] log pi_old, the trainer's own numbers before this update.
        advantages: [B] one per sequence (from :func:`group_advantages`), or [B, T]
            one per token (GiGPO's turn-level term differs from turn to turn).
        mask: [B, T] 1 on policy-sampled tokens.
        rollout_logprobs: [B, T] what the server reported when sampling; enables
            the importance-sampling correction of ``config.correction``.
        ref_logprobs: [B, T] the reference model's, needed when ``kl_coef > 0``.
        entropy: [B, T] the policy's entropy at each token, needed when
            ``top_entropy_quantile < 1``.
    """
    mask = mask.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs.detach())
    adv = advantages.detach().to(logprobs.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    if config.negative_advantage_weight != 1.0:
        adv = torch.where(adv < 0, adv * config.negative_advantage_weight, adv)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - config.clip_low, 1.0 + config.clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    weights = torch.ones_like(per_token)
    if rollout_logprobs is not None:
        weights = importance_weights(old_logprobs, rollout_logprobs, mask, mode=config.correction,
                                     level=config.correction_level, cap=config.correction_cap)
        per_token = per_token * weights
    kept = mask
    if config.top_entropy_quantile < 1.0:
        if entropy is None:
            raise ConfigError("top_entropy_quantile < 1 needs the tokens' entropy.")
        # Dropped from the policy term only: the denominator stays every token (as in TRL).
        kept = high_entropy_mask(entropy, mask, config.top_entropy_quantile)
        per_token = per_token * kept
    kl = torch.zeros_like(per_token)
    if config.kl_coef > 0:
        if ref_logprobs is None:
            raise ConfigError("kl_coef > 0 needs ref_logprobs (a reference model's logprobs).")
        kl = kl_k3(logprobs, ref_logprobs.detach())
        per_token = per_token + config.kl_coef * kl
    loss = _aggregate(per_token, mask, config)
    with torch.no_grad():
        # Clipped where the min takes the flat, gradient-free side (as TRL counts it).
        is_clipped = (((ratio < 1.0 - config.clip_low) & (adv < 0))
                      | ((ratio > 1.0 + config.clip_high) & (adv > 0))).to(mask.dtype)
        metrics = {
            "clip_fraction": masked_mean(is_clipped, mask).item(),
            "ratio_mean": masked_mean(ratio, mask).item(),
            "kl": masked_mean(kl, mask).item(),
            "is_weight_mean": masked_mean(weights, mask).item(),
            "policy_token_share": masked_mean(kept, mask).item(),
            "tokens": mask.sum().item(),
        }
    return LossOutput(loss=loss, metrics=metrics)

