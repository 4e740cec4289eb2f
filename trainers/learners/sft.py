"""Supervised fine-tuning on trajectories (``--trainer sft``), and the format warm-up before GRPO.

- ``agentgym train --trainer sft --trajectories rollouts.parquet``: fine-tune on the
  *successful* episodes of one or more rollout files (filtered behaviour cloning); each
  step is one optimiser step on ``optim.micro_batch_size`` rows
  (:class:`~agentgym.trainers.loop.sources.SFTBatches`), run as ``sft.sft_passes`` passes or more
  (each at most ``optim.micro_batch_tokens`` tokens) through the shared mini-batch loop;
- the format warm-up (:func:`sft_update` from the run loop): a few steps on episodes of
  the env's random well-formed policy, which teach a random-init model to write a readable
  action.

Either way the loss is on the policy's own tokens only (``completion_mask``): the env's
replies and the prompt carry none. On the trl backend the loss is TRL ``SFTTrainer``'s own
``compute_loss``; on fsdp the same negative log-likelihood computed natively.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.batch import TrainSequence, filler_sequence, to_sequences
from agentgym.trainers.engines.distributed import all_reduce
from agentgym.trainers.learners.base import Learner
from agentgym.trainers.learners.minibatch import MiniBatchLoop

__all__ = ["SFTLearner", "sft_update"]


def sft_update(engine: Engine, rows: Sequence[TrajectoryRow], *, passes: int = 1,
               lr: float | None = None) -> dict[str, float]:
    """One optimiser step of supervised fine-tuning on the rows' sampled tokens, their token mean.

    The rows run as at least ``passes`` forward passes (rows of similar length together, at most
    ``optim.micro_batch_tokens`` tokens each) whose gradients add up: the same step as one pass.
    ``lr``: this step's rate instead of the schedule's (the format warm-up).
    """
    started = time.perf_counter()
    sequences = to_sequences(rows, [1.0] * len(rows))
    per_pass = max(math.ceil(len(sequences) / engine.dist.world_size / max(passes, 1)), 1)
    loop: MiniBatchLoop[TrainSequence] = MiniBatchLoop(
        engine, engine.config, size=lambda s: len(s.input_ids), weight=lambda s: float(s.loss_tokens),
        filler=lambda: filler_sequence(engine.pad_id), epochs=1, mini_batches=1, micro_batch_size=per_pass)
    losses: list[float] = []

    def backward_pass(group: list[TrainSequence], normaliser: float) -> None:
        loss = engine.sft_loss(group, normaliser)
        engine.backward(loss)
        losses.append(float(loss.detach()))

    updates = loop.run(sequences, backward_pass, lr=lr)
    loss = all_reduce(torch.tensor(sum(losses), dtype=torch.float64), engine.dist).item()
    tokens = sum(len(s.input_ids) for s in sequences)
    total = float(sum(s.loss_tokens for s in sequences))
    metrics = {"updates": float(updates.updates), "loss_tokens": total, "train_tokens": float(tokens),
               "train_tokens_per_s": tokens / max(time.perf_counter() - started, 1e-9),
               "train_sequences": float(len(sequences))}
    if updates.updates:
        metrics.update({"loss": loss, "grad_norm": updates.grad_norm, "lr": float(updates.lr or 0.0)})
    return metrics


class SFTLearner(Learner):
    """Fine-tuning on a batch of rows a step (see the module's docstring)."""

    sections = frozenset({"rollout", "sft", "experimental"})
    #: SFT reads its rows from files: nothing of playing, and GRPO's options
    ignored = frozenset({"env_id", "env_kwargs", "group_size", "episodes_per_step", "max_turns", "turn_budget",
                         "max_tokens", "temperature", "top_p", "concurrency", "level_seeds", "max_staleness",
                         "filter_uniform_success", "turn_advantage_weight", "turn_discount",
                         "negative_advantage_weight", "mini_batches", "epochs", "asynchronous"})
    data = "batches"

    @classmethod
    def check(cls, config: Any) -> None:
        if config.rollout.trajectories is None:
            raise ConfigError("--trainer sft learns from a rollout file: pass --trajectories FILE (make one with "
                              "`agentgym rollout --env ENV --out FILE`, e.g. --policy solver for demonstrations).")

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        return sft_update(self.engine, rows, passes=self.config.sft.sft_passes)
