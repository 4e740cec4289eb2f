"""A training run's settings, in sections, each owned and checked by the part that reads it.

    config = TrainConfig.from_dict({"run": {"steps": 80}, "optim": {"lr": 5e-4}})
    config = TrainConfig().updated({"lr": 5e-4, "rollout.group_size": 4})   # flat names work too
    config.save_yaml(Path(config.run.out) / "config.yaml")

| section | read by | holds |
| --- | --- | --- |
| ``run`` | the run skeleton (:mod:`agentgym.trainers.loop.run`) | trainer, backend, run folder, steps, seed, budget, checkpoints, logging |
| ``model`` | every learner | the model, its precision, LoRA, frozen parameters |
| ``server`` | the skeleton's serving | the server to play against and the weight push |
| ``rollout`` | the skeleton's rollouts | the env, the episodes of a step, sampling; or a rollout file |
| ``optim`` | every learner | optimiser, learning rate and its schedule, batch split |
| ``warmup`` | the skeleton, before RL | the format warm-up of a random-init model |
| ``grpo`` | the GRPO learner | advantages and the clipped policy loss |
| ``sft`` | the SFT learner | how an SFT batch runs |
| ``native`` | the native (fsdp) backend | sequence packing |
| ``experimental`` | the GRPO learner | options that did not win their comparison (docs/log.md); kept for the runs that use them |
| ``distill`` | the distillation learner | the teacher and the KL to it |
| ``dpo`` | the DPO learner | preference pairs and the DPO loss |
| ``ppo`` | the PPO learner | the value model, GAE and the value loss |

Each setting has one name, unique across sections, so ``-s lr=5e-4`` and
``-s optim.lr=5e-4`` mean the same. A setting's help is its docstring (pydantic
reads attribute docstrings): ``agentgym train --settings`` and docs/training.md
show them, never written twice. A setting the chosen trainer or backend would
ignore is an error that names it (:meth:`TrainConfig.check_used`).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentgym.errors import ConfigError
from agentgym.rollout.seeds import read_seeds

__all__ = [
    "SECTIONS", "AdvantageMethod", "Baseline", "Correction", "CorrectionLevel", "DPOSettings", "DistillSettings",
    "ExperimentalSettings",
    "GRPOSettings", "LRSchedule", "LossAggregation", "ModelSettings", "NativeSettings", "OptimSettings",
    "OptimizerName", "PPOSettings", "RolloutSettings", "RunSettings", "SFTSettings", "ServerSettings", "TrainConfig",
    "WarmupSettings", "setting_help", "setting_rows", "settings_markdown",
]

LRSchedule = Literal["constant", "linear", "cosine"]
OptimizerName = Literal["adamw", "sgd"]
AdvantageMethod = Literal["grpo", "grpo_no_std", "dr_grpo", "rloo"]
Baseline = Literal["episode", "turn"]
LossAggregation = Literal["token_mean", "sequence_mean", "constant_sum"]
Correction = Literal["none", "truncate", "mask"]
CorrectionLevel = Literal["token", "sequence"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True,
                              strict=False)


class RunSettings(_Section):
    """The run: which trainer on which backend, its folder, length, budget, checkpoints and logs."""

    trainer: str = "grpo"
    """Trainer: grpo (online RL), ppo (RL with a critic), dpo (preference pairs), sft (fine-tune on rows)
    or distill (learn a teacher's distributions), or a plugin's."""
    backend: str | None = None
    """fsdp (native PyTorch, FSDP2 under torchrun) or trl; none: the trainer's default (sft: trl, the
    others: fsdp)."""
    out: str = "runs/train"
    """Run folder: settings, metrics, checkpoints, the final model, the report."""
    steps: int = Field(40, ge=1)
    """Training steps: each a batch of rows (a rollout, or a slice of a file), an update and a push."""
    seed: int = Field(0, ge=0)
    """Seed of everything: the levels each step plays, sampling, the model, the data order."""
    resume: bool = False
    """Continue from the newest checkpoint in ``out``."""
    max_seconds: float = Field(0.0, ge=0)
    """Wall-clock budget in seconds from the start (0: none). The run ends after the step that spends
    it, with a checkpoint and the final model; the lr schedule still spans ``steps``."""
    checkpoint_every: int = Field(10, ge=1)
    """Save a resumable checkpoint every this many steps (and at the end)."""
    keep_checkpoints: int = Field(2, ge=1)
    """Checkpoints kept on disk (older ones are deleted)."""
    tensorboard: bool = False
    """Also log to TensorBoard (needs the tensorboard package)."""
    wandb: bool = False
    """Also log to Weights & Biases (needs wandb)."""
    wandb_project: str = "agentgym"
    """The W&B project."""
    sample_episodes: int = Field(2, ge=0)
    """Episodes per step kept in samples.jsonl (for the report)."""
    log_episodes: bool = True
    """Write episodes.jsonl, a line per episode played, to pair a run with its control
    (scripts/compare_runs.py)."""


class ModelSettings(_Section):
    """The model trained: where it comes from, its precision, LoRA, frozen parameters."""

    model: str = "tiny"
    """Model: 'tiny' (built locally), a local folder or a hub id."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Precision of the trained weights."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, about 30% slower)."""
    lora: bool = False
    """Train a LoRA adapter (peft) instead of every weight."""
    lora_rank: int = Field(16, ge=1)
    """LoRA rank."""
    lora_alpha: int = Field(32, ge=1)
    """LoRA alpha."""
    lora_dropout: float = Field(0.0, ge=0, le=1)
    """LoRA dropout."""
    lora_target_modules: list[str] = Field(default_factory=lambda: ["all-linear"])
    """Modules that get adapters (peft names; all-linear: every linear layer)."""
    frozen_parameters: list[str] = Field(default_factory=list)
    """Parameters left as they are: shell patterns of their names, e.g. model.layers.0.*; not with lora."""

    @model_validator(mode="after")
    def _lora_or_frozen(self) -> ModelSettings:
        if self.lora and self.frozen_parameters:
            raise ValueError("frozen_parameters and lora do not mix: LoRA keeps every base weight fixed already")
        return self

    def lora_config(self) -> Any:
        """peft's ``LoraConfig`` of these settings (both backends train the adapter it describes)."""
        from peft import LoraConfig

        targets = "all-linear" if self.lora_target_modules == ["all-linear"] else self.lora_target_modules
        return LoraConfig(r=self.lora_rank, lora_alpha=self.lora_alpha, lora_dropout=self.lora_dropout,
                          target_modules=targets, task_type="CAUSAL_LM")


class ServerSettings(_Section):
    """The server episodes are played against, and how the new weights reach it."""

    base_url: str | None = None
    """OpenAI-compatible server to play against (ending in /v1); none: start the built-in one."""
    api_key: str = "EMPTY"
    """API key of ``base_url`` (the built-in server started here gets a random one)."""
    engine: Literal["builtin", "vllm"] = "builtin"
    """What ``base_url`` is: builtin (agentgym serve) or vllm; decides how weights are pushed."""
    sync_weights: bool = True
    """Push the new weights to the server after each step (off: a fixed server, off-policy)."""


class RolloutSettings(_Section):
    """What a step plays (env, episodes, sampling), or the rollout file read instead."""

    env_id: str | None = None
    """Env to play (online training)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """The env's constructor arguments."""
    trajectories: str | None = None
    """Train on the rows of this Parquet file instead of playing (sft: several, comma-separated)."""
    group_size: int = Field(8, ge=1)
    """Episodes per seed (a GRPO group); advantages are relative within a group."""
    episodes_per_step: int = Field(32, ge=1)
    """Episodes a step plays; a multiple of ``group_size``."""
    max_turns: int | None = Field(None, ge=1)
    """Turn limit per episode (default: the env's); the env's prompt names it."""
    turn_budget: int | None = Field(None, ge=1)
    """Stop episodes after this many turns without telling the env (its prompt keeps its own limit)."""
    max_tokens: int = Field(16, ge=1)
    """Tokens one turn may sample."""
    max_context_tokens: int = Field(2048, ge=1)
    """Tokens an episode may hold: prompt, turns and replies."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature; the trainer divides its logits by it too."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling. Below 1 the server's logprobs are renormalised over the nucleus, which the
    importance correction cannot match: set grpo.correction=none with it."""
    concurrency: int = Field(64, ge=1)
    """Episodes playing at once."""
    level_seeds: str | None = None
    """Play only these levels: a file of seeds, one per line (agentgym eval --failed-seeds-out), round
    and round; none: new seeds every step."""
    max_staleness: int = Field(1, ge=0)
    """Drop rows sampled by weights more than this many versions older than the learner's."""
    asynchronous: bool = False
    """Play the next step's episodes while this step learns, with the weights the server has; the new
    weights reach the server between turns of the episodes in flight (one step of staleness at most).
    Off: play, then learn, in turn."""

    @model_validator(mode="after")
    def _whole_groups(self) -> RolloutSettings:
        if self.episodes_per_step % self.group_size:
            raise ValueError(f"episodes_per_step ({self.episodes_per_step}) must be a multiple of group_size "
                             f"({self.group_size}) so every group is complete")
        if self.level_seeds is not None:
            read_seeds(self.level_seeds)  # a bad file fails now, not at the first step
        if self.asynchronous and self.trajectories is not None:
            raise ValueError("asynchronous overlaps playing with learning; a rollout file plays nothing")
        if self.asynchronous and self.max_staleness < 1:
            raise ValueError("asynchronous plays each step with the weights one step behind: it needs "
                             "max_staleness of 1 or more")
        return self

    @property
    def groups_per_step(self) -> int:
        return self.episodes_per_step // self.group_size


class OptimSettings(_Section):
    """The optimiser, its learning-rate schedule, and how a step's rows split into updates."""

    optimizer: OptimizerName = "adamw"
    """adamw, or sgd (steps along the gradient itself: weights the batch says little about barely move;
    needs a far larger lr)."""
    lr: float = Field(1e-3, ge=0)
    """Peak learning rate: tiny random-init models like it high, pretrained ones 1e-6 to 1e-5."""
    weight_decay: float = Field(0.0, ge=0)
    """Weight decay."""
    adam_betas: tuple[float, float] = (0.9, 0.99)
    """AdamW betas."""
    momentum: float = Field(0.0, ge=0, lt=1)
    """SGD momentum (0: plain gradient steps)."""
    warmup_steps: int = Field(0, ge=0)
    """Linear warm-up of the learning rate over this many optimiser steps."""
    lr_schedule: LRSchedule = "cosine"
    """How the rate falls after the warm-up, over the run's optimiser steps: constant, linear or cosine."""
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    """Where linear and cosine end, as a fraction of ``lr``."""
    max_grad_norm: float = Field(1.0, ge=0)
    """Clip the gradient's global norm to this (0: no clipping)."""
    mini_batches: int = Field(1, ge=1)
    """Optimiser steps per training step: the step's rows split into this many mini-batches."""
    epochs: int = Field(1, ge=1)
    """Passes over a step's rows (PPO epochs); above 1 the clip starts to matter."""
    micro_batch_size: int = Field(16, ge=1)
    """Sequences per forward pass; gradients accumulate over a mini-batch's micro-batches."""

    @model_validator(mode="after")
    def _betas(self) -> OptimSettings:
        if not all(0.0 <= beta < 1.0 for beta in self.adam_betas):
            raise ValueError(f"adam_betas must be two numbers in [0, 1), got {list(self.adam_betas)}")
        return self

    @property
    def updates_per_step(self) -> int:
        """Optimiser steps per training step: one per mini-batch, each epoch."""
        return self.mini_batches * self.epochs


class WarmupSettings(_Section):
    """The format warm-up before RL: a random-init model learns to write a readable action."""

    format_warmup_episodes: int = Field(64, ge=0)
    """Before RL, fine-tune on this many episodes of the env's random well-formed policy (actions only):
    a random-init model never writes a valid action, so GRPO would see equal rewards. 0: off.
    Pretrained models: 0."""
    format_warmup_steps: int = Field(40, ge=0)
    """Optimiser steps of the format warm-up."""
    format_warmup_batch_size: int = Field(8, ge=1)
    """Episodes per optimiser step of the format warm-up."""
    format_warmup_lr: float | None = Field(3e-3, ge=0)
    """Learning rate of the format warm-up (none: ``lr``)."""


class GRPOSettings(_Section):
    """GRPO: group advantages and the clipped, importance-corrected policy loss."""

    advantage: AdvantageMethod = "grpo"
    """Group advantage: grpo, grpo_no_std, dr_grpo or rloo."""
    baseline: Baseline = "episode"
    """episode: the episode's reward against its group's, on every turn; turn: each turn's reward-to-go
    against the group's episodes still playing at that turn."""
    filter_zero_variance: bool = True
    """Leave out groups whose rewards are all equal (their advantage is zero everywhere)."""
    clip_low: float = Field(0.2, ge=0)
    """PPO clip below 1."""
    clip_high: float = Field(0.28, ge=0)
    """PPO clip above 1 (DAPO's clip-higher)."""
    aggregation: LossAggregation = "token_mean"
    """token_mean (over the mini-batch's sampled tokens), sequence_mean (per sequence, then over
    sequences) or constant_sum (Dr. GRPO: summed, over sequences times ``constant_sum_tokens``)."""
    constant_sum_tokens: int = Field(1024, ge=1)
    """The constant constant_sum divides each sequence's summed loss by."""
    kl_coef: float = Field(0.0, ge=0)
    """Weight of the k3 KL to the model RL starts from (after the warm-up); 0: no reference kept."""
    correction: Correction = "truncate"
    """Importance correction against the server's logprobs: truncate, mask or none."""
    correction_level: CorrectionLevel = "token"
    """Correct per token or per sequence."""
    correction_cap: float = Field(2.0, gt=0)
    """Cap of the importance weight."""
    top_entropy_quantile: float = Field(1.0, ge=0, le=1)
    """Share of the sampled tokens, the highest-entropy of each forward batch, that carry the policy
    loss (Wang et al. 2025 use 0.2); 1: every token."""


class SFTSettings(_Section):
    """SFT: how a batch of rows runs."""

    sft_passes: int = Field(4, ge=1)
    """Each batch, sorted by length, runs as this many forward passes whose gradients add up: the same
    step, less padding."""


class NativeSettings(_Section):
    """The native (fsdp) backend only."""

    pack_sequences: bool = False
    """Pack sequences end to end (no padding). Without flash attention the packed attention is dense,
    so it pays only for very uneven lengths."""
    micro_batch_tokens: int = Field(8192, ge=1)
    """Tokens per packed forward pass."""


class ExperimentalSettings(_Section):
    """Options that did not beat their control in docs/log.md; kept working for the runs that use them."""

    filter_uniform_success: bool = False
    """Also leave out groups whose episodes all won or all lost (DAPO's dynamic sampling)."""
    turn_advantage_weight: float = Field(0.0, ge=0)
    """GiGPO: add this times each turn's advantage against the group's turns that acted on the same
    observation (0: off)."""
    turn_discount: float = Field(0.95, ge=0, le=1)
    """Discount of the return GiGPO's turn advantage compares."""
    negative_advantage_weight: float = Field(1.0, ge=0, le=1)
    """Scale of negative advantages (1: GRPO; 0: learn from the better episodes only)."""
    group_by_length: bool = False
    """SFT: batches of rows of similar length instead of random ones."""


class DistillSettings(_Section):
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


class DPOSettings(_Section):
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


class PPOSettings(_Section):
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


#: section name -> its model, in the order help and docs show them
SECTIONS: dict[str, type[_Section]] = {
    "run": RunSettings, "model": ModelSettings, "server": ServerSettings, "rollout": RolloutSettings,
    "optim": OptimSettings, "warmup": WarmupSettings, "grpo": GRPOSettings, "sft": SFTSettings,
    "native": NativeSettings, "experimental": ExperimentalSettings, "distill": DistillSettings,
    "dpo": DPOSettings,
    "ppo": PPOSettings,
}
#: setting name -> its section (names are unique across sections)
_OWNER: dict[str, str] = {name: section for section, model in SECTIONS.items() for name in model.model_fields}



class TrainConfig(BaseModel):
    """Every setting of a training run, in sections (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    run: RunSettings = Field(default_factory=RunSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)
    optim: OptimSettings = Field(default_factory=OptimSettings)
    warmup: WarmupSettings = Field(default_factory=WarmupSettings)
    grpo: GRPOSettings = Field(default_factory=GRPOSettings)
    sft: SFTSettings = Field(default_factory=SFTSettings)
    native: NativeSettings = Field(default_factory=NativeSettings)
    experimental: ExperimentalSettings = Field(default_factory=ExperimentalSettings)
    distill: DistillSettings = Field(default_factory=DistillSettings)
    dpo: DPOSettings = Field(default_factory=DPOSettings)
    ppo: PPOSettings = Field(default_factory=PPOSettings)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:  # one line that names the setting, not pydantic's report
            raise ConfigError(_first_error(exc)) from None

    @model_validator(mode="after")
    def _across_sections(self) -> TrainConfig:
        if self.rollout.env_id is None and self.rollout.trajectories is None:
            raise ValueError("Give an env to train on (--env ENV) or a rollout file (--trajectories FILE)")
        if self.optim.mini_batches > self.rollout.episodes_per_step:
            raise ValueError(f"mini_batches ({self.optim.mini_batches}) cannot exceed episodes_per_step "
                             f"({self.rollout.episodes_per_step})")
        return self

    # -- reading and writing ------------------------------------------------------

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Settings from a mapping: sections (``{"optim": {"lr": 1e-3}}``), flat names (``{"lr": 1e-3}``,
        as run folders saved them before sections) or dotted ones (``{"optim.lr": 1e-3}``)."""
        if not isinstance(values, dict):
            raise ConfigError(f"Training settings must be a mapping of name: value, got {type(values).__name__}.")
        nested: dict[str, dict[str, Any]] = {}
        values = _from_flat_layout(values)
        for key, value in values.items():
            if key in SECTIONS and isinstance(value, dict):
                for name, item in value.items():
                    _place(nested, f"{key}.{name}", item)
            else:
                _place(nested, str(key), value)
        return cls(**nested)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
        """Settings from a YAML file (either layout), then ``overrides`` (flat or dotted names; None
        values are flags not given); settings named in neither keep their defaults."""
        try:
            values = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise ConfigError(f"Could not read the settings file {str(path)!r}: {exc.strerror}.") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"The settings file {str(path)!r} is not valid YAML: {exc}") from None
        if not isinstance(values, dict):
            raise ConfigError(f"The settings file {str(path)!r} must hold a mapping of name: value.")
        given = {key: value for key, value in (overrides or {}).items() if value is not None}
        return cls.from_dict({**values, **given})

    def updated(self, overrides: dict[str, Any]) -> TrainConfig:
        """A copy with ``overrides`` (flat or dotted names) applied; None values are flags not given."""
        given = {key: value for key, value in overrides.items() if value is not None}
        return type(self).from_dict({**self.model_dump(), **_flat_to_dotted(given)})

    def save_yaml(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False), encoding="utf-8")

    # -- what the parts read ---------------------------------------------------------

    def check_used(self, sections: set[str], ignored: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        """Raise when a setting differs from its default but the run would not read it: its section is
        not in ``sections``, or its name is in ``ignored`` (what the trainer and backend leave alone)."""
        for section, model in SECTIONS.items():
            values, default = getattr(self, section), model()
            for name in model.model_fields:
                if getattr(values, name) == getattr(default, name):
                    continue
                if section not in sections or name in ignored:
                    raise ConfigError(
                        f"{section}.{name} is set, but trainer {self.run.trainer!r} on backend "
                        f"{self.run.backend!r} does not read the {section} section"
                        f"{'' if section not in sections else ' setting'}; remove it.")

    def loss_config(self) -> Any:
        """The :class:`~agentgym.trainers.losses.LossConfig` of the ``grpo`` and ``experimental`` settings."""
        from agentgym.trainers.losses.policy import LossConfig

        grpo = self.grpo
        return LossConfig(clip_low=grpo.clip_low, clip_high=grpo.clip_high, aggregation=grpo.aggregation,
                          max_tokens=grpo.constant_sum_tokens, kl_coef=grpo.kl_coef, correction=grpo.correction,
                          correction_level=grpo.correction_level, correction_cap=grpo.correction_cap,
                          negative_advantage_weight=self.experimental.negative_advantage_weight,
                          top_entropy_quantile=grpo.top_entropy_quantile)

    def advantage_options(self) -> dict[str, Any]:
        """Keyword arguments of :func:`~agentgym.trainers.engines.batch.token_advantages` these settings give."""
        return {"method": self.grpo.advantage, "filter_zero_variance": self.grpo.filter_zero_variance,
                "filter_uniform_success": self.experimental.filter_uniform_success,
                "turn_weight": self.experimental.turn_advantage_weight,
                "turn_discount": self.experimental.turn_discount, "baseline": self.grpo.baseline}

    @property
    def optimizer_steps_total(self) -> int:
        """Optimiser steps of the whole run (the learning-rate schedule's length)."""
        return self.run.steps * self.optim.updates_per_step

    def step_seeds(self, step: int) -> list[int]:
        """The seed of each group of ``step``: new ones every step (a run's start at ``seed * 1_000_003``),
        or the next ones of ``level_seeds``, round and round."""
        per_step = self.rollout.groups_per_step
        groups = range(step * per_step, (step + 1) * per_step)
        if self.rollout.level_seeds is None:
            return [self.run.seed * 1_000_003 + group for group in groups]
        levels = read_seeds(self.rollout.level_seeds)
        return [levels[group % len(levels)] for group in groups]


def _place(nested: dict[str, dict[str, Any]], key: str, value: Any) -> None:
    """Put one setting, named flat or dotted, into its section."""
    section, _, name = key.rpartition(".")
    owner = _OWNER.get(name)
    if owner is not None and section and section != owner:
        raise ConfigError(f"Setting {key!r}: {name} belongs to section {owner!r}; write {owner}.{name} or just {name}.")
    if owner is None or section not in ("", owner):
        known = [*(_OWNER), *(f"{s}.{n}" for n, s in _OWNER.items())]
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else " agentgym train --settings lists them."
        raise ConfigError(f"Unknown training setting {key!r}.{hint}")
    nested.setdefault(owner, {})[name] = value


def _from_flat_layout(values: dict[str, Any]) -> dict[str, Any]:
    """Run folders saved before sections (2026-11-28) hold flat names. One meaning changed: the flat
    ``max_tokens`` was also constant_sum's divisor, now ``constant_sum_tokens``."""
    sectioned = any(key in SECTIONS and isinstance(value, dict) for key, value in values.items())
    if sectioned or values.get("aggregation") != "constant_sum":
        return values
    return {"constant_sum_tokens": values.get("max_tokens", RolloutSettings().max_tokens), **values}


def _flat_to_dotted(values: dict[str, Any]) -> dict[str, Any]:
    return {key if "." in key else f"{_OWNER.get(key, '?')}.{key}": value
            for key, value in values.items()}


def _first_error(exc: ValidationError) -> str:
    """One line for the first problem pydantic found: which setting, what came, what is wanted."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    got = error.get("input")
    message = error["msg"].removeprefix("Value error, ")
    if not where:
        return message + "."
    if isinstance(got, dict):  # a check across a section's settings
        return f"Settings of {where}: {message}."
    return f"Setting {where}: {message} (got {got!r})."


def setting_help(name: str) -> str:
    """The first sentence of a setting's help (its docstring), for a command-line flag."""
    info = SECTIONS[_OWNER[name]].model_fields[name]
    text = " ".join((info.description or "").split())
    return text.split(". ")[0].rstrip(".") + "."


def setting_rows() -> list[tuple[str, str, str, str]]:
    """(section, name, default, help) of every setting, for ``--settings`` and docs/training.md."""
    rows = []
    for section, model in SECTIONS.items():
        defaults = model()
        for name, info in model.model_fields.items():
            help_text = " ".join((info.description or "").split())
            rows.append((section, name, _shown(getattr(defaults, name)), help_text))
    return rows


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
    return "none" if value is None else yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def settings_markdown() -> str:
    """The reference table of every setting, as docs/training.md holds it (a test keeps the two equal)."""
    lines = []
    for section, model in SECTIONS.items():
        lines += [f"### `{section}`", "", " ".join((model.__doc__ or "").split()), "",
                  "| setting | default | meaning |", "| --- | --- | --- |"]
        for row_section, name, default, help_text in setting_rows():
            if row_section == section:
                meaning = help_text.replace("``", "`").replace("|", "/")
                lines.append(f"| `{name}` | `{default}` | {meaning} |")
        lines.append("")
    return "\n".join(lines)
