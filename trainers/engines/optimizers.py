"""The optimiser of a run (``-s optimizer=adamw|sgd``), built the same way for every trainer.

Both backends' engines build it with :func:`build_optimizer`, so a run's settings mean
the same optimiser whichever backend reads them.

Why SGD is offered beside AdamW: AdamW divides each weight's step by that
weight's own gradient size, so a weight whose gradient is pure noise still moves
by about ``lr`` every update. With a few hundred episodes a step, most of a
small model's policy gradient is noise (docs/log.md, 2026-11-27), and those
steps add up to a random walk away from the SFT model. SGD's step is the
gradient itself: the weights the batch says little about barely move. (On the
tiny Sokoban model GRPO lost to its lr-0 control with either; docs/log.md,
"SGD instead of AdamW".)
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from agentgym.errors import ConfigError
from agentgym.trainers.engines.settings import OptimizerName

__all__ = ["OptimizerName", "build_optimizer"]


def build_optimizer(params: Iterable[torch.nn.Parameter], name: str, *, lr: float,
                    adam_betas: tuple[float, float] = (0.9, 0.99), momentum: float = 0.0,
                    weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """AdamW (``adam_betas``; decay decoupled) or SGD (``momentum``, 0: plain gradient steps; decay added to
    the gradient)."""
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=adam_betas, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    raise _unknown(name)


def _unknown(name: str) -> ConfigError:
    return ConfigError(f"optimizer must be adamw or sgd, got {name!r}.")
