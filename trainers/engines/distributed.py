"""The process group, sharding with FSDP2, and the few collectives the trainer needs.

Under ``torchrun`` (``WORLD_SIZE`` > 1) the trainer joins the process group
(gloo on the CPU, nccl on GPUs) and shards the model with FSDP2's
``fully_shard``: every decoder layer is its own unit, the embeddings, final
norm and LM head sit in the root unit. One process (no torchrun) needs no
group at all: the model stays a plain module and every collective here is a
no-op, so the same trainer code runs on a laptop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from agentgym.errors import ConfigError
from agentgym.serve.engine import resolve_device

__all__ = [
    "Dist",
    "all_reduce",
    "broadcast_object",
    "decoder_layers",
    "full_state_dict",
    "init_distributed",
    "shard_model",
]


@dataclass(frozen=True)
class Dist:
    """Where this process stands: its rank, how many there are, its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def sharded(self) -> bool:
        return self.world_size > 1


def _device(choice: str, local_rank: int) -> torch.device:
    """The trainer's device: a GPU is this process's local rank unless ``cuda:N`` names one."""
    device = resolve_device(choice)
    if device.type != "cuda":
        return device
    index = local_rank if device.index is None else device.index
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def init_distributed(device: str = "auto") -> Dist:
    """Join the ``torchrun`` process group if there is one; a 1-process Dist otherwise."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    where = _device(device, local_rank)
    if world_size <= 1:
        return Dist(device=where)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if where.type == "cuda" else "gloo")
    return Dist(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                device=where)


def all_reduce(tensor: torch.Tensor, info: Dist, op: str = "sum") -> torch.Tensor:
    """Sum (or max) ``tensor`` over every rank, in place; returns it.

    ``tensor`` may live anywhere: nccl reduces GPU tensors only, so it travels through
    the rank's device and back. One process reduces nothing and moves nothing.
    """
    if info.sharded:
        reduce_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op]
        on_device = tensor.to(info.device)
        dist.all_reduce(on_device, op=reduce_op)
        if on_device is not tensor:
            tensor.copy_(on_device)
    return tensor


def broadcast_object(value: Any, info: Dist, src: int = 0) -> Any:
    """``value`` from rank ``src`` on every rank (anything picklable)."""
    if not info.sharded:
        return value
    box = [value if info.rank == src else None]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The model's stack of decoder layers: the module list as long as its config's
    ``num_hidden_layers`` (public in every transformers config), wherever the model keeps it."""
    count = None
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "num_hidden_layers"):
            count = int(config.num_hidden_layers)
            break
    stacks = [module for module in model.modules()
              if isinstance(module, torch.nn.ModuleList) and len(module) == count]
    if count is None or not stacks:
        raise ConfigError(f"Cannot find the decoder layers of {type(model).__name__} (a list of its config's "
                          "num_hidden_layers blocks); FSDP needs them to shard layer by layer.")
    return stacks[0]


def shard_model(model: torch.nn.Module, info: Dist, *, compute_dtype: torch.dtype | None = None
                ) -> torch.nn.Module:
    """``fully_shard`` every decoder layer, then the root; unchanged with one process.

    ``compute_dtype``: FSDP2's mixed-precision policy, the float32 shards gathered in this precision for
    the forward and backward passes, the gradients reduced in float32.
    """
    if not info.sharded:
        return model
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32) if compute_dtype else None
    options = {"mp_policy": policy} if policy is not None else {}
    for layer in decoder_layers(model):
        fully_shard(layer, **options)
    fully_shard(model, **options)
    return model


def full_state_dict(model: torch.nn.Module, info: Dist, *, trainable_only: bool = False
                    ) -> dict[str, torch.Tensor]:
    """The full (unsharded) weights on the CPU of rank 0; an empty dict on the other ranks.

    Every rank must call it (the gather is a collective).
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=trainable_only)
    state = get_model_state_dict(model, options=options)
    return state if info.is_main else {}
