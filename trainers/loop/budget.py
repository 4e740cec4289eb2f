"""A run's wall-clock budget (``-s max_seconds``).

The run loop starts a :class:`TimeBudget` when it starts and asks :meth:`TimeBudget.spent`
after every step: the run ends after a whole step, as if ``steps`` ended there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["TimeBudget"]


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
