"""The clipped, importance-corrected policy loss of GRPO and PPO, over the policy's sampled tokens.

Its surrogate is one of :data:`SURROGATES` (``loss.policy_loss``), each a function of the
logprobs, pi_old's, the advantages and the mask:

- ``clip`` (PPO; Schulman et al. 2017): -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A) per
  token, r = pi / pi_old;
- ``gspo`` (Zheng et al. 2025, "Group Sequence Policy Optimization"): the same clip on the
  sequence's ratio s = exp(mean over its sampled tokens of log pi - log pi_old), in the paper's
  GSPO-token form (each token's value is s, its gradient s times its own log-prob's, as verl): with
  one advantage per sequence it is GSPO itself, and it takes per-token advantages too;
- ``cispo`` (MiniMax-M1, 2025): -sg(clip(r, 1 - clip_low, 1 + clip_high)) A log pi per token: the
  weight is clipped and detached, but no token loses its gradient.

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

Shapes: ``B`` sequences, ``T`` completion tokens per sequence, padded; ``mask`` is 1 on the
tokens the policy sampled (env replies and padding are 0 and carry no loss).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from agentgym.errors import ConfigError
from agentgym.trainers.losses.kl import kl_term
from agentgym.trainers.losses.masked import masked_mean
from agentgym.trainers.losses.settings import Correction, CorrectionLevel, LossSettings

__all__ = [
    "LOSS_METRICS",
    "SURROGATES",
    "LossOutput",
    "Surrogate",
    "cispo_surrogate",
    "clip_surrogate",
    "clipped_surrogate",
    "gspo_surrogate",
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


#: The per-token means :func:`policy_loss` reports beside ``tokens``; trainers weight them by
#: ``tokens`` to combine micro-batches and ranks.
LOSS_METRICS = ("clip_fraction", "ratio_mean", "kl", "is_weight_mean", "policy_token_share")


@dataclass
class LossOutput:
    """The loss to backpropagate and what to log about it (detached floats)."""

    loss: torch.Tensor
    metrics: dict[str, float]


def _aggregate(per_token: torch.Tensor, mask: torch.Tensor, config: LossSettings) -> torch.Tensor:
    if config.aggregation == "token_mean":
        return masked_mean(per_token, mask)
    if config.aggregation == "sequence_mean":
        has_tokens = mask.sum(dim=-1) > 0
        per_sequence = masked_mean(per_token, mask, dim=-1)
        return per_sequence[has_tokens].mean() if has_tokens.any() else per_token.sum() * 0.0
    return (per_token * mask).sum() / (config.constant_sum_tokens * per_token.shape[0])


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, config: LossSettings
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's per-token clipped surrogate, negated: -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A),
    and where the min takes the flat, gradient-free side (clipped, as TRL counts it)."""
    clipped = ratio.clamp(1.0 - config.clip_low, 1.0 + config.clip_high) * advantages
    per_token = -torch.minimum(ratio * advantages, clipped)
    is_clipped = (((ratio < 1.0 - config.clip_low) & (advantages < 0))
                  | ((ratio > 1.0 + config.clip_high) & (advantages > 0)))
    return per_token, is_clipped.detach()


@dataclass
class Surrogate:
    """A policy surrogate's per-token loss, where it was clipped, and the ratio it used (for the metrics)."""

    per_token: torch.Tensor
    is_clipped: torch.Tensor
    ratio: torch.Tensor


def clip_surrogate(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                   mask: torch.Tensor, config: LossSettings) -> Surrogate:
    """PPO's clip on each token's ratio r = pi / pi_old (``loss.policy_loss=clip``)."""
    del mask
    ratio = torch.exp(logprobs - old_logprobs.detach())
    per_token, is_clipped = clipped_surrogate(ratio, advantages, config)
    return Surrogate(per_token, is_clipped, ratio)


def gspo_surrogate(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                   mask: torch.Tensor, config: LossSettings) -> Surrogate:
    """GSPO's clip on the sequence's ratio s = exp(mean of its sampled tokens' log pi - log pi_old)
    (``loss.policy_loss=gspo``), in the GSPO-token form: s_t = sg(s) pi_t / sg(pi_t), whose value is s
    at every token and whose gradient is s grad log pi_t."""
    log_ratio = (logprobs - old_logprobs.detach()).detach() * mask
    mean_log_ratio = log_ratio.sum(dim=-1, keepdim=True) / mask.sum(dim=-1, keepdim=True).clamp(min=1.0)
    # exp(20) is far past any clip; the clamp keeps a wild sequence finite without touching the gradient path
    ratio = torch.exp(logprobs - logprobs.detach() + mean_log_ratio.clamp(max=20.0))
    per_token, is_clipped = clipped_surrogate(ratio, advantages, config)
    return Surrogate(per_token, is_clipped, ratio)


def cispo_surrogate(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                    mask: torch.Tensor, config: LossSettings) -> Surrogate:
    """CISPO's clipped, detached importance weight times the advantage times the token's log-prob
    (``loss.policy_loss=cispo``): -sg(clip(r, 1 - clip_low, 1 + clip_high)) A log pi. A token whose
    ratio is past the clip keeps its gradient, at the clipped weight."""
    ratio = torch.exp(logprobs - old_logprobs.detach())
    weight = ratio.clamp(1.0 - config.clip_low, 1.0 + config.clip_high).detach()
    per_token = -weight * advantages * (logprobs * mask)
    is_clipped = (ratio < 1.0 - config.clip_low) | (ratio > 1.0 + config.clip_high)
    return Surrogate(per_token, is_clipped.detach(), ratio)


#: ``loss.policy_loss`` -> its surrogate: a new policy loss is a function and a line here
SURROGATES: dict[str, Callable[..., Surrogate]] = {
    "clip": clip_surrogate,
    "gspo": gspo_surrogate,
    "cispo": cispo_surrogate,
}


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, config: LossSettings | None = None, *,
                rollout_logprobs: torch.Tensor | None = None,
                ref_logprobs: torch.Tensor | None = None,
                entropy: torch.Tensor | None = None) -> LossOutput:
    """The policy loss of PPO/GRPO over the policy's sampled tokens: ``config.policy_loss``'s
    surrogate (:data:`SURROGATES`), importance-corrected, with the KL term, aggregated.

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
    config = config if config is not None else LossSettings()
    mask = mask.to(logprobs.dtype)
    adv = advantages.detach().to(logprobs.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    surrogate = SURROGATES[config.policy_loss](logprobs, old_logprobs, adv, mask, config)
    per_token, is_clipped, ratio = surrogate.per_token, surrogate.is_clipped, surrogate.ratio
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
    if config.kl_coef > 0 and config.kl_penalty != "k1_reward":
        if ref_logprobs is None:
            raise ConfigError("kl_coef > 0 needs ref_logprobs (a reference model's logprobs).")
        kl = kl_term(config.kl_penalty, logprobs, ref_logprobs.detach())
        per_token = per_token + config.kl_coef * kl
    loss = _aggregate(per_token, mask, config)
    with torch.no_grad():
        metrics = {
            "clip_fraction": masked_mean(is_clipped.to(mask.dtype), mask).item(),
            "ratio_mean": masked_mean(ratio, mask).item(),
            "kl": masked_mean(kl, mask).item(),
            "is_weight_mean": masked_mean(weights, mask).item(),
            "policy_token_share": masked_mean(kept, mask).item(),
            "tokens": mask.sum().item(),
        }
    return LossOutput(loss=loss, metrics=metrics)

