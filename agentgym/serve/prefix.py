"""A prefix cache: the KV of finished rows, reused by prompts that start with their tokens.

A multi-turn episode sends its whole conversation every turn, and each turn's
prompt starts with the previous turn's prompt and answer. Without a cache the
engine prefills all of it again; with one, it prefills only the new tokens
(the env's reply) on top of the KV kept from the previous turn.

Entries are found as vLLM finds its blocks: a chain of hashes, one per full
block of ``BLOCK`` tokens, each hashing the one before and its block's
tokens, so a prompt is looked up block by block and the longest stored
prefix wins. An entry's last, partial block is indexed too, so a prompt that
continues a conversation reuses it to its very last token. Every hit is
checked token by token (a hash collision costs a miss, never a wrong answer).

Entries belong to one model (the base or a LoRA adapter, ``key``) and one set of
weights: the engine clears the cache whenever weights change. Memory is
bounded (``capacity_bytes``); the least recently used entries go first, and an
entry whose every token a newer one holds is dropped when that one is stored.
Only the engine thread touches a ``PrefixCache``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field

import torch

__all__ = ["BLOCK", "CacheEntry", "PrefixCache", "PrefixHit"]

BLOCK = 16
"""Tokens per hashed block."""


@dataclass(eq=False, slots=True)
class CacheEntry:
    """The KV of ``tokens`` under model ``key``: per layer, keys and values ``[heads, tokens, dim]``."""

    key: str | None
    tokens: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]
    nbytes: int = 0
    index_keys: list[Hashable] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PrefixHit:
    """``length`` leading tokens of a prompt whose KV ``entry`` holds."""

    entry: CacheEntry
    length: int


class PrefixCache:
    """Stored KV of finished rows, looked up by token prefix (see the module docstring)."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.nbytes = 0
        self._entries: OrderedDict[int, CacheEntry] = OrderedDict()  # id -> entry, oldest use first
        self._index: dict[Hashable, CacheEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def enabled(self) -> bool:
        return self.capacity_bytes > 0

    def lookup(self, key: str | None, prompt: list[int]) -> PrefixHit | None:
        """The longest stored prefix of ``prompt`` for model ``key``, or None.

        Past the last full block that matches, a prefix counts where a stored
        entry ends (a conversation's previous turn) or as far as the block's
        newest entry matches, whichever is found: what is missed is part of one
        block, run again.
        """
        if not self._entries:
            return None
        best: CacheEntry | None = None
        chain: Hashable = ("root", key)
        blocks = 0
        while (blocks + 1) * BLOCK <= len(prompt):
            step = _chain(chain, prompt[blocks * BLOCK:(blocks + 1) * BLOCK])
            entry = self._index.get(step)
            if entry is None:
                break
            best, chain, blocks = entry, step, blocks + 1
        tail = prompt[blocks * BLOCK:(blocks + 1) * BLOCK - 1]
        for size in range(len(tail), 0, -1):  # an entry that ends inside the next block
            entry = self._index.get((chain, tuple(tail[:size])))
            if entry is not None:
                best = entry
                break
        if best is None:
            return None
        length = _common_prefix(best.tokens, prompt)
        if length == 0:
            return None
        self._entries.move_to_end(id(best))
        return PrefixHit(best, length)

    def store(self, key: str | None, tokens: list[int],
              layers: list[tuple[torch.Tensor, torch.Tensor]], replaces: PrefixHit | None = None) -> None:
        """Keep ``layers`` (the KV of ``tokens``), evicting old entries to stay within capacity.

        ``replaces`` is the hit this row's prompt was prefilled from: when the new
        entry holds all of its tokens, the old entry can answer nothing the new
        one cannot, so it goes.
        """
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if not tokens or nbytes > self.capacity_bytes:
            return
        if replaces is not None and replaces.length == len(replaces.entry.tokens):
            self._remove(replaces.entry)
        entry = CacheEntry(key, tokens, layers, nbytes)
        chain: Hashable = ("root", key)
        full = len(tokens) // BLOCK
        for block in range(full):
            chain = _chain(chain, tokens[block * BLOCK:(block + 1) * BLOCK])
            entry.index_keys.append(chain)
        if len(tokens) % BLOCK:
            entry.index_keys.append((chain, tuple(tokens[full * BLOCK:])))
        for index_key in entry.index_keys:
            self._index[index_key] = entry  # the newest entry answers for a shared prefix
        self._entries[id(entry)] = entry
        self.nbytes += nbytes
        while self.nbytes > self.capacity_bytes:
            self._remove(next(iter(self._entries.values())))

    def clear(self) -> None:
        """Forget every entry (the weights they were computed with changed)."""
        self._entries.clear()
        self._index.clear()
        self.nbytes = 0

    def _remove(self, entry: CacheEntry) -> None:
        if self._entries.pop(id(entry), None) is None:
            return
        self.nbytes -= entry.nbytes
        entry.layers = []  # a running row may still point at the entry; its tensors go now
        for index_key in entry.index_keys:
            if self._index.get(index_key) is entry:
                del self._index[index_key]


def _chain(previous: Hashable, block: list[int]) -> Hashable:
    return hash((previous, tuple(block)))


def _common_prefix(a: list[int], b: list[int]) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length
