"""What a learner trains with: a model, its optimiser and schedule, forward and backward passes.

A learner (:mod:`agentgym.trainers.learners`) says *what* to learn from a step's rows; an engine
says *how* the numbers are computed on a backend:

- :class:`~agentgym.trainers.engines.native.NativeEngine` (``--backend fsdp``): PyTorch, FSDP2
  under torchrun, packed or padded micro-batches;
- :class:`~agentgym.trainers.engines.trl.TRLEngine` (``--backend trl``): TRL's ``SFTTrainer``
  (its optimiser wiring, accelerate, its SFT loss) and TRL's log-softmax.

Both build the model, the frozen parameters, LoRA, the optimiser and the one learning-rate
schedule here, so a run's settings mean the same thing on either.

Precision: the weights and the optimiser's state are always float32 (the masters a checkpoint
keeps); ``model.dtype=bfloat16`` runs the matrix products in bf16 over them (FSDP2's
mixed-precision policy under torchrun, autocast otherwise). Pure bf16 weights would lose every
update under half a bf16 ulp: at the learning rates pretrained models use, most of them.

Logprobs and entropies come from the logits of the positions that predict sampled tokens only,
a chunk of positions at a time (:func:`chunked_logprobs`): the float32 softmax of a whole
micro-batch over a 49k vocabulary is never held at once.

Heads: an engine trains a causal LM (``head="lm"``, every trainer but one) or a reward model
(``head="score"``, ``--trainer rm``): the same trunk with a scalar linear head read at each
sequence's last token, transformers' ``AutoModelForSequenceClassification`` with one label, as
TRL's ``RewardTrainer`` trains it. Its numbers come from :meth:`Engine.scores` (and on trl
from ``RewardTrainer``, :class:`RewardLoss`); ``final/`` is a sequence-classification folder.
"""

from __future__ import annotations

import abc
import contextlib
import fnmatch
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from torch.utils.checkpoint import checkpoint

from agentgym.errors import ConfigError
from agentgym.models import resolve_model
from agentgym.trainers.engines.batch import MicroBatch, TrainSequence, collate
from agentgym.trainers.engines.distributed import Dist
from agentgym.trainers.engines.optimizers import build_optimizer

__all__ = ["LOGPROB_CHUNK", "Engine", "Head", "PreferenceLoss", "RewardLoss", "chunked_logprobs", "freeze_parameters",
           "load_model_and_tokenizer", "lr_factor", "model_class", "right_padded"]

#: what the trained model predicts: the next token (a causal LM), or one score a sequence (a reward model)
Head = Literal["lm", "score"]

#: positions whose float32 log-softmax is computed at once (a 49k vocabulary: 50 MB a chunk)
LOGPROB_CHUNK = 256


@runtime_checkable
class PreferenceLoss(Protocol):
    """An engine with a DPO implementation of its own (the trl backend's, TRL's ``DPOTrainer``)."""

    def preference_loss(self, chosen: Sequence[TrainSequence], rejected: Sequence[TrainSequence],
                        ref_chosen: torch.Tensor, ref_rejected: torch.Tensor) -> torch.Tensor:
        """The mean DPO loss (the ``dpo`` settings) of the pairs (``chosen[i]``, ``rejected[i]``),
        each one sequence."""


@runtime_checkable
class RewardLoss(Protocol):
    """An engine with a reward-model loss of its own (the trl backend's, TRL's ``RewardTrainer``)."""

    def reward_loss(self, chosen: Sequence[Sequence[int]], rejected: Sequence[Sequence[int]]
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The mean Bradley-Terry loss (the ``rm`` settings) of the pairs (``chosen[i]``, ``rejected[i]``),
        and the scores of the chosen and of the rejected sequences, from one forward pass."""


def model_class(head: Head) -> Any:
    """The transformers auto class of ``head``: a causal LM, or a sequence classifier (a reward model)."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    return AutoModelForSequenceClassification if head == "score" else AutoModelForCausalLM


def _head_options(head: Head, tokenizer: Any) -> dict[str, Any]:
    """A reward model's config: one label, and the pad id its head uses to find each sequence's last token."""
    return {"num_labels": 1, "pad_token_id": tokenizer.pad_token_id} if head == "score" else {}


def load_model_and_tokenizer(model: str, head: Head = "lm") -> tuple[Any, Any]:
    """The model (float32 weights, SDPA attention) and tokenizer of ``model`` ('tiny', a folder or a
    hub id): a causal LM, or with ``head="score"`` a reward model (a new head on a causal LM's folder,
    seeded by the caller). SDPA is asked for by name so the engines know the attention mask it takes."""
    from transformers import AutoTokenizer

    path = resolve_model(model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    with _quiet_new_head() if head == "score" else contextlib.nullcontext():
        loaded = model_class(head).from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa",
                                                   **_head_options(head, tokenizer))
    return loaded, tokenizer


@contextlib.contextmanager
def _quiet_new_head() -> Iterator[None]:
    """transformers without its load report: a reward model's score head is new on purpose."""
    import logging

    logger = logging.getLogger("transformers.modeling_utils")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def right_padded(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, L] token ids padded on the right with ``pad_id``, and their attention mask: the layout of
    TRL's reward collator, so a reward model reads each sequence's score at its last token."""
    width = max(len(ids) for ids in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(sequences):
        input_ids[row, :len(ids)] = torch.tensor(list(ids), dtype=torch.long)
        mask[row, :len(ids)] = 1
    return input_ids, mask


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


def lr_factor(config: Any, step: int) -> float:
    """The schedule at training step ``step``, as a factor of ``lr``: linear warm-up, then constant,
    linear or cosine down to ``min_lr_ratio`` at the run's last step. Every update of a step takes
    its step's rate (as verl steps its schedule), so the schedule spans the run whatever the number
    of updates a step makes."""
    optim = config.optim
    if step < optim.warmup_steps:
        return (step + 1) / optim.warmup_steps
    if optim.lr_schedule == "constant":
        return 1.0
    span = max(config.run.steps - 1 - optim.warmup_steps, 1)
    progress = min((step - optim.warmup_steps) / span, 1.0)
    shape = 1.0 - progress if optim.lr_schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return optim.min_lr_ratio + (1.0 - optim.min_lr_ratio) * shape


def _logprobs_of(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Logprobs of ``targets`` under float32 ``logits``: the native engine's log-softmax."""
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def _entropy_of(logits: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)


def _chunk_logprobs(logits: torch.Tensor, targets: torch.Tensor, inverse_temperature: float,
                    logprobs_of: _LogprobsOf) -> torch.Tensor:
    return logprobs_of(logits.float() * inverse_temperature, targets)


_LogprobsOf = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
_EntropyOf = Callable[[torch.Tensor], torch.Tensor]


def chunked_logprobs(logits: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0,
                     with_entropy: bool = False, chunk: int = LOGPROB_CHUNK,
                     logprobs_of: _LogprobsOf = _logprobs_of, entropy_of: _EntropyOf = _entropy_of
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[N] logprobs of ``targets`` under [N, V] ``logits`` divided by ``temperature`` (and [N] entropies,
    detached), ``chunk`` rows at a time.

    Each chunk's float32 softmax lives only while its numbers are computed; under autograd the chunk
    is recomputed in the backward pass (activation checkpointing), so only the logits themselves, in
    the model's precision, are kept for it. ``logprobs_of`` and ``entropy_of`` compute a float32
    chunk's numbers (the trl engine passes TRL's).
    """
    inverse = 1.0 / temperature if temperature > 0 else 1.0
    logprobs, entropies = [], []
    for start in range(0, logits.shape[0], chunk):
        part, wanted = logits[start:start + chunk], targets[start:start + chunk]
        if part.requires_grad:
            logprobs.append(checkpoint(_chunk_logprobs, part, wanted, inverse, logprobs_of, use_reentrant=False))
        else:
            logprobs.append(_chunk_logprobs(part, wanted, inverse, logprobs_of))
        if with_entropy:
            with torch.no_grad():
                entropies.append(entropy_of(part.detach().float() * inverse))
    if not logprobs:
        empty = logits.new_zeros(0, dtype=torch.float32)
        return empty, (empty if with_entropy else None)
    return torch.cat(logprobs), (torch.cat(entropies) if with_entropy else None)


class Engine(abc.ABC):
    """A model being trained on one backend (see the module's docstring).

    ``version`` counts the training steps that changed the weights (the policy version); the run
    loop calls :meth:`finish_step` after each step, which also moves the schedule on.
    """

    #: settings sections this backend reads (beside the learner's)
    sections: frozenset[str] = frozenset()
    #: whether micro-batches may be packed (one row holding several sequences)
    packs = False

    def __init__(self, config: Any, dist: Dist, *, head: Head = "lm") -> None:
        """``head``: what the model predicts (the learner's :attr:`~agentgym.trainers.learners.base.Learner.head`)."""
        self.config = config
        self.dist = dist
        self.head = head
        self.model_path = resolve_model(config.model.model)
        self.version = 0
        self.optimizer_steps = 0
        #: training steps done, whether they learned or not: where the learning-rate schedule is
        self.schedule_step = 0
        self.reference: torch.nn.Module | None = None
        self._tokenizer: Any = None

    # -- building ------------------------------------------------------------------

    def build_model(self) -> tuple[torch.nn.Module, Any]:
        """The start model to train (float32, LoRA or frozen parameters applied) and its tokenizer."""
        torch.manual_seed(self.config.run.seed)  # the same LoRA (and score head) initialisation on every rank and run
        model, tokenizer = load_model_and_tokenizer(self.model_path, self.head)
        model.config.use_cache = False
        if self.config.model.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if self.config.model.lora:
            from peft import get_peft_model

            model = get_peft_model(model, self.config.model.lora_config())
        freeze_parameters(model, self.config.model.frozen_parameters)
        return model, tokenizer

    def build_optimizer(self, parameters: Sequence[torch.nn.Parameter], lr: float | None = None
                        ) -> torch.optim.Optimizer:
        """An optimiser over ``parameters`` at peak rate ``lr`` (None: the run's), at the schedule's
        rate for the engine's current step (:meth:`apply_schedule`)."""
        optim = self.config.optim
        optimizer = build_optimizer(parameters, optim.optimizer, lr=optim.lr if lr is None else lr,
                                    adam_betas=optim.adam_betas, momentum=optim.momentum,
                                    weight_decay=optim.weight_decay)
        for group in optimizer.param_groups:
            group["peak_lr"] = group["lr"]
        self.apply_schedule(optimizer)
        return optimizer

    def apply_schedule(self, optimizer: torch.optim.Optimizer) -> None:
        """Set ``optimizer``'s rate to its peak times the schedule at the current training step. The
        schedule is a function of the step alone (no scheduler object to step or save)."""
        factor = lr_factor(self.config, self.schedule_step)
        for group in optimizer.param_groups:
            group["lr"] = group["peak_lr"] * factor

    def place(self, model: torch.nn.Module) -> torch.nn.Module:
        """A loaded module where this backend keeps its models (on its device; sharded under FSDP)."""
        return model.to(self.dist.device)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The precision forward passes run in (bf16 over float32 weights with ``model.dtype=bfloat16``)."""
        if self.config.model.dtype == "bfloat16":
            return torch.autocast(self.dist.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # -- what a learner calls --------------------------------------------------------

    @abc.abstractmethod
    def policy(self) -> torch.nn.Module:
        """The module being trained (its state dict, its config)."""

    @abc.abstractmethod
    def forward(self, model: torch.nn.Module, batch: MicroBatch, **options: Any) -> Any:
        """``model``'s output on the batch (transformers' keyword ``options``), in the engine's precision."""

    def kept_logits(self, model: torch.nn.Module, batch: MicroBatch) -> torch.Tensor:
        """[R * K, V] logits, in the model's precision, at the batch's kept positions (``batch.keep``)."""
        logits = self.forward(model, batch, logits_to_keep=batch.keep.to(self.input_device)).logits
        return logits.reshape(-1, logits.shape[-1])

    def kept_hidden(self, model: torch.nn.Module, batch: MicroBatch) -> torch.Tensor:
        """[R * K, H] float last hidden states (after the final norm) at the batch's kept positions."""
        output = self.forward(model, batch, logits_to_keep=1, output_hidden_states=True)
        return self._kept(output.hidden_states[-1], batch)

    def kept_logits_and_hidden(self, model: torch.nn.Module, batch: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`kept_logits` and :meth:`kept_hidden` from one forward pass."""
        keep = batch.keep.to(self.input_device)
        output = self.forward(model, batch, logits_to_keep=keep, output_hidden_states=True)
        return output.logits.reshape(-1, output.logits.shape[-1]), self._kept(output.hidden_states[-1], batch)

    def _kept(self, hidden: torch.Tensor, batch: MicroBatch) -> torch.Tensor:
        kept = hidden[:, batch.keep.to(self.input_device)].float()
        return kept.reshape(-1, kept.shape[-1])

    def _chosen(self, reference: bool) -> torch.nn.Module:
        model = self.reference if reference else self.policy()
        if model is None:
            raise RuntimeError("no reference model was kept (kl_coef is 0, or no teacher)")
        return model

    def logprobs(self, batch: MicroBatch, *, with_entropy: bool = False, reference: bool = False,
                 temperature: float | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[S, T] logprobs of the batch's completion tokens (and their entropy, detached), at the rollout's
        temperature unless ``temperature`` says otherwise (the server sampled from that distribution).
        Only sampled tokens have real numbers; the others carry no loss.

        ``reference``: of the reference (the weights :meth:`keep_reference` kept), no gradient.
        """
        model = self._chosen(reference)
        with torch.no_grad() if reference else contextlib.nullcontext():
            return self._completion_logprobs(self.kept_logits(model, batch), batch, with_entropy, temperature)

    def logprobs_and_hidden(self, batch: MicroBatch, *, with_entropy: bool = False
                            ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """The policy's :meth:`logprobs`, and its [R * K, H] last hidden states at the kept positions,
        from one forward pass: a value head on the policy reads them, so the trunk runs (and keeps its
        activations for the backward) once rather than twice."""
        logits, hidden = self.kept_logits_and_hidden(self.policy(), batch)
        return (*self._completion_logprobs(logits, batch, with_entropy, None), hidden)

    def _completion_logprobs(self, logits: torch.Tensor, batch: MicroBatch, with_entropy: bool,
                             temperature: float | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[S, T] logprobs (and entropies) of the completion tokens, from the kept positions' logits."""
        temperature = self.config.rollout.temperature if temperature is None else temperature
        device = self.dist.device
        flat, entropy = chunked_logprobs(logits, batch.kept_targets.to(device), temperature=temperature,
                                         with_entropy=with_entropy, **self.logprob_functions())
        index = batch.token_index.to(device)
        return flat[index], (entropy[index] if entropy is not None else None)

    def logprob_functions(self) -> dict[str, Any]:
        """How a chunk's logprobs and entropies are computed (:func:`chunked_logprobs`'s options)."""
        return {}

    def distributions(self, batch: MicroBatch, *, reference: bool = False) -> torch.Tensor:
        """[S, T, V] the log-softmax over the vocabulary at each completion token's position (at
        temperature 1: the model's own distribution, what a teacher's logprobs are compared with).

        ``reference``: of the weights :meth:`keep_reference` kept (distillation keeps its teacher
        there), no gradient.
        """
        model = self._chosen(reference)
        with torch.no_grad() if reference else contextlib.nullcontext():
            logits = self.kept_logits(model, batch)
            per_token = logits[batch.token_index.to(logits.device)]
            return torch.log_softmax(per_token.float(), dim=-1)

    @property
    def input_device(self) -> torch.device:
        """Where a forward pass's inputs go."""
        return self.dist.device

    def scores(self, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """[N] float scores of a reward model (``head="score"``) for token sequences, differentiable: one
        padded forward pass, each read at its sequence's last token, as transformers' sequence
        classifier and TRL's ``RewardTrainer`` read it."""
        input_ids, mask = right_padded(sequences, self.pad_id)
        with self.autocast():
            output = self.policy()(input_ids=input_ids.to(self.input_device),
                                   attention_mask=mask.to(self.input_device), use_cache=False)
        return output.logits.squeeze(-1).float()

    def sft_loss(self, sequences: Sequence[TrainSequence], loss_tokens: float) -> torch.Tensor:
        """Negative log-likelihood of the sequences' sampled tokens (at temperature 1), summed and divided
        by ``loss_tokens``: the pass's share of a batch's token mean."""
        batch = collate(sequences, pack=self.packs, pad_id=self.pad_id)
        logprobs, _ = self.logprobs(batch, temperature=1.0)
        return -(logprobs * batch.loss_mask.to(logprobs.device)).sum() / max(loss_tokens, 1.0)

    @abc.abstractmethod
    def backward(self, loss: torch.Tensor) -> None:
        """Add ``loss``'s gradient; the learner has scaled it to its share of the global step."""

    @abc.abstractmethod
    def clip_gradients(self, parameters: Sequence[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
        """Clip ``parameters``' gradient to ``max_norm`` (their global norm, over every rank); the norm."""

    def step(self, *, lr: float | None = None) -> tuple[float, float]:
        """Clip, take an optimiser step and clear the gradients; (gradient norm, rate used).

        ``lr``: this update's rate instead of the schedule's (the format warm-up).
        """
        optimizer = self.optimizer
        used = [group["lr"] for group in optimizer.param_groups]
        if lr is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr
        params = [p for p in self.policy().parameters() if p.requires_grad]
        norm = self.clip_gradients(params, self.config.optim.max_grad_norm or float("inf"))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        for group, value in zip(optimizer.param_groups, used):
            group["lr"] = value
        self.optimizer_steps += 1
        return float(norm), float(lr if lr is not None else used[0])

    def finish_step(self, *, trained: bool) -> None:
        """A training step is over: the schedule moves to the next step, and the policy version goes up
        when the step changed the weights."""
        self.schedule_step += 1
        self.apply_schedule(self.optimizer)
        if trained:
            self.version += 1

    # -- the reference model -------------------------------------------------------------

    def keep_reference(self, folder: str | Path) -> None:
        """Keep the model of ``folder`` (a transformers folder: the start model, or its export after
        the warm-up), frozen, as the reference: the KL's, or the DPO reference, or a teacher."""
        from transformers import AutoModelForCausalLM

        reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")
        reference.config.use_cache = False
        self.reference = self.place(reference.requires_grad_(False).eval())

    # -- weights and state ---------------------------------------------------------------

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

    def counters(self) -> dict[str, int]:
        return {"version": self.version, "optimizer_steps": self.optimizer_steps, "schedule_step": self.schedule_step}

    def load_counters(self, state: dict[str, Any]) -> None:
        self.version, self.optimizer_steps = int(state["version"]), int(state["optimizer_steps"])
        self.schedule_step = int(state.get("schedule_step", self.version))  # checkpoints before 2026-12-02
        self.apply_schedule(self.optimizer)

    def export(self, folder: str | Path) -> Path:
        """Write the (merged) weights, config and tokenizer as a transformers folder (rank 0). Tied
        weights stay tied: the folder's config says so, and the skeleton ties them after loading."""
        state = self.full_weights()
        folder = Path(folder)
        if self.dist.is_main:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(self.model_path, **_head_options(self.head, self.tokenizer))
            with torch.device("meta"):
                skeleton = model_class(self.head).from_config(config)
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
