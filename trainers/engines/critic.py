"""PPO's value model: a scalar linear head on the policy's last hidden state, or a separate critic.

``Critic.body`` is None for a head on the policy (the trunk shared, its value-loss gradient
joins the policy's), or a copy of the start model (``ppo.value_model=critic``). The head (and
the separate body) have their own optimiser and schedule at ``ppo.critic_lr``, as verl's critic.
The engine computes the values (:meth:`~agentgym.trainers.engines.base.Engine.values`), so both
backends give the same numbers.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["CRITIC_FILE", "Critic"]

#: the critic's weights in an exported model folder
CRITIC_FILE = "critic.pt"


class Critic(torch.nn.Module):
    """A scalar value head, with a body of its own or none (the policy's)."""

    def __init__(self, hidden_size: int, body: torch.nn.Module | None, seed: int) -> None:
        super().__init__()
        self.body = body
        self.head = torch.nn.Linear(hidden_size, 1)
        # Seeded: the same start on every rank, backend and resumed run. Small, so values start near 0.
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(self.head.weight.shape, generator=generator) * 0.02)
            self.head.bias.zero_()

    def parameters_to_train(self) -> list[torch.nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    def export_state(self) -> dict[str, Any]:
        return {"separate": self.body is not None,
                "state_dict": {name: t.detach().cpu() for name, t in self.state_dict().items()}}
