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
(``distill.teacher_url``, :mod:`~agentgym.trainers.learners.teachers`). A step deals the rows over the
ranks, splits them into ``optim.mini_batches`` optimiser steps and micro-batches as GRPO does
(its helpers), and normalises each loss by the mini-batch's policy tokens, so the backends,
micro-batching and the number of ranks change nothing. The student's numbers come from the
engine (:meth:`~agentgym.trainers.engines.base.Engine.distributions` and ``logprobs``), so both
backends give the same update.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.batch import MicroBatch, TrainSequence, to_sequences
from agentgym.trainers.engines.distributed import Dist, all_reduce
from agentgym.trainers.learners.base import Learner, build_learner
from agentgym.trainers.learners.grpo import GRPOLearner, _split
from agentgym.trainers.learners.teachers import (
    SERVER_TOP_K,
    ServerTeacher,
    TeacherBatch,
    make_teacher,
)
from agentgym.trainers.losses.distillation import (
    forward_kl_full,
    forward_kl_top_k,
    reverse_kl_sampled,
    sequence_baseline,
)
from agentgym.trainers.losses.masked import masked_mean
from agentgym.trainers.losses.policy import policy_loss
from agentgym.trainers.settings import TrainConfig

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow

__all__ = ["DistillLearner", "make_distill"]

#: what playing reads: an offline run (a file of rows) leaves it alone
_PLAYING = frozenset({"env_id", "env_kwargs", "group_size", "max_turns", "turn_budget", "max_tokens", "temperature",
                      "top_p", "concurrency", "level_seeds", "max_staleness", "asynchronous", "base_url", "api_key",
                      "engine", "sync_weights"})


@dataclass
class _Sums:
    """Per-token sums over a step's micro-batches (weighted by their tokens), reduced over ranks at the end."""

    loss: float = 0.0
    tokens: float = 0.0
    kl: float = 0.0
    teacher_logprob: float = 0.0
    model_tokens: float = 0.0
    grad_norms: list[float] = field(default_factory=list)
    lr: float | None = None


class DistillLearner(GRPOLearner):
    """Distillation from a teacher (see the module's docstring); GRPO's batching helpers, its own loss."""

    sections = frozenset({"rollout", "server", "distill"})
    ignored = frozenset()

    def __init__(self, config: TrainConfig, engine: Engine) -> None:
        Learner.__init__(self, config, engine)  # not GRPO's: its top_p check names a setting distill lacks
        self.loss_config = config.loss_config()  # GRPO's defaults: distill reads no grpo section
        self._old: dict[int, torch.Tensor] = {}
        self.offline = config.rollout.trajectories is not None
        self.teacher = make_teacher(config.distill, engine)
        top_k = config.distill.teacher_top_k
        self.top_k = SERVER_TOP_K if top_k is None and isinstance(self.teacher, ServerTeacher) else top_k
        self.kl_name = "forward_kl" if self.offline else "reverse_kl"

    # -- the pieces of a step -----------------------------------------------------

    def teacher_scores(self, group: Sequence[TrainSequence], batch: MicroBatch) -> TeacherBatch:
        """What the teacher says about a micro-batch: its logprobs, and offline its top k or whole distribution."""
        return self.teacher.score(group, batch, full=self.offline, top_k=self.top_k if self.offline else None)

    def compute_distill_loss(self, group: Sequence[TrainSequence], batch: MicroBatch, teacher: TeacherBatch
                             ) -> tuple[torch.Tensor, torch.Tensor]:
        """The micro-batch's loss (a token mean over it) and the [S, T] per-token KL it reports."""
        mask = batch.loss_mask
        if self.offline:
            student = self.engine.distributions(batch)
            if teacher.full is not None:
                per_token = forward_kl_full(student, teacher.full)
            else:
                assert teacher.top_ids is not None and teacher.top_logprobs is not None
                per_token = forward_kl_top_k(student, teacher.top_ids, teacher.top_logprobs)
            return masked_mean(per_token, mask), per_token.detach()
        logprobs, _ = self.engine.logprobs(batch)
        if self.config.distill.distill_loss == "reverse_kl":
            return reverse_kl_sampled(logprobs, teacher.token_logprobs, mask)
        old = logprobs.detach() if self._single_update else self._old_logprobs(list(group), logprobs.detach())
        # The reverse KL at the step's start, negated, less its sequence's mean (reverse_kl's baseline too).
        estimate = old - teacher.token_logprobs
        advantages = -(estimate - sequence_baseline(estimate, mask)) * mask
        rollout = torch.where(batch.has_rollout_logprobs.unsqueeze(-1), batch.rollout_logprobs, old)
        output = policy_loss(logprobs, old, advantages, mask, self.loss_config, rollout_logprobs=rollout)
        return output.loss, logprobs.detach() - teacher.token_logprobs

    # -- a step ---------------------------------------------------------------------

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        start = time.perf_counter()
        sequences = to_sequences(rows, [0.0] * len(rows))
        local = self._my_share(sequences)
        teacher_seconds = self.teacher.prepare(local, top_k=self.top_k if self.offline else 0)
        if not self.offline and self.config.distill.distill_loss == "advantage":
            self._remember_old_logprobs(local)
        mine = {id(sequence) for sequence in local}
        sums = _Sums()
        generator = torch.Generator().manual_seed(self.config.run.seed * 7919 + self.engine.version)
        for _ in range(self.config.optim.epochs):
            order = torch.randperm(len(sequences), generator=generator).tolist()
            for mini in _split([sequences[i] for i in order], self.config.optim.mini_batches):
                self._distill_update([s for s in mini if id(s) in mine], sums)
        self.engine.version += 1
        metrics = self._distill_metrics(sums, sequences, time.perf_counter() - start)
        metrics["time/teacher"] = teacher_seconds
        return metrics

    def _distill_update(self, mini: list[TrainSequence], sums: _Sums) -> None:
        """One optimiser step on a mini-batch: token-mean loss over all of it (every rank, every pass)."""
        normaliser = self._normaliser(mini)
        for group in self._micro_batches(mini):
            batch = self._collate(group)
            teacher = self.teacher_scores(group, batch)
            loss, per_token = self.compute_distill_loss(group, batch, teacher)
            tokens = float(batch.loss_mask.sum())
            self.engine.backward(loss * (tokens / normaliser))
            sums.loss += float(loss.detach()) * tokens / normaliser
            sums.tokens += tokens
            sums.kl += float((per_token * batch.loss_mask).sum())
            sums.teacher_logprob += float((teacher.token_logprobs * batch.loss_mask).sum())
            sums.model_tokens += batch.num_tokens
        grad_norm, sums.lr = self.engine.step()
        sums.grad_norms.append(grad_norm)

    def _distill_metrics(self, sums: _Sums, sequences: list[TrainSequence], seconds: float) -> dict[str, float]:
        totals = torch.tensor([sums.loss, sums.tokens, sums.kl, sums.teacher_logprob, sums.model_tokens],
                              dtype=torch.float64)
        all_reduce(totals, self.engine.dist)
        loss, tokens, kl, teacher_logprob, model_tokens = (float(value) for value in totals)
        metrics = {"grad_norm": sum(sums.grad_norms) / max(len(sums.grad_norms), 1), "train_tokens": model_tokens,
                   "loss_tokens": tokens, "train_tokens_per_s": model_tokens / max(seconds, 1e-9),
                   "train_sequences": float(len(sequences))}
        if sums.lr is not None:
            metrics["lr"] = sums.lr
        if tokens > 0:
            metrics.update({"loss": loss / max(len(sums.grad_norms), 1), self.kl_name: kl / tokens,
                            "teacher_logprob": teacher_logprob / tokens})
        return metrics


def make_distill(config: TrainConfig, dist: Dist) -> Learner:
    """The registry's entry point: distillation on ``config.run.backend``'s engine."""
    distill = config.distill
    if distill.teacher is None and distill.teacher_url is None:
        raise ConfigError("--trainer distill needs a teacher: -s teacher=MODEL (loaded here) or "
                          "-s teacher_url=http://HOST:PORT/v1 (a server that returns prompt_logprobs).")
    offline = config.rollout.trajectories is not None
    unread = _PLAYING | {"distill_loss"} if offline else frozenset({"teacher_top_k"})
    for section in ("rollout", "server", "distill"):
        values, defaults = getattr(config, section), type(getattr(config, section))()
        for name in sorted(unread & set(type(values).model_fields)):
            if getattr(values, name) != getattr(defaults, name):
                what = ("an offline distillation (--trajectories) plays nothing and computes the forward KL"
                        if offline else "an on-policy distillation (--env) computes the reverse KL on sampled tokens")
                raise ConfigError(f"{section}.{name} is set, but {what}, which does not read it; remove it.")
    return build_learner(DistillLearner, config, dist)
