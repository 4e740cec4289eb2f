"""Reshaping a transformers ``DynamicCache`` so rows can join and leave a running batch.

Rows are left-padded: every row's tokens end at the last column, so a new
row joins by padding the shorter of (running cache, new rows' cache) on the
left and stacking them, and a finished row leaves by selecting the others.
Columns that are padding for every remaining row are then cut from the left,
so a long-finished row does not keep the attention window wide.

Only public pieces of the cache API are used: iterating a cache yields each
layer's ``(keys, values, sliding_window)``, ``DynamicCache(ddp_cache_data=...)``
builds one from tensors, and ``batch_select_indices`` keeps rows. A model
with sliding-window layers cannot be reshaped this way (``can_reshape``);
its rows then join only an empty batch.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

__all__ = ["can_reshape", "drop_left", "join", "Layers", "layers", "select_rows"]

Layers = list[tuple[torch.Tensor, torch.Tensor]]


def can_reshape(cache: DynamicCache) -> bool:
    """True when every layer is a plain full-attention layer."""
    return all(len(entry) < 3 or entry[2] is None for entry in cache)


def layers(cache: DynamicCache) -> Layers:
    """Each layer's ``(keys, values)``, ``[rows, heads, columns, dim]``."""
    return [(entry[0], entry[1]) for entry in cache]


def _pad_left(stacked: Layers, columns: int) -> Layers:
    if columns == 0:
        return stacked
    padded = []
    for keys, values in stacked:
        shape = (*keys.shape[:-2], columns, keys.shape[-1])
        pad = keys.new_zeros(shape)
        padded.append((torch.cat([pad, keys], dim=-2), torch.cat([pad, values], dim=-2)))
    return padded


def join(running: DynamicCache | None, running_mask: torch.Tensor | None,
         new: DynamicCache, new_mask: torch.Tensor) -> tuple[DynamicCache, torch.Tensor]:
    """Stack ``new`` rows under ``running`` ones (either may be longer); returns cache and mask."""
    if running is None or running_mask is None:
        return new, new_mask
    width = max(running_mask.shape[1], new_mask.shape[1])
    old_layers = _pad_left(layers(running), width - running_mask.shape[1])
    new_layers = _pad_left(layers(new), width - new_mask.shape[1])
    stacked = [(torch.cat([ok, nk], dim=0), torch.cat([ov, nv], dim=0))
               for (ok, ov), (nk, nv) in zip(old_layers, new_layers, strict=True)]
    mask = torch.cat([_pad_mask(running_mask, width), _pad_mask(new_mask, width)], dim=0)
    return DynamicCache(ddp_cache_data=stacked), mask


def _pad_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    missing = width - mask.shape[1]
    if missing == 0:
        return mask
    return torch.cat([mask.new_zeros((mask.shape[0], missing)), mask], dim=1)


def select_rows(cache: DynamicCache, mask: torch.Tensor,
                keep: list[int]) -> tuple[DynamicCache, torch.Tensor]:
    """Keep only rows ``keep`` (in that order)."""
    index = torch.tensor(keep, dtype=torch.long, device=mask.device)
    cache.batch_select_indices(index)
    return cache, mask.index_select(0, index)


def drop_left(cache: DynamicCache, mask: torch.Tensor) -> tuple[DynamicCache, torch.Tensor]:
    """Cut the leading columns that are padding in every row."""
    used = mask.any(dim=0).nonzero()
    first = int(used[0]) if used.numel() else mask.shape[1]
    if first == 0:
        return cache, mask
    kept = [(keys[..., first:, :], values[..., first:, :]) for keys, values in layers(cache)]
    return DynamicCache(ddp_cache_data=kept), mask[:, first:]
