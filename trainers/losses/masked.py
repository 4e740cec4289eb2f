"""Reductions over the tokens a mask keeps (the policy's own sampled tokens)."""

from __future__ import annotations

import torch

__all__ = ["masked_mean"]


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1 (0 when the mask is empty, never NaN)."""
    mask = mask.to(values.dtype)
    total = (values * mask).sum() if dim is None else (values * mask).sum(dim=dim)
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return total / count.clamp(min=1.0)

