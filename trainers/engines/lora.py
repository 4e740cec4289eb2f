"""Merging a peft LoRA state dict into plain transformers weights.

The server is given full weights (``W + B @ A * alpha / r``) under the base
model's names, so the weight sync of a LoRA run is the same as of a full one.
"""

from __future__ import annotations

import torch

__all__ = ["merge_lora_state"]

_PREFIX = "base_model.model."


def merge_lora_state(state: dict[str, torch.Tensor], scaling: float, adapter: str = "default"
                     ) -> dict[str, torch.Tensor]:
    """Fold every ``lora_A``/``lora_B`` pair into its ``base_layer`` weight; peft names removed."""
    merged: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if f".lora_A.{adapter}." in name or f".lora_B.{adapter}." in name:
            continue
        plain = name.removeprefix(_PREFIX).replace(".base_layer.", ".")
        if name.endswith(".base_layer.weight"):
            stem = name[: -len(".base_layer.weight")]
            a = state[f"{stem}.lora_A.{adapter}.weight"].float()
            b = state[f"{stem}.lora_B.{adapter}.weight"].float()
            tensor = (tensor.float() + (b @ a) * scaling).to(tensor.dtype)
        merged[plain] = tensor
    return merged
