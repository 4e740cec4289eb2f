"""The settings of the policy loss (the ``loss`` section), read by every learner that uses it
(grpo, ppo, distill with ``distill_loss=advantage``): the surrogate, its clip, aggregation and
importance correction, the KL to the reference, and the rewards' overlong shaping; and the names of
the advantage choices."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from agentgym.trainers.sections import Section, register_section

__all__ = ["AdvantageMethod", "Baseline", "Correction", "CorrectionLevel", "KLPenalty", "LossAggregation",
           "LossSettings", "PolicyLoss"]

AdvantageMethod = Literal["grpo", "grpo_no_std", "dr_grpo", "rloo", "reinforce_pp"]
PolicyLoss = Literal["clip", "gspo", "cispo"]
Baseline = Literal["episode", "turn"]
LossAggregation = Literal["token_mean", "sequence_mean", "constant_sum"]
Correction = Literal["none", "truncate", "mask"]
CorrectionLevel = Literal["token", "sequence"]
KLPenalty = Literal["k3", "k2", "k1_reward"]


class LossSettings(Section):
    """The clipped, importance-corrected policy loss, its KL to the reference, and the overlong shaping of
    the rewards before the advantages (GRPO, PPO)."""

    policy_loss: PolicyLoss = "clip"
    """clip: PPO's clip of each token's ratio; gspo: the clip of each sequence's ratio, exp of the mean
    of its tokens' log-ratios (Zheng et al. 2025, who clip at 3e-4 / 4e-4); cispo: the clipped ratio,
    detached, weights each token's log-prob, so no token loses its gradient (MiniMax-M1)."""
    clip_low: float = Field(0.2, ge=0)
    """Clip of the ratio below 1 (PPO's, GSPO's on the sequence's ratio, CISPO's on its weight)."""
    clip_high: float = Field(0.28, ge=0)
    """Clip of the ratio above 1 (DAPO's clip-higher)."""
    aggregation: LossAggregation = "token_mean"
    """token_mean (over the mini-batch's sampled tokens), sequence_mean (per sequence, then over
    sequences) or constant_sum (Dr. GRPO: summed, over sequences times ``constant_sum_tokens``)."""
    constant_sum_tokens: int = Field(1024, ge=1)
    """The constant constant_sum divides each sequence's summed loss by."""
    kl_coef: float = Field(0.0, ge=0)
    """Weight of the KL to the model RL starts from (after the warm-up); 0: no reference kept."""
    kl_penalty: KLPenalty = "k3"
    """How the KL enters: k3 (exp(d) - d - 1 in the loss, d = ref - logp: GRPO's and TRL's; its
    gradient is the forward KL(ref || pi)'s), k2 ((logp - ref)^2 / 2 in the loss: its on-policy
    gradient is the reverse KL(pi || ref)'s), or k1_reward (logp - ref of the sampling weights,
    subtracted from the reward before the advantages: PPO's KL-in-reward)."""
    correction: Correction = "truncate"
    """Importance correction against the server's logprobs: truncate, mask or none."""
    correction_level: CorrectionLevel = "token"
    """Correct per token or per sequence."""
    correction_cap: float = Field(2.0, gt=0)
    """Cap of the importance weight."""
    top_entropy_quantile: float = Field(1.0, ge=0, le=1)
    """Share of the sampled tokens, the highest-entropy of each forward batch, that carry the policy
    loss (Wang et al. 2025 use 0.2); 1: every token."""
    overlong_max_tokens: int = Field(0, ge=0)
    """DAPO's soft overlong punishment: an episode that sampled more than overlong_max_tokens -
    overlong_cache_tokens tokens (over all its turns) loses reward, linearly up to overlong_penalty at
    overlong_max_tokens and past it, before the advantages. 0: off."""
    overlong_cache_tokens: int = Field(0, ge=0)
    """The span below overlong_max_tokens over which the overlong penalty grows (DAPO: 4096 of 20480);
    0: the whole penalty past overlong_max_tokens, none before."""
    overlong_penalty: float = Field(1.0, ge=0)
    """The reward an episode loses at overlong_max_tokens and beyond (DAPO: 1, the scale of its +-1 reward)."""

    def check(self, config: Any) -> None:
        if self.overlong_cache_tokens > self.overlong_max_tokens:
            raise ValueError(
                f"overlong_cache_tokens ({self.overlong_cache_tokens}) must not exceed overlong_max_tokens "
                f"({self.overlong_max_tokens}): the penalty starts at their difference. Set overlong_max_tokens "
                "(0 turns the overlong penalty off)")
        top_p = config.rollout.top_p
        if top_p < 1.0 and self.correction != "none":
            raise ValueError(
                f"rollout.top_p is {top_p}: the server's logprobs are then renormalised over the nucleus, "
                "which the trainer's full softmax does not match, so the importance weights would be biased. "
                "Set -s correction=none with top_p below 1, or sample with top_p 1")


register_section("loss", LossSettings)
