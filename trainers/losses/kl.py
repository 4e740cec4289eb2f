"""Per-token estimators of the KL divergence between the policy and a reference model (Schulman,
"Approximating KL Divergence", 2020), on tokens sampled from the policy, d = log pi_ref - log pi.

As *values* k1 = -d and k3 = exp(d) - d - 1 are unbiased estimates of KL(pi || pi_ref), k2 = d^2 / 2
a biased, low-variance one. As *losses* their gradients differ (a three-token softmax worked in
tests/trainers/losses/test_kl.py):

- k3's expected gradient, E_pi[grad k3] = E_pi[(1 - exp(d)) grad log pi] = grad KL(pi_ref || pi):
  the *forward* KL's, not the reverse KL's it estimates. GRPO's paper and TRL use it so.
- k2's expected gradient, E_pi[-d grad log pi] = grad KL(pi || pi_ref) on-policy: the reverse KL's.
- k1 as a loss has an expected gradient of zero (E_pi[grad log pi] = 0); it belongs in the reward
  (PPO's KL-in-reward: ``loss.kl_penalty=k1_reward``), where the policy gradient carries it.
"""

from __future__ import annotations

import torch

__all__ = ["kl_k1", "kl_k2", "kl_k3", "kl_term"]


def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """log pi - log pi_ref per token (KL-in-reward's penalty)."""
    return logprobs - ref_logprobs


def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """(log pi - log pi_ref)^2 / 2 per token: as a loss, its on-policy gradient is the reverse KL's."""
    return 0.5 * (logprobs - ref_logprobs) ** 2


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """exp(d) - d - 1 with d = log pi_ref - log pi, per token: an unbiased, always >= 0 estimate of
    KL(pi || pi_ref); as a loss its expected gradient is the forward KL(pi_ref || pi)'s (see above)."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1.0


def kl_term(kind: str, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """The per-token KL term a loss adds for ``loss.kl_penalty`` (k3 or k2; k1_reward adds none)."""
    if kind == "k3":
        return kl_k3(logprobs, ref_logprobs)
    if kind == "k2":
        return kl_k2(logprobs, ref_logprobs)
    return torch.zeros_like(logprobs)
