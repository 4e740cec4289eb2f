"""A run's wall-clock budget (``-s max_seconds``), shared by the fsdp loop, the trl backend and SFT.

Each trainer starts a :class:`TimeBudget` when it starts; the fsdp loop asks
:meth:`TimeBudget.spent` after every step, the TRL trainers through
:func:`time_limit_callback`. Either way the run ends after a whole step, as if
``steps`` ended there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TimeBudget", "time_limit_callback"]


@dataclass(frozen=True)
class TimeBudget:
    """``seconds`` of wall-clock time from ``began`` (a ``time.monotonic()``; now by default); 0: no limit."""

    seconds: float
    began: float = field(default_factory=time.monotonic)

    def spent(self) -> bool:
        return bool(self.seconds) and time.monotonic() - self.began >= self.seconds

    def note(self, step: int, steps: int) -> str:
        """What a run that ran out of it after ``step`` of ``steps`` logs."""
        return f"max_seconds ({self.seconds:g}) reached after step {step} of {steps}: the final model is this step's."


def time_limit_callback(budget: TimeBudget, *, every: int = 1, save: bool = False) -> Any:
    """A transformers callback that ends training once ``budget`` is spent, at the end of a step
    whose number is a multiple of ``every`` (a whole GRPO step of ``every`` optimiser steps), with
    a checkpoint when ``save``. Its ``stopped_at`` is then the steps done, counted in ``every``."""
    from transformers import TrainerCallback

    class TimeLimit(TrainerCallback):
        stopped_at: int | None = None

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step % every == 0 and state.global_step < state.max_steps and budget.spent():
                control.should_training_stop = True
                control.should_save = control.should_save or save
                self.stopped_at = state.global_step // every

    return TimeLimit()
