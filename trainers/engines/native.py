"""The native engine (``--backend fsdp``): PyTorch, FSDP2 under torchrun, one plain process otherwise.

Every decoder layer is its own FSDP unit; gradients are averaged over ranks by
FSDP, so :meth:`NativeEngine.backward` scales each loss by the world size and
the learners' normalisers make the sum global. Micro-batches may be packed
(``native.pack_sequences``): several sequences in one row, kept apart by a
block-diagonal mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.batch import (
    MicroBatch,
    TrainSequence,
    collate,
    packed_attention_mask,
)
from agentgym.trainers.engines.distributed import Dist, full_state_dict, shard_model
from agentgym.trainers.settings import TrainConfig

__all__ = ["NativeEngine"]


class NativeEngine(Engine):
    """The model, sharded when there are several ranks, with its optimiser and schedule."""

    sections = frozenset({"native"})

    def __init__(self, config: TrainConfig, dist: Dist) -> None:
        super().__init__(config, dist)
        model, self._tokenizer = self._build_model()
        model.to(dist.device)
        model.train()
        self.model = shard_model(model, dist)
        self.optimizer, self.scheduler = self._build_optimizer(self.model)

    @property
    def packs(self) -> bool:  # type: ignore[override]
        return self.config.native.pack_sequences

    def _place(self, model: torch.nn.Module) -> torch.nn.Module:
        return shard_model(model, self.dist)

    def policy(self) -> torch.nn.Module:
        return self.model

    def _chosen(self, reference: bool) -> torch.nn.Module:
        model = self.reference if reference else self.model
        if model is None:
            raise RuntimeError("no KL reference was kept (kl_coef is 0)")
        return model

    def _kept_logits(self, model: torch.nn.Module, batch: MicroBatch) -> torch.Tensor:
        """[R, K, V] float logits at the positions that predict completion tokens."""
        output = model(input_ids=batch.input_ids, position_ids=batch.position_ids,
                       attention_mask=self._attention_mask(model, batch), logits_to_keep=batch.keep,
                       use_cache=False)
        return output.logits.float()

    def _kept_hidden(self, model: torch.nn.Module, batch: MicroBatch) -> torch.Tensor:
        output = model(input_ids=batch.input_ids, position_ids=batch.position_ids,
                       attention_mask=self._attention_mask(model, batch), logits_to_keep=1,
                       output_hidden_states=True, use_cache=False)
        return output.hidden_states[-1][:, batch.keep].float()

    def distributions(self, batch: MicroBatch, *, reference: bool = False) -> torch.Tensor:
        model = self._chosen(reference)
        with torch.no_grad() if reference else torch.enable_grad():
            logits = self._kept_logits(model, batch)
            return torch.log_softmax(logits.reshape(-1, logits.shape[-1]), dim=-1)[batch.token_index]

    def logprobs(self, batch: MicroBatch, *, with_entropy: bool = False, reference: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        model = self._chosen(reference)
        with torch.no_grad() if reference else torch.enable_grad():
            logits = self._kept_logits(model, batch)
            temperature = self.config.rollout.temperature
            if temperature > 0 and temperature != 1.0:  # the server sampled from this distribution
                logits = logits / temperature
            flat = logits.reshape(-1, logits.shape[-1])
            normaliser = torch.logsumexp(flat, dim=-1)
            logprobs = flat[batch.token_index, batch.target_ids] - normaliser[batch.token_index]
        entropy = None
        if with_entropy:
            with torch.no_grad():
                per_position = normaliser - (torch.softmax(flat, dim=-1) * flat).sum(dim=-1)
                entropy = per_position[batch.token_index]
        return logprobs, entropy

    @staticmethod
    def _attention_mask(model: torch.nn.Module, batch: MicroBatch) -> torch.Tensor | None:
        if batch.attention_mask is not None:
            return batch.attention_mask
        implementation = getattr(model.config, "_attn_implementation", "sdpa")
        if implementation.startswith("flash"):
            return None  # flash attention reads packed sequences from the position ids
        if implementation == "sdpa":
            return packed_attention_mask(batch.segment_ids)
        return packed_attention_mask(batch.segment_ids, dtype=model.dtype)

    def sft_loss(self, sequences: Sequence[TrainSequence], loss_tokens: float) -> torch.Tensor:
        """Negative log-likelihood of the sequences' sampled tokens, summed and divided by
        ``loss_tokens``: the pass's share of a batch's token mean."""
        batch = collate(sequences, pack=self.packs, pad_id=self.pad_id).to(self.dist.device)
        logprobs, _ = self.logprobs(batch)
        return -(logprobs * batch.loss_mask).sum() / max(loss_tokens, 1.0)

    def backward(self, loss: torch.Tensor) -> None:
        # FSDP averages gradients over ranks; the learner's scale is for a global sum.
        (loss * self.dist.world_size).backward()

    def step(self, *, lr: float | None = None) -> tuple[float, float]:
        params = [p for p in self.model.parameters() if p.requires_grad]
        return self._scheduled_step(self.optimizer, self.scheduler, lr,
                                    lambda max_norm: torch.nn.utils.clip_grad_norm_(params, max_norm))

    def full_weights(self) -> dict[str, torch.Tensor]:
        state = full_state_dict(self.model, self.dist)
        return self.merged(state) if self.dist.is_main else {}

    def _options(self) -> Any:
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        # LoRA: the frozen base weights are the model folder's; only the adapters are saved.
        return StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=self.config.model.lora)

    def state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        options = self._options()
        return {"model": get_model_state_dict(self.model, options=options),
                "optimizer": get_optimizer_state_dict(self.model, self.optimizer, options=options),
                "scheduler": self.scheduler.state_dict(), "version": self.version,
                "optimizer_steps": self.optimizer_steps}

    def load_state(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import (
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        options = self._options()
        set_model_state_dict(self.model, state["model"], options=options)
        set_optimizer_state_dict(self.model, self.optimizer, state["optimizer"], options=options)
        self.scheduler.load_state_dict(state["scheduler"])
        self.version, self.optimizer_steps = int(state["version"]), int(state["optimizer_steps"])
