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
  ``entropy_from_logits``, a chunk of positions at a time; the loss is agentgym's
  (:mod:`~agentgym.trainers.losses`);
- DPO's loss is a ``DPOTrainer``'s public ``compute_loss`` (built on first use, around the
  same model), given the pairs as its collator writes them (chosen then rejected, a
  completion mask that skips the env's tokens) and the reference's logprobs precomputed;
- a reward model (``head="score"``, ``--trainer rm``) sits in a ``RewardTrainer`` instead of the
  ``SFTTrainer``: its ``compute_loss`` (public) is the Bradley-Terry loss, on the pairs as its
  ``data_collator`` pads them.

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

from agentgym.errors import ConfigError
from agentgym.trainers.engines.base import Engine, Head
from agentgym.trainers.engines.batch import MicroBatch, TrainSequence
from agentgym.trainers.engines.distributed import Dist

__all__ = ["TRLEngine", "quiet_trl"]


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Environment variables set for the block, then restored."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


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

    def __init__(self, config: Any, dist: Dist, *, head: Head = "lm") -> None:
        if dist.sharded or int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ConfigError("The trl backend runs in one process; under torchrun use --backend fsdp.")
        super().__init__(config, dist, head=head)
        model, self._tokenizer = self.build_model()
        optimizer = self.build_optimizer([p for p in model.parameters() if p.requires_grad])
        with quiet_trl():
            self.trainer = (self._reward_trainer(model, optimizer) if head == "score"
                            else self._sft_trainer(model, optimizer))
        self.model = self.trainer.model
        self.model.train()
        self.optimizer = optimizer
        self._dpo: Any = None  # the DPOTrainer of preference_loss, built on first use

    def _sft_trainer(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Any:
        from datasets import Dataset
        from trl import SFTConfig, SFTTrainer

        args = SFTConfig(max_length=self.config.rollout.max_context_tokens, **self._trainer_args())
        # SFTTrainer wants a dataset; the run skeleton feeds every batch itself, so one placeholder row.
        placeholder = Dataset.from_dict({"input_ids": [[self.pad_id, self.pad_id]], "completion_mask": [[0, 1]]})
        return SFTTrainer(model=model, args=args, processing_class=self._tokenizer, train_dataset=placeholder,
                          optimizers=(optimizer, None))

    def _reward_trainer(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Any:
        """A ``RewardTrainer`` around the reward model: its loss with the ``rm`` settings, no length filter."""
        from datasets import Dataset
        from trl import RewardConfig, RewardTrainer

        coefficient = self.config.rm.center_rewards_coefficient
        args = RewardConfig(max_length=None, center_rewards_coefficient=coefficient or None, **self._trainer_args())
        # A tokenized placeholder pair (RewardTrainer wants a dataset); the learner feeds every pair.
        placeholder = Dataset.from_dict({"chosen_ids": [[self.pad_id]], "rejected_ids": [[self.pad_id]]})
        return RewardTrainer(model=model, args=args, processing_class=self._tokenizer, train_dataset=placeholder,
                             optimizers=(optimizer, None))

    def _trainer_args(self) -> dict[str, Any]:
        """What the TRL trainers used as components share: the run's folder, device, precision and seed;
        no logging, saving or progress bars of their own."""
        config, device = self.config, self.dist.device
        return {"output_dir": str(Path(config.run.out) / "trl"), "use_cpu": device.type == "cpu",
                "bf16": config.model.dtype == "bfloat16",  # accelerate's autocast over the float32 weights
                "activation_checkpointing": config.model.gradient_checkpointing,  # TRL turns it on by default
                "report_to": [], "save_strategy": "no", "disable_tqdm": True, "dataloader_num_workers": 0,
                "seed": config.run.seed}

    def policy(self) -> torch.nn.Module:
        return self.model

    @property
    def input_device(self) -> torch.device:
        return self.trainer.accelerator.device

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return self.trainer.accelerator.autocast()

    def forward(self, model: torch.nn.Module, batch: MicroBatch, **options: Any) -> Any:
        if batch.attention_mask is None:
            raise ConfigError("The trl backend does not pack sequences (native.pack_sequences is fsdp's).")
        device = self.trainer.accelerator.device
        with self.autocast():
            return model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
                         position_ids=batch.position_ids.to(device), use_cache=False, **options)

    def logprob_functions(self) -> dict[str, Any]:
        from trl.trainer.utils import entropy_from_logits, selective_log_softmax

        return {"logprobs_of": selective_log_softmax, "entropy_of": entropy_from_logits}

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

    def reward_loss(self, chosen: Sequence[Sequence[int]], rejected: Sequence[Sequence[int]]
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """TRL's reward-model loss of the pairs: ``RewardTrainer.compute_loss`` on them as its collator pads
        them (chosen then rejected), and the scores it read (its outputs)."""
        features = [{"chosen_ids": list(c), "rejected_ids": list(r)} for c, r in zip(chosen, rejected)]
        inputs = {key: value.to(self.input_device) for key, value in self.trainer.data_collator(features).items()}
        with self.autocast():
            loss, outputs = self.trainer.compute_loss(self.model, inputs, return_outputs=True)
        chosen_scores, rejected_scores = outputs.logits.squeeze(-1).float().chunk(2)
        return loss, chosen_scores, rejected_scores

    def _dpo_trainer(self) -> Any:
        """A ``DPOTrainer`` around this engine's model (its optimiser, the run's settings), built once."""
        if self._dpo is not None:
            return self._dpo
        from datasets import Dataset
        from trl import DPOConfig, DPOTrainer

        dpo = self.config.dpo
        args = DPOConfig(beta=dpo.beta, loss_type=[dpo.dpo_loss], precompute_ref_log_probs=True, max_length=None,
                         **self._trainer_args())
        # DPOTrainer wants a dataset (and scores its reference logprobs once); the learner feeds every pair.
        placeholder = Dataset.from_dict({"prompt": ["x"], "chosen": [" y"], "rejected": [" z"]})
        with quiet_trl(), _environment(TQDM_DISABLE="1"):
            self._dpo = DPOTrainer(model=self.model, args=args, processing_class=self._tokenizer,
                                   train_dataset=placeholder, optimizers=(self.optimizer, None))
        self.model.train()
        return self._dpo

    def backward(self, loss: torch.Tensor) -> None:
        self.trainer.accelerator.backward(loss)

    def clip_gradients(self, parameters: Sequence[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
        return self.trainer.accelerator.clip_grad_norm_(list(parameters), max_norm)

    def full_weights(self) -> dict[str, torch.Tensor]:
        state = {name: tensor.detach().cpu() for name, tensor in self.model.state_dict().items()}
        return self.merged(state)

    def state(self) -> dict[str, Any]:
        return {"model": {name: t.detach().cpu() for name, t in self.model.state_dict().items()},
                "optimizer": self.optimizer.state_dict(),
                **self.counters()}

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.load_counters(state)
