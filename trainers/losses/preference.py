"""Preference losses on pairs of completions: DPO and IPO, and a reward model's Bradley-Terry loss."""

from __future__ import annotations

import torch

__all__ = ["dpo_loss", "reward_model_loss"]


def dpo_loss(chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor, ref_rejected: torch.Tensor,
             *, beta: float, kind: str = "sigmoid", chosen_tokens: torch.Tensor | None = None,
             rejected_tokens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """DPO's loss of each pair, and each pair's implicit-reward margin.

    ``chosen``/``rejected``: the policy's summed logprobs of each pair's two completions
    (their sampled tokens only); ``ref_*`` the reference's. With h = (chosen - ref_chosen)
    - (rejected - ref_rejected), the margin of the implicit rewards is beta * h and

    - sigmoid (Rafailov et al. 2023): -log sigmoid(beta * h);
    - ipo (Azar et al. 2023): (h' - 1 / (2 beta))^2, h' the same difference of the log-ratios
      each divided by its completion's tokens (``*_tokens``), as TRL's DPOTrainer does, so
      that beta means the same whatever the lengths.
    """
    chosen_ratio, rejected_ratio = chosen - ref_chosen, rejected - ref_rejected
    margin = beta * (chosen_ratio - rejected_ratio)
    if kind == "sigmoid":
        return -torch.nn.functional.logsigmoid(margin), margin.detach()
    if kind == "ipo":
        if chosen_tokens is None or rejected_tokens is None:
            raise ValueError("IPO needs the completions' token counts")
        mean_margin = chosen_ratio / chosen_tokens.clamp(min=1) - rejected_ratio / rejected_tokens.clamp(min=1)
        return (mean_margin - 1.0 / (2.0 * beta)) ** 2, margin.detach()
    raise ValueError(f"unknown DPO loss {kind!r}: sigmoid or ipo")



def reward_model_loss(chosen: torch.Tensor, rejected: torch.Tensor, *, center_coefficient: float = 0.0
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """A reward model's loss of each pair, and each pair's score margin.

    ``chosen``/``rejected``: the model's scores of each pair's two sequences. The Bradley-Terry
    likelihood of the preference (Ouyang et al. 2022): -log sigmoid(chosen - rejected), plus
    ``center_coefficient`` * (chosen + rejected)^2, which keeps the scores near 0 (Eisenstein et
    al. 2023); the mean over pairs is TRL's ``RewardTrainer`` loss.
    """
    margin = chosen - rejected
    loss = -torch.nn.functional.logsigmoid(margin)
    if center_coefficient:
        loss = loss + center_coefficient * (chosen + rejected) ** 2
    return loss, margin.detach()
