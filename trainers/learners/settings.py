"""The settings each learner reads: GRPO's advantages, PPO's critic, DPO's pairs, SFT's batches, distillation's teacher,
the reward model's held-out pairs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agentgym.trainers.losses.settings import AdvantageMethod, Baseline
from agentgym.trainers.sections import Section, register_section

__all__ = ["DPOSettings", "DistillSettings", "GRPOSettings", "PPOSettings", "RMSettings", "SFTSettings"]


class GRPOSettings(Section):
    """GRPO: group-relative advantages, and which groups take part (its loss is the ``loss`` section)."""

    advantage: AdvantageMethod = "grpo"
    """Group advantage: grpo, grpo_no_std, dr_grpo or rloo; or reinforce_pp (REINFORCE++: each token's
    return-to-go of the reward less kl_coef times the k1 of the tokens from it on, with
    kl_penalty=k1_reward; normalised over the step's tokens, no group baseline)."""
    baseline: Baseline = "episode"
    """episode: the episode's reward against its group's, on every turn; turn: each turn's reward-to-go
    against the group's episodes still playing at that turn."""
    filter_zero_variance: bool = True
    """Leave out groups whose rewards are all equal (their advantage is zero everywhere)."""
    dynamic_sampling_rounds: int = Field(0, ge=0)
    """DAPO's dynamic sampling, with filter_zero_variance: while a step has fewer than its groups_per_step
    groups whose rewards differ, play another round of groups_per_step new groups, at most this many
    rounds; the first groups_per_step that differ are trained on. 0: off. Online only."""

    @model_validator(mode="after")
    def _refill_filters(self) -> GRPOSettings:
        if self.dynamic_sampling_rounds and not self.filter_zero_variance:
            raise ValueError("dynamic_sampling_rounds refills the groups filter_zero_variance leaves out: "
                             "set filter_zero_variance=true with it")
        return self


class PPOSettings(Section):
    """PPO with a critic (verl's): GAE advantages from a learned value, the clipped value loss."""

    value_model: Literal["head", "critic"] = "head"
    """head: a scalar linear head on the policy's last hidden state (the trunk shared); critic: a copy of
    the start model with its own scalar head, trained beside the policy."""
    critic_lr: float = Field(1e-3, ge=0)
    """Learning rate of the value head (and of the separate critic), on the run's schedule."""
    value_loss_coef: float = Field(0.5, ge=0)
    """Weight of the value loss added to the policy loss."""
    value_clip: float = Field(0.5, ge=0)
    """The value loss's clip: the new value kept within this of the one the advantages were computed with."""
    gamma: float = Field(1.0, ge=0, le=1)
    """GAE's discount, per step (a sampled token, or a turn with gae_level=turn)."""
    gae_lambda: float = Field(1.0, ge=0, le=1)
    """GAE's lambda (1: the return less the value; 0: the one-step TD error)."""
    gae_level: Literal["token", "turn"] = "token"
    """token: every sampled token is a step, the episode's reward at its last; turn: every turn is a step,
    its value read where its first token is predicted, paid the env's turn reward."""
    whiten_advantages: bool = True
    """Whiten the advantages over the step's sampled tokens (verl does)."""


class DPOSettings(Section):
    """DPO: which episodes pair up, and the loss on each pair."""

    beta: float = Field(0.1, gt=0)
    """DPO's beta: how far the policy may move from the reference (the model the run starts from);
    for IPO, its tau."""
    dpo_loss: Literal["sigmoid", "ipo"] = "sigmoid"
    """sigmoid: -log sigmoid(beta x the margin of the summed log-ratios) (Rafailov et al. 2023);
    ipo: (the margin of the per-token mean log-ratios - 1 / (2 beta))^2 (Azar et al. 2023), as TRL."""
    pairs: Literal["best_worst", "all"] = "best_worst"
    """Pairs of a group (one seed): best_worst: its highest-reward episode against its lowest; all:
    every two of its episodes, the higher reward chosen. Either way only where the rewards differ by
    more than ``pair_margin``."""
    pair_margin: float = Field(0.0, ge=0)
    """A pair's rewards must differ by more than this."""


class SFTSettings(Section):
    """SFT: how a batch of rows runs."""

    sft_passes: int = Field(4, ge=1)
    """Each batch runs as at least this many forward passes (rows of similar length together, each at
    most optim.micro_batch_tokens tokens) whose gradients add up: the same step, less padding."""


class DistillSettings(Section):
    """Distillation: the teacher, and the KL the student learns from it."""

    teacher: str | None = None
    """Teacher loaded in this process: 'tiny', a folder or a hub id. It must share the student's
    tokenizer."""
    teacher_url: str | None = None
    """Or the teacher behind an OpenAI-compatible server (ending in /v1) that returns vLLM's
    prompt_logprobs: agentgym serve, or vLLM. Its context must hold a whole row plus one token."""
    teacher_api_key: str = "EMPTY"
    """API key of ``teacher_url``."""
    teacher_model: str | None = None
    """The teacher's model name at ``teacher_url`` (none: the first one it lists)."""
    teacher_top_k: int | None = Field(None, ge=1, le=20)
    """Offline: the forward KL over the teacher's top k tokens plus one bucket for the rest of its mass
    (1 to 20); none: over the full vocabulary with the teacher in this process, 20 from a server."""
    distill_loss: Literal["reverse_kl", "advantage"] = "reverse_kl"
    """On-policy: reverse_kl: the per-token reverse KL to the teacher on the student's own tokens is the
    loss; advantage: its negative is each token's advantage in GRPO's clipped policy loss (at GRPO's
    default clip and importance correction)."""
    teacher_concurrency: int = Field(16, ge=1)
    """Requests in flight to ``teacher_url``."""

    @model_validator(mode="after")
    def _one_teacher(self) -> DistillSettings:
        if self.teacher is not None and self.teacher_url is not None:
            raise ValueError("give the teacher either in this process (teacher) or behind a server "
                             "(teacher_url), not both")
        return self


class RMSettings(Section):
    """Reward model (--trainer rm): the pairs held out to measure it, and its loss. Its pairs are DPO's
    (``pairs``, ``pair_margin``)."""

    eval_fraction: float = Field(0.1, ge=0, lt=1)
    """Share of the file's groups (a pairs file: of its pairs) held out, never trained on: the pairs
    ``eval_accuracy`` is measured on (0: none)."""
    eval_every: int = Field(1, ge=1)
    """Measure the held-out pairs every this many steps (and at the last)."""
    center_rewards_coefficient: float = Field(0.0, ge=0)
    """Adds this times the mean of (r_chosen + r_rejected)^2 to the loss, so scores stay near 0
    (Eisenstein et al. 2023; TRL's RewardConfig option of that name); 0: off."""


register_section("grpo", GRPOSettings)
register_section("ppo", PPOSettings)
register_section("dpo", DPOSettings)
register_section("sft", SFTSettings)
register_section("distill", DistillSettings)
register_section("rm", RMSettings)
