"""Supervised fine-tuning on trajectories (``--trainer sft``), and the format warm-up before GRPO.

- ``agentgym train --trainer sft --trajectories rollouts.parquet``: fine-tune on the
  *successful* episodes of one or more rollout files (filtered behaviour cloning); each
  step is one optimiser step on ``optim.micro_batch_size`` rows (:class:`SFTBatches`).
- the format warm-up (:func:`sft_update` from the run skeleton): a few steps on episodes of
  the env's random well-formed policy, which teach a random-init model to write a readable
  action.

Either way the loss is on the policy's own tokens only (``completion_mask``): the env's
replies and the prompt carry none. On the trl backend the loss is TRL ``SFTTrainer``'s own
``compute_loss``; on fsdp the same negative log-likelihood computed natively.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.batch import TrainSequence, filler_sequence, to_sequences
from agentgym.trainers.engines.distributed import Dist, all_reduce
from agentgym.trainers.learners.base import Learner, build_learner
from agentgym.trainers.settings import TrainConfig

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow

__all__ = ["SFTBatches", "SFTLearner", "length_grouped_order", "make_sft", "random_batch_order", "sft_passes",
           "sft_update", "trajectory_files"]


def sft_passes(batch_size: int, wanted: int) -> int:
    """The forward passes a batch of ``batch_size`` rows runs as: the largest divisor of it up to ``wanted``."""
    return max(d for d in range(1, max(1, min(wanted, batch_size)) + 1) if batch_size % d == 0)


def sft_update(engine: Engine, rows: Sequence[TrajectoryRow], *, passes: int = 1,
               lr: float | None = None) -> dict[str, float]:
    """One optimiser step of supervised fine-tuning on the rows' sampled tokens, their token mean.

    The rows, sorted by length, run as ``passes`` forward passes whose gradients add up: the
    same step as one pass, but each pads only to its own longest row. ``lr``: this step's rate
    instead of the schedule's (the format warm-up).
    """
    started = time.perf_counter()
    sequences = sorted(to_sequences(rows, [1.0] * len(rows)), key=lambda s: len(s.input_ids))
    mine = sequences[engine.dist.rank::engine.dist.world_size]
    total = max(all_reduce(torch.tensor(float(sum(s.loss_tokens for s in sequences))), engine.dist).item(), 1.0)
    loss_sum = 0.0
    for part in _parts(mine, sft_passes(max(len(mine), 1), passes)):
        loss = engine.sft_loss(part, total) if part else _empty_loss(engine)
        engine.backward(loss)
        loss_sum += float(loss.detach())
    grad_norm, rate = engine.step(lr=lr)
    loss = all_reduce(torch.tensor(loss_sum, dtype=torch.float64), engine.dist).item()
    tokens = sum(len(s.input_ids) for s in sequences)
    return {"loss": loss, "grad_norm": grad_norm, "lr": rate, "loss_tokens": total, "train_tokens": float(tokens),
            "train_tokens_per_s": tokens / max(time.perf_counter() - started, 1e-9),
            "train_sequences": float(len(sequences))}


def _parts(items: list[TrainSequence], count: int) -> list[list[TrainSequence]]:
    size = -(-len(items) // count) if items else 0
    return [items[i:i + size] for i in range(0, len(items), size)] if size else [[]]


def _empty_loss(engine: Engine) -> torch.Tensor:
    """A pass with no rows on this rank (FSDP needs every rank to run as many passes): zero, with a graph."""
    return engine.sft_loss([filler_sequence(engine.pad_id)], 1.0) * 0.0


class SFTLearner(Learner):
    """Fine-tuning on a batch of rows a step (see the module's docstring)."""

    sections = frozenset({"rollout", "sft", "experimental"})
    #: SFT reads its rows from files: nothing of playing, and GRPO's options
    ignored = frozenset({"env_id", "env_kwargs", "group_size", "episodes_per_step", "max_turns", "turn_budget",
                         "max_tokens", "temperature", "top_p", "concurrency", "level_seeds", "max_staleness",
                         "filter_uniform_success", "turn_advantage_weight", "turn_discount",
                         "negative_advantage_weight", "mini_batches", "epochs", "asynchronous"})
    data = "batches"

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        metrics = sft_update(self.engine, rows, passes=self.config.sft.sft_passes)
        self.engine.version += 1
        return metrics


def make_sft(config: TrainConfig, dist: Dist) -> Learner:
    """The registry's entry point: SFT on ``config.run.backend``'s engine."""
    if config.rollout.trajectories is None:
        raise ConfigError("--trainer sft learns from a rollout file: pass --trajectories FILE (make one with "
                          "`agentgym rollout --env ENV --out FILE`, e.g. --policy solver for demonstrations).")
    return build_learner(SFTLearner, config, dist)


# -- the rows of each step -----------------------------------------------------------------------


def trajectory_files(spec: str) -> list[Path]:
    """The files of ``--trajectories``: one path or several, comma-separated (a file named twice counts twice)."""
    paths = [Path(part.strip()) for part in spec.split(",") if part.strip()]
    if not paths:
        raise ConfigError(f"--trajectories {spec!r} names no file.")
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        raise ConfigError(f"--trajectories: no such file: {', '.join(missing)}.")
    return paths


class SFTBatches:
    """Step ``k``'s batch of the successful rows of the rollout files: random batches, each pass over
    the rows reshuffled (or batches of similar length, ``experimental.group_by_length``). The order
    depends on the seed alone, so a resumed run takes the batches the stopped one would have."""

    def __init__(self, config: TrainConfig) -> None:
        from agentgym.rollout.storage import read_rows

        paths = trajectory_files(str(config.rollout.trajectories))
        loaded = {path: read_rows(path) for path in dict.fromkeys(paths)}  # a file named twice is read once
        everything = [row for path in paths for row in loaded[path]]
        self.rows = [row for row in everything if row.error is None and row.success and any(row.completion_mask)]
        if not self.rows:
            raise ConfigError(f"No successful episodes to fine-tune on among {len(everything)} rows of "
                              f"{config.rollout.trajectories}. Roll out more episodes (or a better policy) first.")
        self.total = len(everything)
        self.batch_size = min(config.optim.micro_batch_size, len(self.rows))
        lengths = [len(row.prompt_ids) + len(row.completion_ids) for row in self.rows]
        samples = config.run.steps * self.batch_size
        if config.experimental.group_by_length:
            self.order = length_grouped_order(lengths, batch_size=self.batch_size, samples=samples,
                                              seed=config.run.seed)
        else:
            self.order = random_batch_order(len(lengths), batch_size=self.batch_size, samples=samples,
                                            seed=config.run.seed)

    def rows_of_step(self, step: int) -> list[TrajectoryRow]:
        return [self.rows[i] for i in self.order[step * self.batch_size:(step + 1) * self.batch_size]]


def random_batch_order(num_rows: int, *, batch_size: int, samples: int, seed: int) -> list[int]:
    """The first ``samples`` row indices of batches drawn at random, each pass over the rows reshuffled.

    A pass leaves out its last ``num_rows % batch_size`` rows (a different few each pass), so every
    batch is full and the batches stay aligned.
    """
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < samples:
        rows = list(range(num_rows))
        rng.shuffle(rows)
        order += rows[:num_rows - num_rows % batch_size]
    return order[:samples]


def length_grouped_order(lengths: Sequence[int], *, batch_size: int, samples: int, seed: int,
                         window: int = 50) -> list[int]:
    """The first ``samples`` row indices of batches of similar length, the batches in random order.

    Each pass is shuffled and cut into windows of ``window`` batches; a window is sorted by length and
    cut into batches, and the pass's batches are shuffled, so consecutive steps still see every length.
    """
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < samples:
        rows = list(range(len(lengths)))
        rng.shuffle(rows)
        rows = rows[:len(rows) - len(rows) % batch_size]
        batches: list[list[int]] = []
        for start in range(0, len(rows), window * batch_size):
            chunk = sorted(rows[start:start + window * batch_size], key=lambda i: lengths[i])
            batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
        rng.shuffle(batches)
        order += [i for batch in batches for i in batch]
    return order[:samples]
