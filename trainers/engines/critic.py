"""PPO's value model: a scalar linear head on the policy's last hidden state, or a separate critic.

``Critic.body`` is None for a head on the policy (the trunk shared, its value-loss gradient
joins the policy's), or the start model loaded again (``ppo.value_model=critic``, sharded like
the policy under FSDP). The head (and the separate body) have their own optimiser at
``ppo.critic_lr`` on the run's schedule, as verl's critic. The engine computes the hidden
states (:meth:`~agentgym.trainers.engines.base.Engine.kept_hidden`), so both backends give the
same numbers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.batch import MicroBatch

__all__ = ["CRITIC_FILE", "Critic"]

#: the critic's weights in an exported model folder
CRITIC_FILE = "critic.pt"


class Critic(torch.nn.Module):
    """A scalar value head, with a body of its own or none (the policy's), and its optimiser."""

    def __init__(self, engine: Engine, *, separate: bool, lr: float) -> None:
        super().__init__()
        self.engine = engine
        self.body: torch.nn.Module | None = None
        if separate:
            body, _ = engine.build_model()
            self.body = engine.place(body.train())
        self.head = torch.nn.Linear(int(engine.policy().config.hidden_size), 1)
        # Seeded: the same start on every rank, backend and resumed run. Small, so values start near 0.
        generator = torch.Generator().manual_seed(engine.config.run.seed)
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(self.head.weight.shape, generator=generator) * 0.02)
            self.head.bias.zero_()
        self.head.to(engine.dist.device)
        self.optimizer = engine.build_optimizer(self.trained_parameters(), lr)

    def trained_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    def values(self, batch: MicroBatch, hidden: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """([S, T] the value at each completion token's position, [S] the value after each sequence's last
        token), both differentiable. ``hidden``: the policy's last hidden states at the kept positions,
        from a pass already made (a head on the policy only), so the trunk does not run again."""
        if hidden is None:
            hidden = self.engine.kept_hidden(self.body if self.body is not None else self.engine.policy(), batch)
        per_position = self.head(hidden).squeeze(-1)
        device = per_position.device
        return per_position[batch.token_index.to(device)], per_position[batch.final_index.to(device)]

    def step(self) -> float:
        """Clip the critic's own gradient (the head's and a separate body's, one global norm) and step its
        optimiser; the gradient norm before clipping."""
        dist = self.engine.dist
        head = [p for p in self.head.parameters() if p.grad is not None]
        if dist.sharded:  # the head is replicated, not an FSDP unit: average its gradient by hand
            from agentgym.trainers.engines.distributed import all_reduce

            for p in head:
                all_reduce(p.grad, dist)
                p.grad /= dist.world_size
        body = [p for p in (self.body.parameters() if self.body is not None else []) if p.grad is not None]
        # Under FSDP the body's gradients are sharded DTensors and the head's plain tensors: one
        # clip_grad_norm_ cannot take both, so each part's norm is taken apart and combined.
        total = math.sqrt(sum(_norm(group) ** 2 for group in (head, body) if group))
        max_norm = self.engine.config.optim.max_grad_norm or float("inf")
        for group in (head, body):
            if group:
                torch.nn.utils.clip_grads_with_norm_(group, max_norm, torch.tensor(total))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total

    def finish_step(self) -> None:
        """The step is over: the critic's rate follows the run's schedule (the engine's step)."""
        self.engine.apply_schedule(self.optimizer)

    def state(self) -> dict[str, Any]:
        """The value model, its optimiser and schedule, for a checkpoint (a collective)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return {"model": get_model_state_dict(self, options=options),
                "optimizer": get_optimizer_state_dict(self, self.optimizer, options=options)}

    def load_state(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        set_model_state_dict(self, state["model"], options=options)
        set_optimizer_state_dict(self, self.optimizer, state["optimizer"], options=options)
        self.engine.apply_schedule(self.optimizer)

    def export(self, folder: Path) -> None:
        """``critic.pt`` in an exported model folder: ``{"separate": bool, "state_dict": ...}`` (a collective)."""
        state = self.state()["model"]
        if self.engine.dist.is_main:
            torch.save({"separate": self.body is not None, "state_dict": state}, folder / CRITIC_FILE)


def _norm(parameters: list[torch.nn.Parameter]) -> float:
    norm = torch.nn.utils.get_total_norm([p.grad for p in parameters])
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
