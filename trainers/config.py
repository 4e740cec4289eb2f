"""TrainConfig: everything ``agentgym train`` needs, one dataclass for both backends.

Loaded from YAML (``--config run.yaml``), then overridden by the flags that
were given::

    config = TrainConfig.from_yaml("run.yaml").updated({"steps": 80, "lr": 5e-4})
    config.save_yaml(Path(config.out) / "config.yaml")

Each field's help is its docstring (written once, shown by ``agentgym train
--help`` through the CLI's option help). Values are checked in
``__post_init__``; every message names the field and the fix.

The defaults are tuned for the proof run on a laptop CPU: the tiny random-init
model learning ``Bandit-LLM-v0`` in 40 steps. For a real pretrained model use a
much lower ``lr`` (1e-6 .. 1e-5) and set ``format_warmup_episodes`` to 0.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from agentgym.core import check_number
from agentgym.errors import ConfigError, MissingDependencyError, UnknownTrainerError
from agentgym.rollout.seeds import read_seeds
from agentgym.trainers.algorithms import (
    AdvantageMethod,
    Baseline,
    Correction,
    CorrectionLevel,
    LossAggregation,
    LossConfig,
)
from agentgym.trainers.optimizers import OptimizerName

__all__ = ["Backend", "LRSchedule", "TrainConfig"]

Backend = Literal["fsdp", "trl"]  # the built-in backends; a plugin may add others
LRSchedule = Literal["constant", "linear", "cosine"]
_ENGINES = ("builtin", "vllm")
_DTYPES = ("float32", "bfloat16")


@dataclass
class TrainConfig:
    """One training run: what to learn, from what, and how."""

    # -- what ------------------------------------------------------------------
    trainer: str = "grpo"
    """Trainer name in the registry: grpo, sft, ..."""
    backend: str | None = None
    """A backend the trainer has: fsdp (the native PyTorch trainer) or trl (TRL's GRPOTrainer /
    SFTTrainer), or a plugin's; None: the trainer's own default (grpo: fsdp, sft: trl)."""
    env_id: str | None = None
    """Env to train on (online); optional with ``trajectories``."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Env constructor arguments."""
    model: str = "tiny"
    """Model: 'tiny', a local folder or a hub id."""
    trajectories: str | None = None
    """Train offline on the rows of this Parquet file instead of rolling out (SFT: several,
    comma-separated; a file named twice counts twice)."""
    out: str = "runs/train"
    """Run folder: metrics.jsonl, checkpoints, the final model, the report."""

    # -- the server --------------------------------------------------------------
    base_url: str | None = None
    """OpenAI-compatible server (ending in /v1); none: start the built-in one."""
    api_key: str = "EMPTY"
    """API key for ``base_url``."""
    engine: str = "builtin"
    """Which server ``base_url`` is: builtin (agentgym serve) or vllm; decides the weight sync."""
    sync_weights: bool = True
    """Push the new weights to the server after each step (off: a fixed server, off-policy)."""

    # -- rollout -----------------------------------------------------------------
    steps: int = 40
    """Training steps (each: a rollout, optimiser step(s), a weight sync)."""
    group_size: int = 8
    """Episodes per seed (a GRPO group); advantages are relative within a group."""
    episodes_per_step: int = 32
    """Model episodes per step; a multiple of ``group_size``."""
    max_turns: int | None = None
    """Turn limit per episode (default: the env's). It reaches the env, whose prompt names it."""
    turn_budget: int | None = None
    """Stop each episode after this many turns without telling the env (truncated): short
    episodes in the prompt the eval uses, where ``max_turns`` would change the prompt too."""
    max_tokens: int = 16
    """Tokens one turn may sample."""
    max_context_tokens: int = 2048
    """Tokens an episode may hold (prompt, turns, replies)."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts."""
    top_p: float = 1.0
    """Nucleus sampling of the rollouts."""
    concurrency: int = 64
    """Episodes playing at once."""
    format_warmup_episodes: int = 64
    """Before RL, fine-tune on this many episodes of the env's random well-formed policy
    (``env.random_action``), loss on the actions only. A random-init model never writes a valid
    action, so all its rewards are equal and GRPO has nothing to learn from; the warm-up teaches
    the format, not the answer (the actions are random). 0: off. Skipped on resume."""
    format_warmup_steps: int = 40
    """Optimiser steps of the format warm-up."""
    format_warmup_batch_size: int = 8
    """Episodes per optimiser step of the format warm-up (taken in turn, round and round)."""
    format_warmup_lr: float | None = 3e-3
    """Learning rate of the format warm-up (None: ``lr``)."""
    level_seeds: str | None = None
    """Play only these levels: a file of seeds, one per line (``agentgym eval --failed-seeds-out``
    writes the levels a model failed). Each step takes the next groups, round and round; none: every
    step plays new seeds. Keep the file apart from the eval's seeds."""
    max_staleness: int = 1
    """Drop rows sampled by a policy more than this many versions older than the trainer's."""

    # -- optimisation ------------------------------------------------------------
    optimizer: OptimizerName = "adamw"
    """adamw, or sgd: steps along the gradient itself, so weights the batch says little about barely
    move (AdamW moves every weight by about lr). SGD needs a far larger lr (its step is lr times the
    clipped gradient); the format warm-up uses the same optimiser."""
    lr: float = 1e-3
    """Peak learning rate. Tiny random-init models like it high; real models 1e-6..1e-5 (AdamW)."""
    weight_decay: float = 0.0
    """Weight decay."""
    adam_betas: tuple[float, float] = (0.9, 0.99)
    """AdamW betas."""
    momentum: float = 0.0
    """SGD momentum (0: plain gradient steps); AdamW ignores it."""
    warmup_steps: int = 0
    """Linear warm-up of the learning rate over this many optimiser steps."""
    lr_schedule: LRSchedule = "cosine"
    """How the learning rate falls after the warm-up, over the run's optimiser steps."""
    min_lr_ratio: float = 0.1
    """Where ``linear`` and ``cosine`` end, as a fraction of ``lr``."""
    max_grad_norm: float = 1.0
    """Clip the gradient's global norm to this (0: no clipping)."""
    mini_batches: int = 1
    """Optimiser steps per training step: the step's rows are split into this many mini-batches."""
    epochs: int = 1
    """Passes over the step's rows (PPO epochs); above 1 the clipping starts to matter."""
    micro_batch_size: int = 16
    """Sequences per forward pass (without packing); gradients accumulate over micro-batches.
    SFT: the rows of one optimiser step, run as ``sft_passes`` forward passes."""
    micro_batch_tokens: int = 8192
    """Tokens per packed forward pass (with packing)."""
    sft_passes: int = 4
    """SFT: each batch of ``micro_batch_size`` rows, sorted by length, runs as this many forward
    passes whose gradients add up (rounded down to a divisor of the batch). The step is the same
    as one pass, but each pass pads only to its own longest row: on Sokoban's noisy
    demonstrations a step took half the time (docs/results.md). 1: one padded pass, rows in
    TRL's order."""
    group_by_length: bool = False
    """SFT: batch rows of similar length (less padding, so faster when episode lengths vary, as
    demonstrations with ``--expert-noise`` do); off: batches drawn at random. Off by default: a
    batch of similar-length episodes is less varied, and on Sokoban's noisy demonstrations both
    grouped runs learned worse than the random-batch runs beside them (docs/results.md)."""
    pack_sequences: bool = False
    """Pack several sequences into one row (no padding; attention kept within each sequence).
    Off by default: without flash attention the packed row's attention is dense (quadratic in
    the row), which costs more than padding sequences of similar length; worth it for very
    uneven lengths, or with flash attention on GPUs."""
    advantage: AdvantageMethod = "grpo"
    """Group advantage: grpo, grpo_no_std, dr_grpo or rloo."""
    baseline: Baseline = "episode"
    """What a turn's tokens are compared with. ``episode``: the episode's reward against its group's
    (``advantage``'s method), on every turn alike. ``turn``: each turn's reward-to-go against the other
    episodes of the group still playing at that turn (leave one out; ``grpo`` also divides by the
    group's reward spread). Where failed episodes run to the turn limit, ``episode`` pushes down every
    late turn of theirs, and the tokens those share with the won ones, in every batch the same way;
    ``turn`` sums to zero at each turn of a group instead
    (:func:`~agentgym.trainers.algorithms.playing_baseline_advantages`)."""
    filter_zero_variance: bool = True
    """Skip groups whose rewards are all equal (zero advantage: they only cost compute)."""
    filter_uniform_success: bool = False
    """Also skip groups whose episodes all succeeded or all failed (DAPO's dynamic-sampling filter,
    Yu et al. 2025). Where rewards carry a cost per turn such groups are rarely all equal, yet
    their differences are only turn counts: with a strong start model they are most of a step
    and can drown out the few groups that say what wins. Pair it with more --episodes-per-step: the
    skipped groups cost rollout time, not training time."""
    turn_advantage_weight: float = 0.0
    """GiGPO (Feng et al. 2025): above 0, each turn's tokens also get this times the turn's own
    advantage, its discounted return against the other turns of the group that acted on the same
    observation. Credit for multi-turn envs where one move decides the episode (0: episode level only)."""
    turn_discount: float = 0.95
    """Discount of the return-to-go the turn-level advantage compares."""
    negative_advantage_weight: float = 1.0
    """Scale of the negative advantages: 1 is GRPO; 0 learns from the better-than-average episodes
    (and turns) only, so a failed episode's moves are not pushed down (positive sample
    reinforcement, Zhu et al. 2025). Between: both, the failures weighted less."""
    top_entropy_quantile: float = 1.0
    """Share of the sampled tokens, the highest-entropy ones of each forward batch, that carry the
    policy loss (Wang et al. 2025, "Beyond the 80/20 Rule"; TRL's option of the same name; the
    paper uses 0.2). The rest, in a text game mostly the answer's fixed markup, get no policy
    gradient, only the KL term's. 1: every token."""
    clip_low: float = 0.2
    """PPO clip below 1."""
    clip_high: float = 0.28
    """PPO clip above 1 (DAPO's clip-higher)."""
    aggregation: LossAggregation = "token_mean"
    """token_mean, sequence_mean or constant_sum (Dr. GRPO)."""
    kl_coef: float = 0.0
    """Weight of the KL to the initial model (0: no reference model is kept)."""
    correction: Correction = "truncate"
    """Importance-sampling correction against the server's logprobs."""
    correction_level: CorrectionLevel = "token"
    """Per token or per sequence."""
    correction_cap: float = 2.0
    """Cap of the importance weight."""

    # -- model -------------------------------------------------------------------
    dtype: str = "float32"
    """Training precision of the weights: float32 or bfloat16."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% slower)."""
    lora: bool = False
    """Train a LoRA adapter (peft) instead of every weight."""
    lora_rank: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA alpha."""
    lora_dropout: float = 0.0
    """LoRA dropout."""
    lora_target_modules: list[str] = field(default_factory=lambda: ["all-linear"])
    """Modules that get adapters (peft names; 'all-linear' for every linear layer)."""
    frozen_parameters: list[str] = field(default_factory=list)
    """Parameters the run leaves as they are: shell-style patterns of their names, e.g.
    ``["model.embed_tokens.*", "model.layers.0.*"]`` (a tied output head goes with the
    embeddings). A pattern that names no parameter is an error. Not with ``lora``, which
    freezes the base weights itself."""

    # -- run ---------------------------------------------------------------------
    seed: int = 0
    """Seed of everything: env groups, sampling, model, data order."""
    checkpoint_every: int = 10
    """Save a resumable checkpoint every this many steps (and at the end)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (older ones are deleted)."""
    max_seconds: float = 0.0
    """Wall-clock budget of the run, in seconds from its start (model load and server start
    included): the run ends after the step during which it runs out, as if ``steps`` ended
    there, with the final model (GRPO: and a checkpoint, which ``--resume`` goes on from).
    0: no limit. The lr schedule still spans ``steps``: a decaying rate stops part way."""
    resume: bool = False
    """Continue from the latest checkpoint in ``out``."""
    tensorboard: bool = False
    """Also log to TensorBoard (needs the tensorboard package)."""
    wandb: bool = False
    """Also log to Weights & Biases (needs wandb)."""
    wandb_project: str = "agentgym"
    """W&B project."""
    sample_episodes: int = 2
    """Episodes per step kept in samples.jsonl (for the report)."""
    log_episodes: bool = True
    """Write episodes.jsonl: a line per episode played (step, id, seed, reward, success, turns), so a run
    pairs with its ``--lr 0`` control episode by episode (``scripts/compare_runs.py``)."""

    def __post_init__(self) -> None:
        self.adam_betas = tuple(self.adam_betas)  # type: ignore[assignment]  # YAML gives a list
        self._read_float_strings()
        self._resolve_backend()
        self._check_choices()
        self._check_numbers()
        if self.lora and self.frozen_parameters:
            raise ConfigError("frozen_parameters and lora do not mix: LoRA already keeps every base weight "
                              "fixed; drop one of them.")
        if self.env_id is None and self.trajectories is None:
            raise ConfigError("Give an env to train on (--env ENV) or a rollout file (--trajectories FILE).")
        if self.episodes_per_step % self.group_size:
            raise ConfigError(
                f"episodes_per_step ({self.episodes_per_step}) must be a multiple of group_size "
                f"({self.group_size}) so every group is complete.")
        if self.mini_batches > self.episodes_per_step:
            raise ConfigError(f"mini_batches ({self.mini_batches}) cannot exceed episodes_per_step "
                              f"({self.episodes_per_step}).")
        self.loss_config()  # LossConfig checks the loss fields
        # read now, so a bad file fails before the run starts; not a field: the config keeps the path
        self._levels = read_seeds(self.level_seeds) if self.level_seeds is not None else None

    def _read_float_strings(self) -> None:
        """YAML reads ``1e-3`` (no dot) as a string: take it as the number it is for float fields."""
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if str(item.type).startswith("float") and isinstance(value, str):
                try:
                    setattr(self, item.name, float(value))
                except ValueError:
                    pass  # left as it is: the range checks below name the field

    def _resolve_backend(self) -> None:
        """The trainer's default backend when none is named; a named one must be the trainer's
        (the registry knows, plugins' backends included)."""
        from agentgym.trainers.registry import trainer_spec  # loads plugins: only when a config is made

        try:
            spec = trainer_spec(self.trainer)
        except UnknownTrainerError:  # running it fails with the registry's "did you mean"
            self.backend = self.backend or "fsdp"
            return
        if self.backend is None:
            self.backend = spec.default_backend
        elif self.backend not in spec.backends:
            raise ConfigError(f"backend must be one of {', '.join(sorted(spec.backends))}; "
                              f"got {self.backend!r}.")

    def _check_choices(self) -> None:
        choices: dict[str, tuple[Any, ...]] = {
            "engine": _ENGINES, "dtype": _DTYPES,
            "advantage": get_args(AdvantageMethod), "baseline": get_args(Baseline),
            "aggregation": get_args(LossAggregation),
            "correction": get_args(Correction), "correction_level": get_args(CorrectionLevel),
            "lr_schedule": get_args(LRSchedule), "optimizer": get_args(OptimizerName),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(map(str, allowed))}; "
                                  f"got {getattr(self, name)!r}.")

    def _check_numbers(self) -> None:
        for name in ("steps", "group_size", "episodes_per_step", "max_tokens", "max_context_tokens",
                     "concurrency", "mini_batches", "epochs", "micro_batch_size", "micro_batch_tokens",
                     "checkpoint_every", "keep_checkpoints", "lora_rank", "lora_alpha",
                     "format_warmup_batch_size", "sft_passes"):
            check_number(name, getattr(self, name), minimum=1)
        for name in ("format_warmup_episodes", "format_warmup_steps", "max_staleness", "warmup_steps",
                     "sample_episodes"):
            check_number(name, getattr(self, name), minimum=0)
        for name in ("max_turns", "turn_budget"):
            if getattr(self, name) is not None:
                check_number(name, getattr(self, name), minimum=1)
        check_number("seed", self.seed, minimum=0)
        check_number("lr", self.lr, minimum=0.0, integer=False)
        check_number("temperature", self.temperature, minimum=0.0, integer=False)
        if self.format_warmup_lr is not None:
            check_number("format_warmup_lr", self.format_warmup_lr, minimum=0.0, integer=False)
        for name in ("top_p", "lora_dropout", "min_lr_ratio", "top_entropy_quantile"):
            check_number(name, getattr(self, name), minimum=0.0, maximum=1.0, integer=False)
        check_number("turn_discount", self.turn_discount, minimum=0.0, maximum=1.0, integer=False)
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"momentum must be within [0, 1) (0: plain SGD, 0.9: the usual), got {self.momentum}.")
        for name in ("weight_decay", "max_grad_norm", "turn_advantage_weight", "max_seconds"):
            check_number(name, getattr(self, name), minimum=0.0, integer=False)
        if len(self.adam_betas) != 2 or not all(0.0 <= b < 1.0 for b in self.adam_betas):
            raise ConfigError(f"adam_betas must be two numbers in [0, 1), got {self.adam_betas!r}.")

    # -- derived configs --------------------------------------------------------

    def loss_config(self) -> LossConfig:
        """The :class:`LossConfig` of these fields (both backends compute the loss from it)."""
        return LossConfig(clip_low=self.clip_low, clip_high=self.clip_high, aggregation=self.aggregation,
                          max_tokens=self.max_tokens, kl_coef=self.kl_coef, correction=self.correction,
                          correction_level=self.correction_level, correction_cap=self.correction_cap,
                          negative_advantage_weight=self.negative_advantage_weight,
                          top_entropy_quantile=self.top_entropy_quantile)

    def advantage_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`~agentgym.trainers.batch.token_advantages` these fields
        set (both backends compute their advantages with them)."""
        return {"method": self.advantage, "filter_zero_variance": self.filter_zero_variance,
                "filter_uniform_success": self.filter_uniform_success, "turn_weight": self.turn_advantage_weight,
                "turn_discount": self.turn_discount, "baseline": self.baseline}

    def lora_config(self) -> Any:
        """peft's ``LoraConfig`` of the ``lora_*`` fields (both backends train the adapter it describes)."""
        try:
            from peft import LoraConfig
        except ImportError as exc:
            raise MissingDependencyError("--lora needs peft: pip install 'agentgym[train]'.") from exc
        targets = "all-linear" if self.lora_target_modules == ["all-linear"] else self.lora_target_modules
        return LoraConfig(r=self.lora_rank, lora_alpha=self.lora_alpha, lora_dropout=self.lora_dropout,
                          target_modules=targets, task_type="CAUSAL_LM")

    @property
    def updates_per_step(self) -> int:
        """Optimiser steps per training step: one per mini-batch, each epoch."""
        return self.mini_batches * self.epochs

    @property
    def optimizer_steps_total(self) -> int:
        """Optimiser steps of the whole run (the learning-rate schedule's length)."""
        return self.steps * self.updates_per_step

    @property
    def groups_per_step(self) -> int:
        return self.episodes_per_step // self.group_size

    def step_seeds(self, step: int) -> list[int]:
        """The seed of each group of ``step``'s rollout: new ones every step (a run's seeds start at
        ``seed * 1_000_003``), or the next ones of ``level_seeds``, round and round."""
        groups = range(step * self.groups_per_step, (step + 1) * self.groups_per_step)
        if self._levels is None:
            return [self.seed * 1_000_003 + group for group in groups]
        return [self._levels[group % len(self._levels)] for group in groups]

    # -- YAML and overrides -----------------------------------------------------

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """A config from a mapping; an unknown key is an error that suggests the closest name."""
        if not isinstance(values, dict):
            raise ConfigError(f"A train config must be a mapping of field: value, got {type(values).__name__}.")
        names = cls.field_names()
        for key in values:
            if key not in names:
                close = difflib.get_close_matches(str(key), names, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"Unknown train config field {key!r}.{hint}")
        return cls(**values)

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainConfig:
        """Read a YAML mapping of field: value (fields not given keep their defaults)."""
        try:
            values = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"Could not read the config file {str(path)!r}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"The config file {str(path)!r} is not valid YAML: {exc}") from exc
        return cls.from_dict(values or {})

    def updated(self, overrides: dict[str, Any]) -> TrainConfig:
        """A copy with ``overrides`` applied; keys whose value is None are ignored (flags not given)."""
        given = {key: value for key, value in overrides.items() if value is not None}
        return type(self).from_dict({**self.to_dict(), **given})

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["adam_betas"] = list(self.adam_betas)
        return values

    def save_yaml(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False), encoding="utf-8")
