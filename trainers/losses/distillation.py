"""The KLs of distillation: pure functions of tensors, shared by both backends.

Shapes: ``S`` sequences, ``T`` completion tokens each (padded), ``V`` the vocabulary,
``K`` the teacher's top tokens kept; ``mask`` is 1 on the tokens that carry the loss
(the policy's own tokens: env replies and padding carry none). Logprobs are natural logs.

- :func:`forward_kl_full`: KL(teacher || student) over the whole vocabulary at each
  position (offline, the teacher in the same process).
- :func:`forward_kl_top_k`: the same over the teacher's top ``K`` tokens and one more
  bucket, "every other token": the teacher's remaining mass ``1 - sum(p_t(top K))``
  against the student's remaining mass ``1 - sum(p_s(top K))``. This is the exact KL of
  the two distributions coarsened to K + 1 outcomes, so it is never more than the full KL
  (data processing) and equals it when the teacher's mass outside its top K is zero. It
  needs no renormalisation, and the student is still pushed to give the tail no more than
  the teacher does.
- :func:`reverse_kl_sampled`: the per-token reverse KL(student || teacher) on tokens the
  student sampled itself (on-policy distillation), estimated as
  ``log p_s(x) - log p_t(x)``. Because ``x`` was drawn from the student, the plain derivative
  of that estimate has expectation zero; the loss's gradient is the score-function one,
  ``(log p_s(x) - log p_t(x) - b) * grad log p_s(x)`` with the sequence's mean estimate as the
  baseline ``b``, and its value is the mean estimate itself.
"""

from __future__ import annotations

import torch

from agentgym.trainers.losses.masked import masked_mean

__all__ = ["forward_kl_full", "forward_kl_top_k", "reverse_kl_sampled", "sequence_baseline", "teacher_top_k"]

_TINY = 1e-7  # keeps log(1 - mass) finite (float32) when the top K hold all of it


def forward_kl_full(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor) -> torch.Tensor:
    """[S, T] KL(teacher || student) = sum_v p_t(v) (log p_t(v) - log p_s(v)) from two [S, T, V]
    log-softmaxes; differentiable in the student's."""
    teacher = teacher_logprobs.detach()
    return (teacher.exp() * (teacher - student_logprobs)).sum(dim=-1)


def _log_rest(logprobs: torch.Tensor) -> torch.Tensor:
    """log(1 - sum(exp(logprobs))) over the last dimension: the log mass outside these tokens."""
    inside = torch.logsumexp(logprobs, dim=-1).clamp(max=-_TINY)
    return torch.log(-torch.expm1(inside))


def forward_kl_top_k(student_logprobs: torch.Tensor, top_ids: torch.Tensor,
                     top_logprobs: torch.Tensor) -> torch.Tensor:
    """[S, T] KL(teacher || student) over the teacher's top K tokens plus the bucket of every other
    token (see the module's docstring).

    Args:
        student_logprobs: [S, T, V] the student's log-softmax (differentiable).
        top_ids: [S, T, K] the teacher's top tokens at each position (distinct).
        top_logprobs: [S, T, K] the teacher's logprobs of them.
    """
    teacher = top_logprobs.detach().float()
    student = student_logprobs.gather(-1, top_ids)
    kl = (teacher.exp() * (teacher - student)).sum(dim=-1)
    teacher_rest, student_rest = _log_rest(teacher), _log_rest(student)
    return kl + teacher_rest.exp() * (teacher_rest - student_rest)


def teacher_top_k(teacher_logprobs: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ids and logprobs of the ``k`` most likely tokens of a [S, T, V] log-softmax."""
    values, ids = teacher_logprobs.detach().topk(k, dim=-1)
    return ids, values


def sequence_baseline(estimate: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[S, 1] each sequence's mean of ``estimate`` over its masked tokens (0 for a sequence without any)."""
    return masked_mean(estimate, mask, dim=-1).unsqueeze(-1)


def reverse_kl_sampled(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, mask: torch.Tensor,
                       weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The token mean of the per-token reverse KL on the student's own samples, and the [S, T] estimates.

    ``student_logprobs``: [S, T] log p_s of the sampled tokens (differentiable); ``teacher_logprobs``:
    [S, T] the teacher's of the same tokens. The loss's value is the mean estimate; its gradient is
    the score-function one (see the module's docstring). ``weights``: [S, T] importance weights
    p_s / p_sampling (detached) when the tokens were sampled from another distribution (an older
    policy, another temperature); each token's estimate and gradient are weighted by them.
    """
    estimate = student_logprobs.detach() - teacher_logprobs.detach()
    # Each sequence's mean estimate as its baseline: E[b * grad log p_s] = 0, so the gradient stays
    # unbiased (but for the token's own share of b) and loses the variance of a reward every token of
    # the sequence shares. Per sequence, so micro-batching and ranks change nothing.
    centred = estimate - sequence_baseline(estimate, mask)
    per_token = estimate + centred * (student_logprobs - student_logprobs.detach())
    if weights is not None:
        per_token = per_token * weights.detach()
    return masked_mean(per_token, mask), estimate
