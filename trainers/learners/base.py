"""The learner: the one part of a training run that differs from trainer to trainer.

The run skeleton (:mod:`agentgym.trainers.loop.run`) gives a learner a step's rows and
asks for metrics; everything else (rollouts, the server, checkpoints, logging) is
the skeleton's. A learner owns an :class:`~agentgym.trainers.engines.base.Engine` (the
backend: the model, its optimiser, forward and backward passes)::

    class MyLearner(Learner):
        sections = frozenset({"mine"})            # the settings sections it reads
        def train_step(self, rows):               # -> metrics of the step
            ...
            self.engine.backward(loss)
            grad_norm, lr = self.engine.step()
            return {"loss": float(loss), "grad_norm": grad_norm, "lr": lr}

The trainer registry (:mod:`agentgym.trainers.registry`) maps (trainer, backend) to
a function ``make(config, dist) -> Learner``.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.distributed import Dist
from agentgym.trainers.settings import TrainConfig

from agentgym.rollout.rows import TrajectoryRow

__all__ = ["ENGINES", "Learner", "build_learner", "engine_class"]

#: backend name -> its engine, imported when asked for
ENGINES = {"fsdp": "agentgym.trainers.engines.native:NativeEngine", "trl": "agentgym.trainers.engines.trl:TRLEngine"}

#: sections every run reads, whatever the trainer
_ALWAYS = frozenset({"run", "model", "optim"})


def engine_class(backend: str) -> type[Engine]:
    """The engine class of ``backend`` (fsdp or trl)."""
    import importlib

    module, _, name = ENGINES[backend].partition(":")
    return getattr(importlib.import_module(module), name)


def build_learner(learner: type[Learner], config: TrainConfig, dist: Dist) -> Learner:
    """``learner`` on the backend ``config`` names; a setting neither reads is an error, raised before
    the model is loaded."""
    engine = engine_class(str(config.run.backend))
    config.check_used(set(_ALWAYS | learner.sections | engine.sections), set(learner.ignored))
    return learner(config, engine(config, dist))


class Learner(abc.ABC):
    """What a trainer does with a step's rows (see the module's docstring)."""

    #: settings sections the learner reads, beside run, model, optim and its backend's
    sections: frozenset[str] = frozenset()
    #: settings of the sections it reads that it still leaves alone (on every backend)
    ignored: frozenset[str] = frozenset()
    #: where its rows come from: "episodes" (played, or whole groups of a file) or "batches" (of a file)
    data: Literal["episodes", "batches"] = "episodes"
    #: whether the skeleton keeps the model the run starts from as the reference (and in OUT/reference)
    needs_reference: bool = False

    def __init__(self, config: TrainConfig, engine: Engine) -> None:
        self.config = config
        self.engine = engine

    @abc.abstractmethod
    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        """Learn from one step's rows (every rank gets the same rows); the step's metrics."""

    def read_recorded(self, path: str) -> list[TrajectoryRow]:
        """The rows of ``--trajectories`` (whole groups are taken from them): a rollout file's."""
        from agentgym.rollout.storage import read_rows

        return list(read_rows(path))

    @property
    def version(self) -> int:
        """Training steps done: the policy version of the weights."""
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
