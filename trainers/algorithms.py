"""The RL arithmetic both backends share: group advantages and the clipped token-level loss.

Pure functions of tensors, so each is tested against numbers worked out by hand
and the TRL and FSDP backends cannot drift apart.

Shapes: ``B`` sequences (a GRPO group is ``group_size`` consecutive ones), ``T``
completion tokens per sequence, padded; ``mask`` is 1 on the tokens the policy
sampled (env replies and padding are 0 and carry no loss).

Departures from the papers, on purpose:
- GRPO scales by the group's *sample* std (``correction=1``), as TRL does.
- Dr. GRPO (Liu et al. 2025) drops the std and the per-sequence length
  normalisation: the loss is summed over tokens and divided by a constant
  (``max_tokens``), not by each sequence's length.
- GiGPO's turn-level advantage (Feng et al. 2025, "Group-in-Group Policy
  Optimization for LLM Agent Training") normalises with the same method as
  the episode-level one (``grpo``: by the anchor group's std; ``dr_grpo``:
  not at all), where the paper has a switch of its own.
- ``negative_advantage_weight`` scales the negative advantages only. At 1
  (the default) it is GRPO; at 0 only the better-than-average samples teach
  (positive sample reinforcement, Zhu et al. 2025, "The Surprising
  Effectiveness of Negative Reinforcement in LLM Reasoning", which weights the
  positive side instead to keep pass@k: here the aim is the greedy pass@1).
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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from agentgym.errors import ConfigError

__all__ = [
    "LOSS_METRICS",
    "AdvantageMethod",
    "Baseline",
    "Correction",
    "CorrectionLevel",
    "LossAggregation",
    "LossConfig",
    "LossOutput",
    "anchor_advantages",
    "discounted_returns",
    "dpo_loss",
    "group_advantages",
    "high_entropy_mask",
    "importance_weights",
    "kl_k3",
    "masked_mean",
    "playing_baseline_advantages",
    "policy_loss",
    "zero_variance_groups",
]

# The choices are defined beside the settings that name them (kept free of torch for the CLI).
from agentgym.trainers.settings import (  # noqa: E402
    AdvantageMethod,
    Baseline,
    Correction,
    CorrectionLevel,
    LossAggregation,
)


def _grouped(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    if rewards.dim() != 1:
        raise ConfigError(f"rewards must be one value per sequence (1-D), got shape {tuple(rewards.shape)}.")
    if group_size < 1 or rewards.numel() % group_size:
        raise ConfigError(
            f"{rewards.numel()} rewards do not split into groups of {group_size}; "
            "rows must come in whole groups (episodes_per_step a multiple of group_size)."
        )
    return rewards.view(-1, group_size)


def group_advantages(rewards: torch.Tensor, group_size: int, method: AdvantageMethod = "grpo",
                     eps: float = 1e-4) -> torch.Tensor:
    """One advantage per sequence, relative to the other sequences of its group.

    - ``grpo``: (r - mean) / (std + eps)
    - ``grpo_no_std`` and ``dr_grpo``: r - mean
    - ``rloo``: r - mean of the *other* members (leave one out)
    """
    grouped = _grouped(rewards.float(), group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    if method == "grpo":
        std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
        advantages = (grouped - mean) / (std + eps)
    elif method in ("grpo_no_std", "dr_grpo"):
        advantages = grouped - mean
    elif method == "rloo":
        if group_size < 2:
            raise ConfigError("rloo needs group_size >= 2: each sample's baseline is the others' mean.")
        advantages = (grouped - mean) * group_size / (group_size - 1)
    else:
        raise ConfigError(f"Unknown advantage method {method!r}; use grpo, grpo_no_std, dr_grpo or rloo.")
    return advantages.reshape(-1)


def discounted_returns(rewards: Sequence[float], discount: float) -> list[float]:
    """Each turn's return-to-go: ``G_t = r_t + discount * G_{t+1}`` (GiGPO's Eq. 5)."""
    returns = [0.0] * len(rewards)
    running = 0.0
    for turn in range(len(rewards) - 1, -1, -1):
        running = rewards[turn] + discount * running
        returns[turn] = running
    return returns


def anchor_advantages(returns: Sequence[float], anchors: Sequence[Hashable],
                      method: AdvantageMethod = "grpo") -> list[float]:
    """GiGPO's turn-level advantage: each turn's return against the other turns taken from the same state.

    ``anchors[i]`` names the state turn ``i`` acted in (its observation); the
    turns sharing an anchor form a group, and :func:`group_advantages` with
    ``method`` compares their returns. A turn whose state no other turn saw
    gets 0: nothing to compare it with. So in a state the policy keeps coming
    back to (a move that changes nothing, played again and again), the move that
    broke out and won is pushed up against the ones that stayed, even inside
    an episode that won overall.
    """
    if len(returns) != len(anchors):
        raise ConfigError(f"{len(returns)} returns but {len(anchors)} anchors: one anchor per turn.")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for turn, anchor in enumerate(anchors):
        members[anchor].append(turn)
    advantages = [0.0] * len(returns)
    for turns in members.values():
        if len(turns) < 2:
            continue
        values = torch.tensor([returns[t] for t in turns], dtype=torch.float64)
        for turn, advantage in zip(turns, group_advantages(values, len(turns), method).tolist()):
            advantages[turn] = advantage
    return advantages


def playing_baseline_advantages(returns: Sequence[Sequence[float]]) -> list[list[float]]:
    """Each turn's return-to-go against the other episodes of its group still playing at that turn.

    ``returns[i][t]`` is episode i's return-to-go from its turn t. Turn t of
    episode i gets ``returns[i][t]`` minus the mean of ``returns[j][t]`` over
    the other episodes j that played a turn t (leave one out, as RLOO). Why: in
    a multi-turn env the failed episodes are often the long ones (they run to
    the turn limit), so with one advantage per episode their late turns, which
    no won episode reaches, are all pushed down, and the tokens every turn
    shares (the answer's markup, a move the policy is sure of) with them: in
    every batch the same way, though the push cancels in expectation. Against
    the episodes still playing, the advantages of each turn index sum to zero
    across the group, so that push is gone, and a turn after which nothing
    differed (all that still play fail alike) gets 0. The baseline of episode
    i's turn comes from the other episodes only, so the policy gradient stays
    unbiased. A turn that no other episode reached keeps the baseline of the
    last turn that one did; a lone episode gets 0 throughout.
    """
    length = max(map(len, returns), default=0)
    totals = [sum(r[turn] for r in returns if len(r) > turn) for turn in range(length)]
    counts = [sum(len(r) > turn for r in returns) for turn in range(length)]
    advantages: list[list[float]] = []
    for own in returns:
        if not own or counts[0] < 2:  # no other episode played: nothing to compare with
            advantages.append([0.0] * len(own))
            continue
        baseline, values = 0.0, []
        for turn, value in enumerate(own):
            if counts[turn] > 1:  # always at turn 0; later, none left: keep the last turn's baseline
                baseline = (totals[turn] - value) / (counts[turn] - 1)
            values.append(float(value) - baseline)
        advantages.append(values)
    return advantages


def zero_variance_groups(rewards: torch.Tensor, group_size: int, atol: float = 1e-6) -> torch.Tensor:
    """A bool per sequence: True where every member of its group got the same reward.

    Such a group has zero advantage everywhere and only dilutes the batch
    (DAPO's dynamic sampling drops it).
    """
    grouped = _grouped(rewards.float(), group_size)
    spread = grouped.max(dim=1).values - grouped.min(dim=1).values
    return (spread <= atol).repeat_interleave(group_size)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1 (0 when the mask is empty, never NaN)."""
    mask = mask.to(values.dtype)
    total = (values * mask).sum() if dim is None else (values * mask).sum(dim=dim)
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return total / count.clamp(min=1.0)


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) by Schulman's k3 estimator: exp(d) - d - 1 with d = ref - logp.

    Unbiased, always >= 0, and low-variance; what GRPO and TRL use.
    """
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1.0


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


def dpo_loss(chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor, ref_rejected: torch.Tensor,
             *, beta: float, kind: str = "sigmoid", chosen_tokens: torch.Tensor | None = None,
             rejected_tokens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """DPO's loss of each pair, and each pair's implicit-reward margin.

    ``chosen``/``rejected``: the policy's summed logprobs of each pair's two completions
    (their sampled tokens only); ``ref_*`` the reference's. With h = (chosen - ref_chosen)
    - (rejected - ref_rejected), the margin of the implicit rewards is beta * h and

    - sigmoid (Rafailov et al. 2023): -log sigmoid(beta * h);
    - ipo (Azar et al. 2023): (h' - 1 / (2 beta))^2, h' the same difference of the log-ratios
      each divided by its completion's tokens (``*_tokens``), as TRL's DPOTrainer does, so
      that beta means the same whatever the lengths.
    """
    chosen_ratio, rejected_ratio = chosen - ref_chosen, rejected - ref_rejected
    margin = beta * (chosen_ratio - rejected_ratio)
    if kind == "sigmoid":
        return -torch.nn.functional.logsigmoid(margin), margin.detach()
    if kind == "ipo":
        if chosen_tokens is None or rejected_tokens is None:
            raise ValueError("IPO needs the completions' token counts")
        mean_margin = chosen_ratio / chosen_tokens.clamp(min=1) - rejected_ratio / rejected_tokens.clamp(min=1)
        return (mean_margin - 1.0 / (2.0 * beta)) ** 2, margin.detach()
    raise ValueError(f"unknown DPO loss {kind!r}: sigmoid or ipo")
