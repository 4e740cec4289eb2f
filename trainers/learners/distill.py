"""Distillation's learner (``--trainer distill``): the student learns a teacher's token distributions.

Two ways, chosen by where the rows come from:

- **offline** (``--trajectories FILE``, as ROLL's distillation pipeline): on fixed
  trajectories, the forward KL(teacher || student) at every policy token, over the
  teacher's whole vocabulary (the teacher in this process) or over its top
  ``distill.teacher_top_k`` tokens plus one bucket for the rest of its mass
  (:mod:`~agentgym.trainers.losses.distillation`);
- **on-policy** (``--env ENV``; GKD, Thinking Machines' "on-policy distillation"): the
  student plays the env through the run's server, the teacher scores the tokens the student
  sampled, and the per-token reverse KL(student || teacher) is the loss
  (``distill_loss=reverse_kl``), or its negative is each token's advantage in GRPO's clipped
  policy loss (``distill_loss=advantage``). Each token is its own reward: no credit flows to
  earlier tokens (a discount of 0, as in that post).

The teacher is loaded in this process (``distill.teacher``) or asked over HTTP
(``distill.teacher_url``, :mod:`~agentgym.trainers.learners.teachers`). A step runs through the
shared mini-batch loop (:class:`~agentgym.trainers.learners.minibatch.MiniBatchLoop`) and
normalises each loss by the mini-batch's policy tokens, so the backends, micro-batching and the
number of ranks change nothing. The student's numbers come from the engine
(:meth:`~agentgym.trainers.engines.base.Engine.distributions` and ``logprobs``), so both backends
give the same update.

Both KLs compare the two models' own distributions (temperature 1, whatever the rollout's). On
policy, the student's tokens were sampled at the rollout's temperature, maybe by the weights of a
step before (``asynchronous``): each token's estimate is weighted by pi_student / pi_sampling (the
server's logprobs), truncated at ``loss.correction_cap`` as GRPO's importance correction, and
``distill_loss=advantage`` is GRPO's policy loss with its ``loss`` settings and checks (a
``top_p`` below 1 needs ``correction=none``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.batch import MicroBatch, TrainSequence, collate, filler_sequence, to_sequences
from agentgym.trainers.engines.distributed import all_reduce
from agentgym.trainers.learners.base import Learner
from agentgym.trainers.learners.minibatch import MiniBatchLoop, padded, remembered_logprobs
from agentgym.trainers.learners.teachers import SERVER_TOP_K, ServerTeacher, TeacherBatch, make_teacher
from agentgym.trainers.losses.distillation import (
    forward_kl_full,
    forward_kl_top_k,
    reverse_kl_sampled,
    sequence_baseline,
)
from agentgym.trainers.losses.masked import masked_mean
from agentgym.trainers.losses.policy import importance_weights, policy_loss

__all__ = ["DistillLearner"]

#: what playing reads: an offline run (a file of rows) leaves it alone
_PLAYING = frozenset({"env_id", "env_kwargs", "group_size", "max_turns", "turn_budget", "max_tokens", "temperature",
                      "top_p", "concurrency", "level_seeds", "max_staleness", "asynchronous", "base_url", "api_key",
                      "engine", "sync_weights"})
#: the policy loss's settings reverse_kl leaves alone (it reads the importance correction's only)
_CLIP_AND_AGGREGATION = frozenset({"policy_loss", "clip_low", "clip_high", "aggregation", "constant_sum_tokens",
                                   "top_entropy_quantile"})
#: the reference slot holds the teacher: no KL to a start model; and no env reward to shape
_NO_KL = frozenset({"kl_coef", "kl_penalty", "overlong_max_tokens", "overlong_cache_tokens", "overlong_penalty"})


@dataclass
class _Sums:
    """Per-token sums over a step's passes (weighted by their tokens), reduced over ranks at the end."""

    loss: float = 0.0
    tokens: float = 0.0
    kl: float = 0.0
    teacher_logprob: float = 0.0
    model_tokens: float = 0.0


class DistillLearner(Learner):
    """Distillation from a teacher (see the module's docstring)."""

    sections = frozenset({"rollout", "server", "warmup", "loss", "distill"})

    def __init__(self, config: Any, engine: Engine) -> None:
        super().__init__(config, engine)
        self.offline = config.rollout.trajectories is not None
        self.teacher = make_teacher(config.distill, engine)
        top_k = config.distill.teacher_top_k
        self.top_k = SERVER_TOP_K if top_k is None and isinstance(self.teacher, ServerTeacher) else top_k
        self.kl_name = "forward_kl" if self.offline else "reverse_kl"
        self.loop: MiniBatchLoop[TrainSequence] = MiniBatchLoop(
            engine, config, size=lambda s: len(s.input_ids), weight=lambda s: float(s.loss_tokens),
            filler=lambda: filler_sequence(engine.pad_id))
        self._old: dict[int, torch.Tensor] = {}

    @classmethod
    def check(cls, config: Any) -> None:
        distill = config.distill
        if distill.teacher is None and distill.teacher_url is None:
            raise ConfigError("--trainer distill needs a teacher: -s teacher=MODEL (loaded here) or "
                              "-s teacher_url=http://HOST:PORT/v1 (a server that returns prompt_logprobs).")
        offline = config.rollout.trajectories is not None
        unread = (_PLAYING | {"distill_loss"}) if offline else frozenset({"teacher_top_k"})
        for section in ("rollout", "server", "distill"):
            values, defaults = getattr(config, section), type(getattr(config, section))()
            for name in sorted(unread & set(type(values).model_fields)):
                if getattr(values, name) != getattr(defaults, name):
                    what = ("an offline distillation (--trajectories) plays nothing and computes the forward KL"
                            if offline else "an on-policy distillation (--env) computes the reverse KL on sampled "
                                            "tokens")
                    raise ConfigError(f"{section}.{name} is set, but {what}, which does not read it; remove it.")

    @classmethod
    def unread(cls, config: Any) -> frozenset[str]:
        if config.rollout.trajectories is not None:  # offline: no sampling, no policy loss
            return _PLAYING | {"distill_loss"} | _NO_KL | _CLIP_AND_AGGREGATION | {"correction", "correction_level",
                                                                                   "correction_cap"}
        if config.distill.distill_loss == "reverse_kl":
            return _NO_KL | _CLIP_AND_AGGREGATION | {"teacher_top_k"}
        return _NO_KL | {"teacher_top_k"}

    # -- the pieces of a step -----------------------------------------------------

    def teacher_scores(self, group: Sequence[TrainSequence], batch: MicroBatch) -> TeacherBatch:
        """What the teacher says about a micro-batch: its logprobs, and offline its top k or whole distribution."""
        return self.teacher.score(group, batch, full=self.offline, top_k=self.top_k if self.offline else None)

    def compute_distill_loss(self, group: Sequence[TrainSequence], batch: MicroBatch, teacher: TeacherBatch
                             ) -> tuple[torch.Tensor, torch.Tensor]:
        """The micro-batch's loss (a token mean over it) and the [S, T] per-token KL it reports."""
        if self.offline:
            student = self.engine.distributions(batch)
            mask = batch.loss_mask.to(student.device)
            if teacher.full is not None:
                per_token = forward_kl_full(student, teacher.full)
            else:
                assert teacher.top_ids is not None and teacher.top_logprobs is not None
                per_token = forward_kl_top_k(student, teacher.top_ids, teacher.top_logprobs)
            return masked_mean(per_token, mask), per_token.detach()
        own, _ = self.engine.logprobs(batch, temperature=1.0)  # the student's own distribution, as the teacher's
        mask = batch.loss_mask.to(own.device)
        teacher_logprobs = teacher.token_logprobs.to(own.device)
        sampled = self._sampling_logprobs(batch, own.detach())
        if self.config.distill.distill_loss == "reverse_kl":
            settings = self.config.loss
            weights = importance_weights(own.detach(), sampled, mask, mode=settings.correction,
                                         level=settings.correction_level, cap=settings.correction_cap)
            return reverse_kl_sampled(own, teacher_logprobs, mask, weights=weights)
        return self._advantage_loss(group, batch, own.detach(), teacher_logprobs, mask)

    def _sampling_logprobs(self, batch: MicroBatch, fallback: torch.Tensor) -> torch.Tensor:
        """What the server sampled each token with (its logprobs; the student's own where it gave none)."""
        has = batch.has_rollout_logprobs.to(fallback.device).unsqueeze(-1)
        return torch.where(has, batch.rollout_logprobs.to(fallback.device), fallback)

    def _advantage_loss(self, group: Sequence[TrainSequence], batch: MicroBatch, own: torch.Tensor,
                        teacher_logprobs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """GRPO's policy loss with each token's advantage the negated reverse-KL estimate, less its
        sequence's mean (the baseline reverse_kl uses too)."""
        logprobs, _ = self.engine.logprobs(batch)  # at the rollout's temperature: the ratio's distribution
        old = logprobs.detach() if self._single_update else padded(list(group), self._old, logprobs.detach())
        estimate = own - teacher_logprobs
        advantages = -(estimate - sequence_baseline(estimate, mask)) * mask
        rollout = self._sampling_logprobs(batch, old)
        output = policy_loss(logprobs, old, advantages, mask, self.config.loss, rollout_logprobs=rollout)
        return output.loss, estimate

    @property
    def _single_update(self) -> bool:
        return self.config.optim.updates_per_step == 1

    # -- a step ---------------------------------------------------------------------

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        start = time.perf_counter()
        sequences = to_sequences(rows, [0.0] * len(rows))
        local = self.loop.local_share(sequences)
        teacher_seconds = self.teacher.prepare(local, top_k=self.top_k if self.offline else 0)
        self._old = {}
        if not self.offline and self.config.distill.distill_loss == "advantage" and not self._single_update:
            self._old = remembered_logprobs(self.engine, self.loop, local, self._collate)
        sums = _Sums()
        updates = self.loop.run(sequences, lambda group, normaliser: self._backward_pass(group, normaliser, sums))
        totals = torch.tensor([sums.loss, sums.tokens, sums.kl, sums.teacher_logprob, sums.model_tokens],
                              dtype=torch.float64)
        all_reduce(totals, self.engine.dist)
        loss, tokens, kl, teacher_logprob, model_tokens = (float(value) for value in totals)
        seconds = time.perf_counter() - start
        metrics = {"updates": float(updates.updates), "grad_norm": updates.grad_norm, "train_tokens": model_tokens,
                   "loss_tokens": tokens, "train_tokens_per_s": model_tokens / max(seconds, 1e-9),
                   "train_sequences": float(len(sequences)), "time/teacher": teacher_seconds}
        if updates.lr is not None:
            metrics["lr"] = updates.lr
        if tokens > 0:
            metrics.update({"loss": loss / max(updates.updates, 1), self.kl_name: kl / tokens,
                            "teacher_logprob": teacher_logprob / tokens})
        return metrics

    def _collate(self, group: list[TrainSequence]) -> MicroBatch:
        return collate(group, pack=self.engine.packs, pad_id=self.engine.pad_id)

    def _backward_pass(self, group: list[TrainSequence], normaliser: float, sums: _Sums) -> None:
        """One pass: its token-mean loss, scaled to its share of the mini-batch (every rank, every pass)."""
        batch = self._collate(group)
        teacher = self.teacher_scores(group, batch)
        loss, per_token = self.compute_distill_loss(group, batch, teacher)
        mask = batch.loss_mask.to(per_token.device)
        tokens = float(mask.sum())
        self.engine.backward(loss * (tokens / normaliser))
        sums.loss += float(loss.detach()) * tokens / normaliser
        sums.tokens += tokens
        sums.kl += float((per_token * mask).sum())
        sums.teacher_logprob += float((teacher.token_logprobs.to(mask.device) * mask).sum())
        sums.model_tokens += batch.num_tokens
