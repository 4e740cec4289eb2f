"""The one loop every learner's update runs in: epochs x mini-batches x micro-batches, on every rank.

    loop = MiniBatchLoop(engine, config, size=lambda s: len(s.input_ids), weight=lambda s: s.loss_tokens,
                         filler=lambda: filler_sequence(engine.pad_id))
    stats = loop.run(sequences, backward_pass)   # backward_pass(group, normaliser): forward, loss, backward

A step's items (sequences, or DPO's pairs) are dealt over the ranks once, longest first, round
robin, so tokens balance. Each epoch shuffles the whole step (seeded by the run's seed and the
policy version, so a resumed run takes the same batches) and splits it into ``optim.mini_batches``
parts as even as can be: 9 items into 4 parts are 3, 2, 2, 2, and there are never more parts than
items, so every update has something to learn from. Each rank trains on its own members of each
mini-batch, in micro-batches of at most ``optim.micro_batch_size`` items and
``optim.micro_batch_tokens`` tokens (padding counted); ranks with fewer micro-batches run filler
passes, since FSDP needs every rank to run as many. ``backward_pass(group, normaliser)`` does one
pass: ``normaliser`` is the mini-batch's total weight over every rank (its loss tokens, or its
sequences), so a loss summed over a pass and divided by it makes the mini-batch's mean whatever
the micro-batching and the number of ranks. After each mini-batch the engine clips and steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch

from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.batch import plan_micro_batches
from agentgym.trainers.engines.distributed import all_reduce

__all__ = ["MiniBatchLoop", "UpdateStats", "even_split", "padded", "remembered_logprobs"]

_Item = TypeVar("_Item")


def even_split(items: Sequence[_Item], parts: int) -> list[list[_Item]]:
    """``items`` in ``min(parts, len(items))`` consecutive parts whose sizes differ by one at most,
    the larger first: never an empty part."""
    count = min(parts, len(items))
    if count == 0:
        return []
    size, extra = divmod(len(items), count)
    out, start = [], 0
    for index in range(count):
        end = start + size + (index < extra)
        out.append(list(items[start:end]))
        start = end
    return out


@dataclass
class UpdateStats:
    """What the optimiser steps of one training step did."""

    grad_norms: list[float] = field(default_factory=list)
    lr: float | None = None

    @property
    def updates(self) -> int:
        return len(self.grad_norms)

    @property
    def grad_norm(self) -> float:
        return sum(self.grad_norms) / max(len(self.grad_norms), 1)


class MiniBatchLoop(Generic[_Item]):
    """Epochs x mini-batches x micro-batches over a step's items (see the module's docstring)."""

    def __init__(self, engine: Engine, config: Any, *, size: Callable[[_Item], int],
                 weight: Callable[[_Item], float], filler: Callable[[], _Item],
                 rows: Callable[[_Item], int] | None = None, epochs: int | None = None,
                 mini_batches: int | None = None, micro_batch_size: int | None = None) -> None:
        """``size``: an item's tokens (its longest sequence's, for an item of several); ``rows``: the
        sequences an item holds (1 by default); ``weight``: what it adds to a mini-batch's normaliser;
        ``filler``: an item with nothing to learn, for a rank's idle passes. ``epochs``,
        ``mini_batches`` and ``micro_batch_size`` default to the ``optim`` settings."""
        self.engine = engine
        self.config = config
        self.size, self.weight, self.filler = size, weight, filler
        self.rows = rows or (lambda item: 1)
        self.epochs = config.optim.epochs if epochs is None else epochs
        self.mini_batches = config.optim.mini_batches if mini_batches is None else mini_batches
        self.micro_batch_size = config.optim.micro_batch_size if micro_batch_size is None else micro_batch_size

    def local_share(self, items: Sequence[_Item]) -> list[_Item]:
        """This rank's items: dealt longest first, round robin, so tokens balance."""
        dist = self.engine.dist
        order = sorted(range(len(items)), key=lambda i: (-self.size(items[i]), i))
        return [items[i] for i in order[dist.rank::dist.world_size]]

    def micro_batches(self, local: Sequence[_Item]) -> list[list[_Item]]:
        """``local`` in passes, as many on every rank (fillers where a rank has fewer)."""
        optim = self.config.optim
        plan = plan_micro_batches([self.size(item) for item in local], pack=self.engine.packs,
                                  micro_batch_tokens=optim.micro_batch_tokens,
                                  micro_batch_size=self.micro_batch_size,
                                  rows=[self.rows(item) for item in local])
        groups = [[local[i] for i in indices] for indices in plan]
        count = int(all_reduce(torch.tensor(len(groups)), self.engine.dist, op="max").item())
        return groups + [[self.filler()] for _ in range(count - len(groups))]

    def mini_batches_of(self, items: Sequence[_Item]) -> Iterator[list[_Item]]:
        """Each epoch's mini-batches of the whole step (the same on every rank), shuffled."""
        generator = torch.Generator().manual_seed(self.config.run.seed * 7919 + self.engine.version)
        for _ in range(self.epochs):
            order = torch.randperm(len(items), generator=generator).tolist()
            yield from even_split([items[i] for i in order], self.mini_batches)

    def run(self, items: Sequence[_Item], backward_pass: Callable[[list[_Item], float], None], *,
            lr: float | None = None, before_update: Callable[[list[_Item]], None] | None = None,
            after_update: Callable[[], None] | None = None) -> UpdateStats:
        """Every update of the step: ``before_update`` with this rank's items of the mini-batch, its passes
        through ``backward_pass``, the engine's clip and step (at ``lr`` when given, else the schedule's),
        then ``after_update``."""
        stats = UpdateStats()
        mine = {id(item) for item in self.local_share(items)}
        for mini in self.mini_batches_of(items):
            local = [item for item in mini if id(item) in mine]
            if before_update is not None:
                before_update(local)
            normaliser = max(all_reduce(torch.tensor(float(sum(self.weight(i) for i in local))),
                                        self.engine.dist).item(), 1.0)
            for group in self.micro_batches(local):
                backward_pass(group, normaliser)
            grad_norm, stats.lr = self.engine.step(lr=lr)
            stats.grad_norms.append(grad_norm)
            if after_update is not None:
                after_update()
        return stats


def remembered_logprobs(engine: Engine, loop: MiniBatchLoop[Any], local: Sequence[Any],
                        collate: Callable[[list[Any]], Any]) -> dict[int, torch.Tensor]:
    """pi_old of each of this rank's sequences, with the weights of the step's start (by ``id``): what
    several updates a step compare against, so the clip starts to bite."""
    remembered: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for group in loop.micro_batches(local):
            logprobs, _ = engine.logprobs(collate(group))
            for s, sequence in enumerate(group):
                remembered[id(sequence)] = logprobs[s, :sequence.completion_length].detach()
    return remembered


def padded(group: Sequence[Any], remembered: dict[int, torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """[S, T] of the remembered per-token numbers of ``group``'s sequences (0 where none)."""
    out = torch.zeros_like(like)
    for s, sequence in enumerate(group):
        values = remembered.get(id(sequence))
        if values is not None:
            out[s, :values.shape[0]] = values.to(out.device)
    return out
