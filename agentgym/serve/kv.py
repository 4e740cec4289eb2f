"""The running batch's KV cache: rows join and leave it, and decoding appends without copying.

Rows are left-padded: every row's tokens end at the last column, so a new
row joins by padding the shorter of (running cache, new rows' cache) on the
left and stacking them, and a finished row leaves by selecting the others.
Columns that are padding for every remaining row are then cut from the left,
so a long-finished row does not keep the attention window wide.

transformers' ``DynamicLayer`` appends a decode step's token with
``torch.cat``, copying the whole cache every step, and builds a cache from
tensors by the same copy: on a CPU that copying took more of a multi-turn
rollout's time than the model (``benchmarks/bench_prefix_cache.py``).
``SlackLayer`` keeps each layer's keys and values as views into buffers with
spare columns on the right, so a step writes its column in place, and joining
or leaving writes the rows once into a new buffer. Its ``keys``/``values``
are what a ``DynamicLayer``'s would be, so the model, its masks and the rest
of the cache API see nothing different.

Rows come and go far more often than the batch is rebuilt: in a multi-turn
rollout every turn ends one row and starts another. Copying the whole cache
for each (as a fresh buffer, its pages touched for the first time) cost a
real model's server up to several decode steps per turn. So the buffers also
keep spare rows, and a ``SlackLayer`` views only its first ``rows`` rows and
the columns ``start:end``: a row leaves by moving the last row into its place
(``drop_rows``: one row copied, the batch's row order changes), unused columns
on the left are cut by moving ``start`` (no copy), and new rows join by being
written into the spare rows when they fit (``join``).

A model with sliding-window layers cannot be reshaped this way
(``can_reshape``); its rows then join only an empty batch.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

__all__ = ["Layers", "SlackLayer", "buffer_like", "can_reshape", "drop_rows", "empty_cache", "join", "keep_rows",
           "layers", "slack", "wrap"]

Layers = list[tuple[torch.Tensor, torch.Tensor]]

_MIN_SLACK = 64  # spare columns a buffer gets at least: a reallocation every 64 decode steps at most

try:
    from transformers.cache_utils import DynamicLayer
except ImportError:  # a transformers without layered caches: plain DynamicCache, copies included
    DynamicLayer = None


def slack(columns: int) -> int:
    """Spare columns for a buffer holding ``columns``: a quarter more, at least ``_MIN_SLACK``."""
    return max(_MIN_SLACK, columns // 4)


def _row_slack(rows: int) -> int:
    """Spare rows for a buffer holding ``rows``: a quarter more, at least 4 (rows join one by one)."""
    return max(4, rows // 4)


if DynamicLayer is not None:
    class SlackLayer(DynamicLayer):
        """A full-attention layer whose keys and values are views (rows ``:rows``, columns
        ``start:end``) into buffers with spare rows and columns."""

        def __init__(self) -> None:
            super().__init__()
            self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
            self._view: torch.Tensor | None = None  # the keys view handed out last
            self._start = self._end = self._rows = 0

        @classmethod
        def holding(cls, keys: torch.Tensor, values: torch.Tensor, end: int, rows: int | None = None,
                    start: int = 0) -> SlackLayer:
            """A layer whose cache is rows ``:rows`` (default: all) and columns ``start:end`` of
            buffers ``keys`` and ``values``."""
            layer = cls()
            layer.device, layer.dtype, layer.is_initialized = keys.device, keys.dtype, True
            layer._attach(keys, values, end, keys.shape[0] if rows is None else rows, start)
            return layer

        def _attach(self, keys: torch.Tensor, values: torch.Tensor, end: int, rows: int, start: int) -> None:
            self._buffers, self._end, self._rows, self._start = (keys, values), end, rows, start
            self.keys, self.values = keys[:rows, :, start:end, :], values[:rows, :, start:end, :]
            self._view = self.keys

        @property
        def spare_rows(self) -> int:
            return 0 if self._buffers is None else self._buffers[0].shape[0] - self._rows

        def move_rows(self, targets: list[int], sources: list[int], rows: int) -> None:
            """Copy rows ``sources`` into rows ``targets``, then keep only the first ``rows``."""
            assert self._buffers is not None
            keys, values = self._buffers
            if targets:
                to = torch.tensor(targets, device=keys.device)
                source = torch.tensor(sources, device=keys.device)
                for buffer in (keys, values):
                    window = buffer[:, :, self._start:self._end]
                    window.index_copy_(0, to, window.index_select(0, source))
            self._attach(keys, values, self._end, rows, self._start)

        def cut_left(self, columns: int) -> None:
            """Stop viewing the first ``columns`` columns (padding for every row): no copy."""
            assert self._buffers is not None
            self._attach(*self._buffers, self._end, self._rows, self._start + columns)

        def append_rows(self, keys: torch.Tensor, values: torch.Tensor) -> bool:
            """Write rows ``[new, heads, width, dim]`` into spare rows, right-aligned at ``end``, with
            zeros on their left; False (nothing written) when they do not fit."""
            if self._buffers is None or keys.shape[0] > self.spare_rows or keys.shape[-2] > self._end:
                return False
            buffers = self._buffers
            start = min(self._start, self._end - keys.shape[-2])
            rows = slice(self._rows, self._rows + keys.shape[0])
            for buffer, part in zip(buffers, (keys, values), strict=True):
                buffer[:self._rows, :, start:self._start] = 0  # new padding left of the running rows
                buffer[rows, :, start:self._end - part.shape[-2]] = 0
                buffer[rows, :, self._end - part.shape[-2]:self._end] = part
            self._attach(*buffers, self._end, self._rows + keys.shape[0], start)
            return True

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor,
                   *args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.device, self.dtype, self.is_initialized = key_states.device, key_states.dtype, True
            new = key_states.shape[-2]
            if (self._buffers is None or self.keys is not self._view  # changed behind our back
                    or key_states.shape[0] != self._rows or self._end + new > self._buffers[0].shape[-2]):
                self._regrow(key_states, value_states, new)
            assert self._buffers is not None
            keys, values = self._buffers
            keys[:self._rows, :, self._end:self._end + new, :] = key_states
            values[:self._rows, :, self._end:self._end + new, :] = value_states
            self._attach(keys, values, self._end + new, self._rows, self._start)
            return self.keys, self.values

        def _regrow(self, key_states: torch.Tensor, value_states: torch.Tensor, new: int) -> None:
            """Move the cache into buffers with room for ``new`` more columns and then some."""
            old = self.keys is not None and self.keys.numel() > 0
            used = self.keys.shape[-2] if old else 0  # type: ignore[union-attr]
            columns = used + new + slack(used + new)
            rows = key_states.shape[0]
            capacity = rows if self._buffers is None else max(rows, self._buffers[0].shape[0])
            keys = key_states.new_empty((capacity, *key_states.shape[1:-2], columns, key_states.shape[-1]))
            values = value_states.new_empty((capacity, *value_states.shape[1:-2], columns, value_states.shape[-1]))
            if old:
                keys[:rows, :, :used, :] = self.keys
                values[:rows, :, :used, :] = self.values
            self._buffers, self._end, self._rows, self._start = (keys, values), used, rows, 0
else:  # pragma: no cover - only with a transformers older than the layered cache
    SlackLayer = None  # type: ignore[assignment,misc]


def wrap(buffers: Layers, end: int, rows: int | None = None) -> DynamicCache:
    """A cache of the first ``end`` columns (and ``rows`` rows, default all) of each layer's
    ``(keys, values)`` buffers."""
    if SlackLayer is None:  # pragma: no cover
        return DynamicCache(ddp_cache_data=[(k[:rows, :, :end, :], v[:rows, :, :end, :]) for k, v in buffers])
    cache = DynamicCache()
    cache.layers = [SlackLayer.holding(keys, values, end, rows) for keys, values in buffers]
    return cache


def empty_cache() -> DynamicCache:
    """A cache for a prefill from nothing; its layers are ``SlackLayer`` s."""
    cache = DynamicCache()
    if SlackLayer is not None:
        cache.layer_class_to_replicate = SlackLayer
    return cache


def can_reshape(cache: DynamicCache) -> bool:
    """True when every layer is a plain full-attention layer."""
    return all(len(entry) < 3 or entry[2] is None for entry in cache)


def layers(cache: DynamicCache) -> Layers:
    """Each layer's ``(keys, values)``, ``[rows, heads, columns, dim]``."""
    return [(entry[0], entry[1]) for entry in cache]


def buffer_like(tensor: torch.Tensor, rows: int, columns: int, spare_rows: int = 0) -> torch.Tensor:
    """An empty ``[rows + spare_rows, heads, columns + slack, dim]`` buffer of ``tensor``'s heads,
    dim, dtype and device (``tensor``: one row ``[heads, columns, dim]`` or a batch of them)."""
    return tensor.new_empty((rows + spare_rows, tensor.shape[-3], columns + slack(columns), tensor.shape[-1]))


def _slack_layers(cache: DynamicCache) -> list[SlackLayer] | None:
    """The cache's layers when every one is a ``SlackLayer`` (rows can move in place), else None."""
    found = list(getattr(cache, "layers", []))
    if SlackLayer is None or not found or not all(type(layer) is SlackLayer for layer in found):
        return None
    return found


def join(running: DynamicCache | None, running_mask: torch.Tensor | None,
         new: DynamicCache, new_mask: torch.Tensor) -> tuple[DynamicCache, torch.Tensor]:
    """Stack ``new`` rows under ``running`` ones (either may be longer); returns cache and mask.

    Each row is written once, right-aligned, into a buffer with spare columns;
    the padding on the left of the narrower part is zeroed (padding is masked,
    but a masked garbage NaN would still poison the softmax).
    """
    if running is None or running_mask is None:
        return new, new_mask
    width = max(running_mask.shape[1], new_mask.shape[1])
    top = running_mask.shape[0]
    slack_layers = _slack_layers(running)
    if (slack_layers is not None and new_mask.shape[1] <= running_mask.shape[1]
            and all(layer.spare_rows >= new_mask.shape[0] for layer in slack_layers)):
        for layer, (new_k, new_v) in zip(slack_layers, layers(new), strict=True):
            layer.append_rows(new_k, new_v)
        return running, torch.cat([running_mask, _pad_mask(new_mask, width)], dim=0)
    spare = _row_slack(top + new_mask.shape[0])
    buffers: Layers = []
    for (old_k, old_v), (new_k, new_v) in zip(layers(running), layers(new), strict=True):
        pair = []
        for old, fresh in ((old_k, new_k), (old_v, new_v)):
            buffer = buffer_like(old, top + fresh.shape[0], width, spare)
            _put(buffer[:top], old, width)
            _put(buffer[top:top + fresh.shape[0]], fresh, width)
            pair.append(buffer)
        buffers.append((pair[0], pair[1]))
    mask = torch.cat([_pad_mask(running_mask, width), _pad_mask(new_mask, width)], dim=0)
    return wrap(buffers, width, top + new_mask.shape[0]), mask


def _put(rows: torch.Tensor, part: torch.Tensor, width: int) -> None:
    """Write ``part`` right-aligned into the first ``width`` columns of ``rows``, zeros on its left."""
    start = width - part.shape[-2]
    rows[..., :start, :] = 0
    rows[..., start:width, :] = part


def _pad_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    missing = width - mask.shape[1]
    if missing == 0:
        return mask
    return torch.cat([mask.new_zeros((mask.shape[0], missing)), mask], dim=1)


def drop_rows(cache: DynamicCache, mask: torch.Tensor, gone: set[int]
              ) -> tuple[torch.Tensor, list[int]] | None:
    """Remove rows ``gone`` in place: the last kept rows move into their places, and the columns
    no remaining row uses are cut from the left. Returns the new mask and, for each row now, the
    row it was; None (nothing changed) unless every layer is a ``SlackLayer``."""
    slack_layers = _slack_layers(cache)
    if slack_layers is None:
        return None
    rows = mask.shape[0] - len(gone)
    holes = sorted(row for row in gone if row < rows)
    movers = [row for row in range(rows, mask.shape[0]) if row not in gone]
    order = list(range(rows))
    for hole, mover in zip(holes, movers, strict=True):
        order[hole] = mover
    for layer in slack_layers:
        layer.move_rows(holes, movers, rows)
    mask = mask.index_select(0, torch.tensor(order, dtype=torch.long, device=mask.device))
    used = mask.any(dim=0).nonzero()
    first = int(used[0]) if used.numel() else mask.shape[1]
    if first:
        for layer in slack_layers:
            layer.cut_left(first)
    return mask[:, first:], order


def keep_rows(cache: DynamicCache, mask: torch.Tensor, keep: list[int],
              trim: bool = True) -> tuple[DynamicCache, torch.Tensor]:
    """Keep only rows ``keep`` (in that order); with ``trim``, cut the columns they all leave unused.

    One copy: the kept rows' used columns go into a new buffer with spare columns.
    """
    index = torch.tensor(keep, dtype=torch.long, device=mask.device)
    mask = mask.index_select(0, index)
    first = 0
    if trim:
        used = mask.any(dim=0).nonzero()
        first = int(used[0]) if used.numel() else mask.shape[1]
    width = mask.shape[1] - first
    buffers: Layers = []
    for keys, values in layers(cache):
        pair = []
        for tensor in (keys, values):
            buffer = buffer_like(tensor, len(keep), width)
            torch.index_select(tensor[..., first:, :], 0, index, out=buffer[..., :width, :])
            pair.append(buffer)
        buffers.append((pair[0], pair[1]))
    return wrap(buffers, width), mask[:, first:]
