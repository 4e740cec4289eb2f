"""What a learner trains with: a model, its optimiser and schedule, forward and backward passes.

A learner (:mod:`~agentgym.trainers.learners.grpo`, :mod:`~agentgym.trainers.learners.sft`) says *what* to
learn from a step's rows; an engine says *how* the numbers are computed on a backend:

- :class:`~agentgym.trainers.engines.native.NativeEngine` (``--backend fsdp``): PyTorch, FSDP2
  under torchrun, packed or padded micro-batches;
- :class:`~agentgym.trainers.engines.trl.TRLEngine` (``--backend trl``): TRL's ``SFTTrainer``
  (its optimiser wiring, accelerate, its SFT loss) and TRL's log-softmax.

Both build the model, the frozen parameters, LoRA, the optimiser and the one learning-rate
schedule here, so a run's settings mean the same thing on either.
"""

from __future__ import annotations

import abc
import copy
import fnmatch
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from agentgym.trainers.engines.batch import MicroBatch, TrainSequence
from agentgym.trainers.engines.distributed import Dist
from agentgym.trainers.engines.optimizers import build_optimizer
from agentgym.trainers.settings import TrainConfig

from agentgym.errors import ConfigError
from agentgym.models import resolve_model

__all__ = ["Engine", "PreferenceLoss", "freeze_parameters", "load_model_and_tokenizer", "lr_factor"]


@runtime_checkable
class PreferenceLoss(Protocol):
    """An engine with a DPO implementation of its own (the trl backend's, TRL's ``DPOTrainer``)."""

    def preference_loss(self, chosen: Sequence[TrainSequence], rejected: Sequence[TrainSequence],
                        ref_chosen: torch.Tensor, ref_rejected: torch.Tensor) -> torch.Tensor:
        """The mean DPO loss (the ``dpo`` settings) of the pairs (``chosen[i]``, ``rejected[i]``),
        each one sequence."""

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def load_model_and_tokenizer(model: str, *, dtype: str = "float32") -> tuple[Any, Any]:
    """The causal LM and tokenizer of ``model`` ('tiny', a folder or a hub id)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES[dtype]), tokenizer


def freeze_parameters(model: torch.nn.Module, patterns: Sequence[str]) -> list[str]:
    """Stop training the parameters whose names match any of ``patterns`` (fnmatch); their names.

    A pattern that matches nothing is a ConfigError listing how the model names its parameters.
    """
    parameters = dict(model.named_parameters())
    frozen: dict[str, None] = {}
    for pattern in patterns:
        matched = [name for name in parameters if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            sample = ", ".join(list(parameters)[:6])
            raise ConfigError(f"frozen_parameters: {pattern!r} names no parameter of this model. Its parameters "
                              f"are named like {sample}, ... ({len(parameters)} in all).")
        frozen.update(dict.fromkeys(matched))
    for name in frozen:
        parameters[name].requires_grad_(False)
    return list(frozen)


def lr_factor(config: TrainConfig, optimizer_step: int) -> float:
    """The schedule, as a factor of ``lr``: linear warm-up, then constant, linear or cosine down to
    ``min_lr_ratio`` over the run's optimiser steps. Both backends step a ``LambdaLR`` of it."""
    optim = config.optim
    if optimizer_step < optim.warmup_steps:
        return (optimizer_step + 1) / optim.warmup_steps
    if optim.lr_schedule == "constant":
        return 1.0
    span = max(config.optimizer_steps_total - optim.warmup_steps, 1)
    progress = min((optimizer_step - optim.warmup_steps) / span, 1.0)
    shape = 1.0 - progress if optim.lr_schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return optim.min_lr_ratio + (1.0 - optim.min_lr_ratio) * shape


class Engine(abc.ABC):
    """A model being trained on one backend (see the module's docstring).

    ``version`` counts the training steps done (the policy version of the weights);
    the learner raises it after each step.
    """

    #: settings sections this backend reads (beside the learner's)
    sections: frozenset[str] = frozenset()
    #: whether micro-batches may be packed (one row holding several sequences)
    packs = False

    def __init__(self, config: TrainConfig, dist: Dist) -> None:
        self.config = config
        self.dist = dist
        self.model_path = resolve_model(config.model.model)
        self.version = 0
        self.optimizer_steps = 0
        self.reference: torch.nn.Module | None = None
        self.critic: Any = None  # PPO's value model (attach_critic)

    # -- building ------------------------------------------------------------------

    def _build_model(self) -> tuple[torch.nn.Module, Any]:
        """The model to train (LoRA or frozen parameters applied) and its tokenizer."""
        torch.manual_seed(self.config.run.seed)  # the same LoRA initialisation on every rank and every run
        model, tokenizer = load_model_and_tokenizer(self.model_path, dtype=self.config.model.dtype)
        model.config.use_cache = False
        if self.config.model.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if self.config.model.lora:
            from peft import get_peft_model

            model = get_peft_model(model, self.config.model.lora_config())
        freeze_parameters(model, self.config.model.frozen_parameters)
        return model, tokenizer

    def _build_optimizer(self, model: torch.nn.Module) -> tuple[torch.optim.Optimizer, Any]:
        optim = self.config.optim
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = build_optimizer(params, optim.optimizer, lr=optim.lr, adam_betas=optim.adam_betas,
                                    momentum=optim.momentum, weight_decay=optim.weight_decay)
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(self.config, step))

    # -- what a learner calls --------------------------------------------------------

    @abc.abstractmethod
    def logprobs(self, batch: MicroBatch, *, with_entropy: bool = False, reference: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[S, T] logprobs of the batch's completion tokens (and their entropy, detached).

        ``reference``: of the KL reference (the weights :meth:`keep_reference` kept), no gradient.
        """

    @abc.abstractmethod
    def distributions(self, batch: MicroBatch, *, reference: bool = False) -> torch.Tensor:
        """[S, T, V] the log-softmax over the vocabulary at each completion token's position (at
        temperature 1: the model's own distribution, what a teacher's logprobs are compared with).

        ``reference``: of the weights :meth:`keep_reference` kept (distillation keeps its teacher
        there), no gradient.
        """

    @abc.abstractmethod
    def backward(self, loss: torch.Tensor) -> None:
        """Add ``loss``'s gradient; the learner has scaled it to its share of the global step."""

    @abc.abstractmethod
    def step(self, *, lr: float | None = None) -> tuple[float, float]:
        """Clip, take an optimiser step and clear the gradients; (gradient norm, rate used).

        ``lr``: this step's rate instead of the schedule's, which then does not advance (the
        format warm-up).
        """

    @abc.abstractmethod
    def policy(self) -> torch.nn.Module:
        """The module being trained (for a deep copy, a state dict)."""

    def keep_reference(self, folder: str | Path | None = None) -> None:
        """Keep the current weights (or a model folder's), frozen, as the KL reference."""
        if folder is None:
            reference = copy.deepcopy(self.policy())
            # accelerate's prepare() puts a wrapper of the original module's forward on the instance
            # (trl backend); a deep copy keeps that wrapper, so the copy would compute the live
            # policy's outputs. The class's own forward reads the copy's weights.
            reference.__dict__.pop("forward", None)
        else:
            from transformers import AutoModelForCausalLM

            reference = AutoModelForCausalLM.from_pretrained(folder, dtype=_DTYPES[self.config.model.dtype])
            reference.config.use_cache = False
            reference = self._place(reference.to(self.dist.device))
        self.reference = reference.requires_grad_(False).eval()

    def _place(self, model: torch.nn.Module) -> torch.nn.Module:
        """A loaded module where this backend keeps its models (sharded under FSDP)."""
        return model

    def _scheduled_step(self, optimizer: torch.optim.Optimizer, scheduler: Any, lr: float | None,
                        clip: Any) -> tuple[float, float]:
        """The shared end of a step: clip with ``clip(max_norm)``, step, schedule, clear."""
        used = [group["lr"] for group in optimizer.param_groups]
        if lr is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr
        max_norm = self.config.optim.max_grad_norm or float("inf")
        norm = clip(max_norm)
        if hasattr(norm, "full_tensor"):  # a DTensor under FSDP
            norm = norm.full_tensor()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        rate = lr if lr is not None else used[0]
        if lr is not None:
            for group, value in zip(optimizer.param_groups, used):
                group["lr"] = value
        else:
            scheduler.step()
        self.optimizer_steps += 1
        return float(norm), float(rate)

    # -- PPO's value model ---------------------------------------------------------------

    @abc.abstractmethod
    def _kept_hidden(self, model: torch.nn.Module, batch: MicroBatch) -> torch.Tensor:
        """[R, K, H] float last hidden states (after the final norm) of ``model`` at the positions that
        predict completion tokens."""

    def attach_critic(self, separate: bool, lr: float) -> None:
        """Give this engine a value model (:class:`~agentgym.trainers.engines.critic.Critic`): a head on the
        policy, or on a copy of the start model (``separate``), with its own optimiser at ``lr``."""
        from agentgym.trainers.engines.critic import Critic

        body = None
        if separate:
            # The start model loaded again, not a deepcopy of the policy: a trainer's model may carry a
            # forward bound to the original (accelerate wraps it), which a copy would go on calling.
            body, _ = self._build_model()
            body = self._place(body.to(self.dist.device).train())
        hidden = int(self.policy().config.hidden_size)
        critic = Critic(hidden, None, self.config.run.seed).to(self.dist.device)
        critic.body = body
        self.critic = critic
        optim = self.config.optim
        self.critic_optimizer = build_optimizer(critic.parameters_to_train(), optim.optimizer, lr=lr,
                                                adam_betas=optim.adam_betas, momentum=optim.momentum,
                                                weight_decay=optim.weight_decay)
        self.critic_scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.critic_optimizer, lambda step: lr_factor(self.config, step))

    def values(self, batch: MicroBatch) -> torch.Tensor:
        """[S, T] the value model's value at each completion token's position (differentiable)."""
        critic = self.critic
        hidden = self._kept_hidden(critic.body if critic.body is not None else self.policy(), batch)
        per_token = hidden.reshape(-1, hidden.shape[-1])[batch.token_index.to(hidden.device)]
        return critic.head(per_token).squeeze(-1)

    def critic_step(self) -> float:
        """Clip the value model's own gradient (the head's, a separate body's) and step its optimiser;
        the gradient norm."""
        params = self.critic.parameters_to_train()
        if self.dist.sharded:  # the head is replicated, not an FSDP unit: add up its gradient by hand
            from agentgym.trainers.engines.distributed import all_reduce

            for p in self.critic.head.parameters():
                if p.grad is not None:
                    all_reduce(p.grad, self.dist)
                    p.grad /= self.dist.world_size
        max_norm = self.config.optim.max_grad_norm or float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        self.critic_optimizer.step()
        self.critic_optimizer.zero_grad(set_to_none=True)
        self.critic_scheduler.step()
        return float(norm)

    def critic_state(self) -> dict[str, Any]:
        """The value model, its optimiser and schedule, for a checkpoint (a collective)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return {"model": get_model_state_dict(self.critic, options=options),
                "optimizer": get_optimizer_state_dict(self.critic, self.critic_optimizer, options=options),
                "scheduler": self.critic_scheduler.state_dict()}

    def load_critic_state(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        set_model_state_dict(self.critic, state["model"], options=options)
        set_optimizer_state_dict(self.critic, self.critic_optimizer, state["optimizer"], options=options)
        self.critic_scheduler.load_state_dict(state["scheduler"])

    @abc.abstractmethod
    def full_weights(self) -> dict[str, torch.Tensor]:
        """The full weights (LoRA merged in) as a transformers state dict on rank 0; {} elsewhere.
        Every rank must call it."""

    @abc.abstractmethod
    def state(self) -> dict[str, Any]:
        """Everything a checkpoint needs (full state dicts on rank 0). Every rank must call it."""

    @abc.abstractmethod
    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state` returned."""

    def export(self, folder: str | Path) -> Path:
        """Write the (merged) weights, config and tokenizer as a transformers folder (rank 0)."""
        state = self.full_weights()
        folder = Path(folder)
        if self.dist.is_main:
            from transformers import AutoConfig, AutoModelForCausalLM

            with torch.device("meta"):
                skeleton = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(self.model_path))
            skeleton.load_state_dict(state, assign=True, strict=False)
            skeleton.tie_weights()
            skeleton.save_pretrained(folder)
            self.tokenizer.save_pretrained(folder)
        return folder

    def merged(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``state`` with a LoRA adapter folded into the base weights (unchanged without LoRA)."""
        if not self.config.model.lora:
            return state
        from agentgym.trainers.engines.lora import merge_lora_state

        return merge_lora_state(state, self.config.model.lora_alpha / self.config.model.lora_rank)

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def pad_id(self) -> int:
        pad = self._tokenizer.pad_token_id
        return pad if pad is not None else 0
