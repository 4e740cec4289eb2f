"""The learner: the one part of a training run that differs from trainer to trainer.

The run loop (:mod:`agentgym.trainers.loop.run`) gives a learner a step's rows and asks for
metrics; everything else (rollouts, the server, checkpoints, logging, the policy version and the
learning-rate schedule) is the loop's. A learner owns an
:class:`~agentgym.trainers.engines.base.Engine` (the backend: the model, its optimiser, forward
and backward passes) and runs its updates through the shared
:class:`~agentgym.trainers.learners.minibatch.MiniBatchLoop`::

    class MyLearner(Learner):
        sections = frozenset({"mine"})            # the settings sections it reads
        def train_step(self, rows):               # -> metrics of the step, "updates" among them
            stats = self.loop.run(items, self.backward_pass)
            return {"updates": float(stats.updates), "grad_norm": stats.grad_norm}

The trainer registry (:mod:`agentgym.trainers.registry`) maps a trainer's name to its learner class
and the backends it runs on.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch

from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.engines.base import Engine, Head

__all__ = ["Learner"]


class Learner(abc.ABC):
    """What a trainer does with a step's rows (see the module's docstring)."""

    #: settings sections the learner reads, beside run, model, optim and its backend's
    sections: frozenset[str] = frozenset()
    #: settings of the sections it reads that it still leaves alone (on every backend)
    ignored: frozenset[str] = frozenset()
    #: where its rows come from: "episodes" (played, or whole groups of a file) or "batches" (of a file)
    data: Literal["episodes", "batches"] = "episodes"
    #: whether the loop keeps the model the run starts from as the reference (and in OUT/reference)
    needs_reference: bool = False
    #: what its engine's model predicts: "lm" (the next token) or "score" (one number a sequence: rm's)
    head: Head = "lm"

    def __init__(self, config: Any, engine: Engine) -> None:
        self.config = config
        self.engine = engine

    @property
    def refill_rounds(self) -> int:
        """Extra rounds of groups the loop may play for a step whose groups lack signal (DAPO's dynamic
        sampling; see :meth:`has_signal`). 0: none."""
        return 0

    def has_signal(self, group: Sequence[TrajectoryRow]) -> bool:
        """Whether a group's rows (its episodes of one seed) have something to teach; the loop refills a
        step until ``groups_per_step`` groups have (when :attr:`refill_rounds` allows)."""
        del group
        return True

    @classmethod
    def check(cls, config: Any) -> None:
        """Checks of the settings before any model is loaded (raise a ConfigError that names the fix)."""

    @classmethod
    def unread(cls, config: Any) -> frozenset[str]:
        """Settings of the sections it reads that these settings leave unread (beside ``ignored``)."""
        del config
        return cls.ignored

    @abc.abstractmethod
    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        """Learn from one step's rows (every rank gets the same rows); the step's metrics, with
        ``updates``: the optimiser steps taken (0: the step learned nothing)."""

    def idle_reason(self, metrics: dict[str, float]) -> str:
        """Why a step took no update, in words, from its metrics."""
        del metrics
        return "no row had a sampled token to learn from"

    def finish_step(self, *, trained: bool) -> None:
        """The step is over (the loop calls it after every step): the schedule moves on."""
        self.engine.finish_step(trained=trained)

    def read_recorded(self, path: str) -> list[TrajectoryRow]:
        """The rows of ``--trajectories`` (whole groups are taken from them): a rollout file's."""
        from agentgym.rollout.storage import read_rows

        return list(read_rows(path))

    @property
    def version(self) -> int:
        """Training steps that changed the weights: the policy version."""
        return self.engine.version

    def weights(self) -> dict[str, torch.Tensor]:
        """The full weights to push to the server (rank 0; a collective)."""
        return self.engine.full_weights()

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the learner (a collective)."""
        return self.engine.state()

    def load_state(self, state: dict[str, Any]) -> None:
        self.engine.load_state(state)

    def export(self, folder: str | Path) -> Path:
        """The trained model as a transformers folder."""
        return self.engine.export(folder)
