"""The native engine (``--backend fsdp``): PyTorch, FSDP2 under torchrun, one plain process otherwise.

Every decoder layer is its own FSDP unit; gradients are averaged over ranks by
FSDP, so :meth:`NativeEngine.backward` scales each loss by the world size and
the learners' normalisers make the sum global. Micro-batches may be packed
(``native.pack_sequences``): several sequences in one row, kept apart by a
block-diagonal mask. With ``model.dtype=bfloat16`` FSDP2's mixed-precision policy
casts the float32 shards to bf16 for compute and reduces gradients in float32; one
process runs under autocast instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch

from agentgym.trainers.engines.base import Engine, Head
from agentgym.trainers.engines.batch import MicroBatch, packed_attention_mask
from agentgym.trainers.engines.distributed import Dist, full_state_dict, shard_model

__all__ = ["NativeEngine"]


class NativeEngine(Engine):
    """The model, sharded when there are several ranks, with its optimiser and schedule."""

    sections = frozenset({"native"})

    def __init__(self, config: Any, dist: Dist, *, head: Head = "lm") -> None:
        super().__init__(config, dist, head=head)
        model, self._tokenizer = self.build_model()
        self.model = self.place(model.train())
        self.optimizer = self.build_optimizer([p for p in self.model.parameters() if p.requires_grad])

    @property
    def packs(self) -> bool:  # type: ignore[override]
        return self.config.native.pack_sequences

    def place(self, model: torch.nn.Module) -> torch.nn.Module:
        bf16 = self.config.model.dtype == "bfloat16"
        return shard_model(model.to(self.dist.device), self.dist, compute_dtype=torch.bfloat16 if bf16 else None)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.dist.sharded:  # FSDP2's mixed-precision policy casts the parameters itself
            return contextlib.nullcontext()
        return super().autocast()

    def policy(self) -> torch.nn.Module:
        return self.model

    def forward(self, model: torch.nn.Module, batch: MicroBatch, **options: Any) -> Any:
        with self.autocast():
            return model(input_ids=batch.input_ids.to(self.dist.device),
                         position_ids=batch.position_ids.to(self.dist.device),
                         attention_mask=self._attention_mask(batch), use_cache=False, **options)

    def _attention_mask(self, batch: MicroBatch) -> torch.Tensor:
        if batch.attention_mask is not None:
            return batch.attention_mask.to(self.dist.device)
        # Packed: the models are loaded with SDPA attention, which takes a boolean 4-D mask as it is.
        return packed_attention_mask(batch.segment_ids).to(self.dist.device)

    def backward(self, loss: torch.Tensor) -> None:
        # FSDP averages gradients over ranks; the learner's scale is for a global sum.
        (loss * self.dist.world_size).backward()

    def clip_gradients(self, parameters: Sequence[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
        norm = torch.nn.utils.clip_grad_norm_(list(parameters), max_norm)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # a DTensor under FSDP

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
                **self.counters()}

    def load_state(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import (
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        options = self._options()
        set_model_state_dict(self.model, state["model"], options=options)
        set_optimizer_state_dict(self.model, self.optimizer, state["optimizer"], options=options)
        self.load_counters(state)
