"""The settings the engines read: the model, the optimiser and how a step splits into passes, the native backend."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from agentgym.trainers.sections import Section, register_section

LRSchedule = Literal["constant", "linear", "cosine"]
OptimizerName = Literal["adamw", "sgd"]

__all__ = ["LRSchedule", "ModelSettings", "NativeSettings", "OptimSettings", "OptimizerName"]


class ModelSettings(Section):
    """The model trained: where it comes from, its precision, LoRA, frozen parameters."""

    model: str = "tiny"
    """Model: 'tiny' (built locally), another name agentgym list-models shows (smollm2-135m), a
    local folder or a hub id."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Compute precision: float32, or bfloat16 (bf16 matrix products over float32 master weights and
    optimiser state: FSDP2's mixed-precision policy under torchrun, autocast otherwise)."""
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


class OptimSettings(Section):
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
    """Linear warm-up of the learning rate over this many training steps."""
    lr_schedule: LRSchedule = "cosine"
    """How the rate falls after the warm-up, over the run's training steps (every update of a step at
    its rate): constant, linear or cosine."""
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    """Where linear and cosine end, as a fraction of ``lr``."""
    max_grad_norm: float = Field(1.0, ge=0)
    """Clip the gradient's global norm to this (0: no clipping)."""
    mini_batches: int = Field(1, ge=1)
    """Optimiser steps per training step: the step's rows split into this many mini-batches."""
    epochs: int = Field(1, ge=1)
    """Passes over a step's rows (PPO epochs); above 1 the clip starts to matter."""
    micro_batch_size: int = Field(16, ge=1)
    """Sequences per forward pass at most; gradients accumulate over a mini-batch's micro-batches."""
    micro_batch_tokens: int = Field(4096, ge=1)
    """Tokens per forward pass at most (padding counted; a longer sequence gets a pass of its own):
    what bounds a pass's memory on a real model."""

    @model_validator(mode="after")
    def _betas(self) -> OptimSettings:
        if not all(0.0 <= beta < 1.0 for beta in self.adam_betas):
            raise ValueError(f"adam_betas must be two numbers in [0, 1), got {list(self.adam_betas)}")
        return self

    @property
    def updates_per_step(self) -> int:
        """Optimiser steps per training step: one per mini-batch, each epoch."""
        return self.mini_batches * self.epochs


class NativeSettings(Section):
    """The native (fsdp) backend only."""

    pack_sequences: bool = False
    """Pack sequences end to end (no padding). Without flash attention the packed attention is dense,
    so it pays only for very uneven lengths."""


register_section("model", ModelSettings)
register_section("optim", OptimSettings)
register_section("native", NativeSettings)
