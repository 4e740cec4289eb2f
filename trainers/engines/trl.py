"""The trl engine (``--backend trl``): the Hugging Face trainer stack, through TRL's public API only.

An ``SFTTrainer`` is built once and used as a component, never driven by its own
``train()`` loop (the run skeleton owns the loop):

- its ``accelerator`` (public) runs the backward pass and clips the gradient, so
  accelerate's mixed precision and device placement apply;
- its ``compute_loss`` (public) is the SFT loss, and its ``data_collator`` pads
  that loss's batches (labels -100 off the policy's own tokens, as TRL's
  completion-only preparation writes them);
- the optimiser and the schedule are agentgym's (``optimizers=`` of the
  constructor), so both backends step the same ones;
- GRPO's logprobs come from TRL's ``selective_log_softmax`` and entropies from
  ``entropy_from_logits``; the loss is agentgym's (:mod:`~agentgym.trainers.losses`);
- DPO's loss is a ``DPOTrainer``'s public ``compute_loss`` (built on first use, around the
  same model), given the pairs as its collator writes them (chosen then rejected, a
  completion mask that skips the env's tokens) and the reference's logprobs precomputed.

Why not ``GRPOTrainer``: its documented ``rollout_func`` path computes its own
advantages from one scalar reward per completion, so per-turn baselines, group
filtering and agentgym's loss normalisers cannot be expressed without overriding
its private methods. One process only (accelerate's multi-process launch is not
wired in): under torchrun use ``--backend fsdp``.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.batch import MicroBatch, TrainSequence
from agentgym.trainers.engines.distributed import Dist
from agentgym.trainers.settings import TrainConfig

from agentgym.errors import ConfigError

__all__ = ["TRLEngine", "quiet_trl"]


@contextlib.contextmanager
def quiet_trl() -> Iterator[None]:
    """TRL without its chatter: no dataset progress bars, no warnings about its own deprecated calls."""
    from datasets.utils.tqdm import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    bars_were_off = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated",
                                    category=FutureWarning)
            yield
    finally:
        if not bars_were_off:
            enable_progress_bars()


class TRLEngine(Engine):
    """The model inside a TRL ``SFTTrainer`` used as a component (see the module's docstring)."""

    def __init__(self, config: TrainConfig, dist: Dist) -> None:
        if dist.sharded or int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ConfigError("The trl backend runs in one process; under torchrun use --backend fsdp.")
        super().__init__(config, dist)
        from trl import SFTConfig, SFTTrainer

        model, self._tokenizer = self._build_model()
        optimizer, scheduler = self._build_optimizer(model)
        args = SFTConfig(max_length=config.rollout.max_context_tokens, **self._trainer_args())
        from datasets import Dataset

        # SFTTrainer wants a dataset; the run skeleton feeds every batch itself, so one placeholder row.
        placeholder = Dataset.from_dict({"input_ids": [[self.pad_id, self.pad_id]], "completion_mask": [[0, 1]]})
        with quiet_trl():
            self.trainer = SFTTrainer(model=model, args=args, processing_class=self._tokenizer,
                                      train_dataset=placeholder, optimizers=(optimizer, scheduler))
        self.model = self.trainer.model
        self.model.train()
        self.optimizer, self.scheduler = optimizer, scheduler
        self._dpo: Any = None  # the DPOTrainer of preference_loss, built on first use

    def _trainer_args(self) -> dict[str, Any]:
        """What the TRL trainers used as components share: the run's folder, device, precision and seed;
        no logging, saving or progress bars of their own."""
        config, device = self.config, self.dist.device
        return {"output_dir": str(Path(config.run.out) / "trl"), "use_cpu": device.type == "cpu",
                "bf16": config.model.dtype == "bfloat16" and device.type == "cuda",
                "activation_checkpointing": config.model.gradient_checkpointing,  # TRL turns it on by default
                "report_to": [], "save_strategy": "no", "disable_tqdm": True, "dataloader_num_workers": 0,
                "seed": config.run.seed}

    def policy(self) -> torch.nn.Module:
        return self.model

    def _kept_logits(self, batch: MicroBatch, reference: bool) -> torch.Tensor:
        """[R, K, V] float logits at the positions that predict completion tokens."""
        if batch.attention_mask is None:
            raise ConfigError("The trl backend does not pack sequences (native.pack_sequences is fsdp's).")
        model = self.reference if reference else self.model
        if model is None:
            raise RuntimeError("no KL reference was kept (kl_coef is 0)")
        device = self.trainer.accelerator.device
        with (torch.no_grad() if reference else contextlib.nullcontext()), self.trainer.accelerator.autocast():
            logits = model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
                           use_cache=False).logits
        return logits[:, batch.keep.to(device)].float()

    def _kept_hidden(self, model: torch.nn.Module, batch: MicroBatch) -> torch.Tensor:
        if batch.attention_mask is None:
            raise ConfigError("The trl backend does not pack sequences (native.pack_sequences is fsdp's).")
        device = self.trainer.accelerator.device
        with self.trainer.accelerator.autocast():
            output = model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
                           logits_to_keep=1, output_hidden_states=True, use_cache=False)
        return output.hidden_states[-1][:, batch.keep.to(device)].float()

    def distributions(self, batch: MicroBatch, *, reference: bool = False) -> torch.Tensor:
        kept = self._kept_logits(batch, reference)
        per_token = kept.reshape(-1, kept.shape[-1])[batch.token_index.to(kept.device)]
        return torch.log_softmax(per_token, dim=-1)

    def logprobs(self, batch: MicroBatch, *, with_entropy: bool = False, reference: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        from trl.trainer.utils import entropy_from_logits, selective_log_softmax

        device = self.trainer.accelerator.device
        kept = self._kept_logits(batch, reference)
        temperature = self.config.rollout.temperature
        if temperature > 0 and temperature != 1.0:  # the server sampled from this distribution
            kept = kept / temperature
        per_token = kept.reshape(-1, kept.shape[-1])[batch.token_index.to(device)]  # [S, T, V]
        logprobs = selective_log_softmax(per_token, batch.target_ids.to(device))
        entropy = None
        if with_entropy:
            with torch.no_grad():
                entropy = entropy_from_logits(per_token.detach())
        return logprobs, entropy

    def sft_loss(self, sequences: Sequence[TrainSequence], loss_tokens: float) -> torch.Tensor:
        """TRL's SFT loss of ``sequences`` (completion-only), summed and divided by ``loss_tokens``:
        the pass's share of a batch's token mean."""
        # Labels as TRL's dataset preparation builds them from a completion mask: -100 carries no loss.
        features = [{"input_ids": list(s.input_ids),
                     "labels": [-100] * s.prompt_length + [token if bit else -100 for token, bit in
                                                           zip(s.input_ids[s.prompt_length:], s.loss_mask)]}
                    for s in sequences]
        inputs = self.trainer.data_collator(features)
        inputs = {key: value.to(self.trainer.accelerator.device) if isinstance(value, torch.Tensor) else value
                  for key, value in inputs.items()}
        with self.trainer.accelerator.autocast():
            return self.trainer.compute_loss(self.model, inputs,
                                             num_items_in_batch=torch.tensor(max(loss_tokens, 1.0)))

    def preference_loss(self, chosen: Sequence[TrainSequence], rejected: Sequence[TrainSequence],
                        ref_chosen: torch.Tensor, ref_rejected: torch.Tensor) -> torch.Tensor:
        """TRL's DPO loss of the pairs: ``DPOTrainer.compute_loss`` on them, the reference's logprobs given."""
        trainer = self._dpo_trainer()
        sequences = [*chosen, *rejected]
        width = max(len(s.input_ids) for s in sequences)
        input_ids = torch.full((len(sequences), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        completion_mask = torch.zeros_like(input_ids)
        for row, sequence in enumerate(sequences):
            input_ids[row, :len(sequence.input_ids)] = torch.tensor(sequence.input_ids)
            attention_mask[row, :len(sequence.input_ids)] = 1
            completion_mask[row, sequence.prompt_length:len(sequence.input_ids)] = torch.tensor(sequence.loss_mask)
        device = trainer.accelerator.device
        inputs = {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device),
                  "completion_mask": completion_mask.to(device),
                  "ref_chosen_logps": ref_chosen.to(device), "ref_rejected_logps": ref_rejected.to(device)}
        with trainer.accelerator.autocast():
            return trainer.compute_loss(self.model, inputs)

    def _dpo_trainer(self) -> Any:
        """A ``DPOTrainer`` around this engine's model (its optimiser, the run's settings), built once."""
        if self._dpo is not None:
            return self._dpo
        from unittest import mock

        from datasets import Dataset
        from trl import DPOConfig, DPOTrainer

        dpo = self.config.dpo
        args = DPOConfig(beta=dpo.beta, loss_type=[dpo.dpo_loss], precompute_ref_log_probs=True, max_length=None,
                         **self._trainer_args())
        # DPOTrainer wants a dataset (and scores its reference logprobs once); the learner feeds every pair.
        placeholder = Dataset.from_dict({"prompt": ["x"], "chosen": [" y"], "rejected": [" z"]})
        with quiet_trl(), mock.patch.dict(os.environ, {"TQDM_DISABLE": "1"}):
            self._dpo = DPOTrainer(model=self.model, args=args, processing_class=self._tokenizer,
                                   train_dataset=placeholder, optimizers=(self.optimizer, self.scheduler))
        self.model.train()
        return self._dpo

    def backward(self, loss: torch.Tensor) -> None:
        self.trainer.accelerator.backward(loss)

    def step(self, *, lr: float | None = None) -> tuple[float, float]:
        params = [p for p in self.model.parameters() if p.requires_grad]
        return self._scheduled_step(self.optimizer, self.scheduler, lr,
                                    lambda max_norm: self.trainer.accelerator.clip_grad_norm_(params, max_norm))

    def full_weights(self) -> dict[str, torch.Tensor]:
        state = {name: tensor.detach().cpu() for name, tensor in self.model.state_dict().items()}
        return self.merged(state)

    def state(self) -> dict[str, Any]:
        return {"model": {name: t.detach().cpu() for name, t in self.model.state_dict().items()},
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "version": self.version, "optimizer_steps": self.optimizer_steps}

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.version, self.optimizer_steps = int(state["version"]), int(state["optimizer_steps"])
