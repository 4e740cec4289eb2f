"""GRPO's learner: group advantages and the clipped policy loss, on either backend.

One :meth:`GRPOLearner.train_step` takes a step's rows and:

1. :meth:`compute_advantages`: group-relative, one per completion token of each row
   (the episode's, or each turn's with ``grpo.baseline=turn``; GiGPO's turn term when
   set), groups with nothing to teach left out;
2. turns the rows into sequences, deals them out over the ranks, shuffles and splits
   the whole step into ``optim.mini_batches`` (one optimiser step each) and a rank's
   share into micro-batches whose gradients accumulate;
3. :meth:`compute_loss`: :func:`~agentgym.trainers.losses.policy_loss`, importance-
   corrected against the server's logprobs, normalised over the whole mini-batch (every
   rank, every micro-batch), so accumulation and the number of ranks change nothing;
4. clips the gradient and steps the optimiser (the engine's).

Each numbered piece is a method a subclass can override alone. The engine computes
the numbers, so both backends give the same update on the same rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.batch import (
    MicroBatch,
    TrainSequence,
    collate,
    filler_sequence,
    plan_micro_batches,
    to_sequences,
)
from agentgym.trainers.engines.distributed import Dist, all_reduce
from agentgym.trainers.learners.base import Learner, build_learner
from agentgym.trainers.losses.advantages import token_advantages, turn_advantages, turn_credit_share
from agentgym.trainers.losses.policy import LOSS_METRICS, LossOutput, policy_loss
from agentgym.trainers.settings import TrainConfig

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow

__all__ = ["GRPOLearner", "StepStats", "make_grpo"]


@dataclass
class StepStats:
    """Sums over a step's micro-batches, turned into metrics at the end."""

    loss: float = 0.0
    tokens: float = 0.0
    weighted: dict[str, float] = field(default_factory=dict)
    model_tokens: int = 0
    grad_norms: list[float] = field(default_factory=list)
    lr: float | None = None

    def add(self, output: LossOutput, scaled_loss: float, entropy_sum: float, model_tokens: int) -> None:
        tokens = output.metrics["tokens"]
        self.loss += scaled_loss
        self.tokens += tokens
        self.model_tokens += model_tokens
        for name in LOSS_METRICS:
            self.weighted[name] = self.weighted.get(name, 0.0) + output.metrics[name] * tokens
        self.weighted["entropy"] = self.weighted.get("entropy", 0.0) + entropy_sum


class GRPOLearner(Learner):
    """GRPO on a step's episodes (see the module's docstring)."""

    sections = frozenset({"rollout", "server", "warmup", "grpo", "experimental"})
    ignored = frozenset({"group_by_length"})  # SFT's

    def __init__(self, config: TrainConfig, engine: Engine) -> None:
        super().__init__(config, engine)
        if config.rollout.top_p < 1.0 and config.grpo.correction != "none":
            raise ConfigError(
                f"rollout.top_p is {config.rollout.top_p}: the server's logprobs are then renormalised over "
                "the nucleus, which the trainer's full softmax does not match, so the importance weights would "
                "be biased. Set -s correction=none with top_p below 1, or sample with top_p 1.")
        self.loss_config = config.loss_config()
        self._old: dict[int, torch.Tensor] = {}

    @property
    def needs_reference(self) -> bool:  # type: ignore[override]
        return self.loss_config.kl_coef > 0

    # -- the pieces of a step -----------------------------------------------------

    def compute_advantages(self, rows: Sequence[TrajectoryRow], per_turn: dict[str, list[float]] | None = None
                           ) -> list[list[float] | None]:
        """One advantage per completion token of each row (None: leave the row out)."""
        return token_advantages(rows, **self.config.advantage_options(), per_turn=per_turn)

    def compute_loss(self, logprobs: torch.Tensor, old_logprobs: torch.Tensor, batch: MicroBatch,
                     ref_logprobs: torch.Tensor | None = None, entropy: torch.Tensor | None = None) -> LossOutput:
        """The policy loss of one micro-batch, aggregated within it (the caller rescales)."""
        rollout = None
        if self.loss_config.correction != "none":
            # Rows without the server's logprobs (model-free, retokenized) get weight 1.
            rollout = torch.where(batch.has_rollout_logprobs.unsqueeze(-1), batch.rollout_logprobs,
                                  old_logprobs.detach())
        return policy_loss(logprobs, old_logprobs, batch.advantages, batch.loss_mask, self.loss_config,
                           rollout_logprobs=rollout, ref_logprobs=ref_logprobs, entropy=entropy)

    # -- a step ---------------------------------------------------------------------

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        start = time.perf_counter()
        experimental = self.config.experimental
        gigpo = experimental.turn_advantage_weight > 0
        per_turn = turn_advantages(rows, self.config.grpo.advantage, experimental.turn_discount) if gigpo else {}
        advantages = self.compute_advantages(rows, per_turn)
        sequences = to_sequences(rows, advantages)
        stats = StepStats()
        local = self._my_share(sequences)
        self._remember_old_logprobs(local)
        mine = {id(sequence) for sequence in local}
        generator = torch.Generator().manual_seed(self.config.run.seed * 7919 + self.engine.version)
        for _ in range(self.config.optim.epochs):
            # Shuffle and split the whole step, then each rank trains on its part of each mini-batch:
            # every optimiser step sees the same sequences whatever the number of ranks.
            order = torch.randperm(len(sequences), generator=generator).tolist()
            for mini in _split([sequences[i] for i in order], self.config.optim.mini_batches):
                self._optimizer_step([s for s in mini if id(s) in mine], stats)
        self.engine.version += 1
        metrics = self._metrics(stats, rows, advantages, sequences, time.perf_counter() - start)
        if gigpo:
            metrics["turn_credit_share"] = turn_credit_share(per_turn)
        return metrics

    def _my_share(self, sequences: list[TrainSequence]) -> list[TrainSequence]:
        """This rank's share: dealt longest first, round robin, so tokens balance."""
        dist = self.engine.dist
        order = sorted(range(len(sequences)), key=lambda i: (-len(sequences[i].input_ids), i))
        return [sequences[i] for i in order[dist.rank::dist.world_size]]

    def _normaliser(self, mini: list[TrainSequence]) -> float:
        """What the loss of the whole mini-batch (all ranks) is divided by: its loss tokens
        (token_mean) or its sequences (the other aggregations)."""
        token_mean = self.loss_config.aggregation == "token_mean"
        local = sum(s.loss_tokens for s in mini) if token_mean else len(mini)
        return max(all_reduce(torch.tensor(float(local)), self.engine.dist).item(), 1.0)

    def _micro_batches(self, mini: list[TrainSequence]) -> list[list[TrainSequence]]:
        engine = self.engine
        plan = plan_micro_batches([len(s.input_ids) for s in mini], pack=engine.packs,
                                  micro_batch_tokens=self.config.native.micro_batch_tokens,
                                  micro_batch_size=self.config.optim.micro_batch_size)
        groups = [[mini[i] for i in indices] for indices in plan]
        # FSDP: every rank must run as many forward/backward passes as the busiest one.
        count = int(all_reduce(torch.tensor(len(groups)), engine.dist, op="max").item())
        return groups + [[filler_sequence(engine.pad_id)]] * (count - len(groups))

    def _collate(self, group: list[TrainSequence]) -> MicroBatch:
        return collate(group, pack=self.engine.packs, pad_id=self.engine.pad_id).to(self.engine.dist.device)

    def _optimizer_step(self, mini: list[TrainSequence], stats: StepStats) -> None:
        normaliser = self._normaliser(mini)
        for group in self._micro_batches(mini):
            _, loss = self._policy_pass(group, normaliser, stats)
            self.engine.backward(loss)
        grad_norm, stats.lr = self.engine.step()
        stats.grad_norms.append(grad_norm)

    def _policy_pass(self, group: list[TrainSequence], normaliser: float, stats: StepStats
                     ) -> tuple[MicroBatch, torch.Tensor]:
        """One micro-batch's policy loss, scaled to its share of the mini-batch (its metrics into
        ``stats``); the batch, for a subclass's own terms on it."""
        batch = self._collate(group)
        logprobs, entropy = self.engine.logprobs(batch, with_entropy=True)
        old = logprobs.detach() if self._single_update else self._old_logprobs(group, logprobs.detach())
        ref = self.engine.logprobs(batch, reference=True)[0] if self.loss_config.kl_coef > 0 else None
        output = self.compute_loss(logprobs, old, batch, ref, entropy)
        if self.loss_config.aggregation == "token_mean":
            weight = float(batch.loss_mask.sum())
        else:
            weight = float(sum(s.loss_tokens > 0 for s in group))
        loss = output.loss * (weight / normaliser)
        if output.metrics["tokens"] > 0:
            entropy_sum = float((entropy * batch.loss_mask).sum()) if entropy is not None else 0.0
            stats.add(output, float(loss.detach()), entropy_sum, batch.num_tokens)
        return batch, loss

    @property
    def _single_update(self) -> bool:
        """One update per rollout: pi_old is the current policy, so no extra forward pass."""
        return self.config.optim.updates_per_step == 1

    def _remember_old_logprobs(self, local: list[TrainSequence]) -> None:
        """pi_old of every local sequence, with the weights of the step's start (several updates a step:
        later ones compare against these, and the clip starts to bite)."""
        self._old.clear()
        if self._single_update:
            return
        with torch.no_grad():
            for group in self._micro_batches(local):
                logprobs, _ = self.engine.logprobs(self._collate(group))
                for s, sequence in enumerate(group):
                    self._old[id(sequence)] = logprobs[s, :sequence.completion_length].detach()

    def _old_logprobs(self, group: list[TrainSequence], like: torch.Tensor) -> torch.Tensor:
        old = torch.zeros_like(like)
        for s, sequence in enumerate(group):
            remembered = self._old.get(id(sequence))
            if remembered is not None:
                old[s, :remembered.shape[0]] = remembered
        return old

    def _metrics(self, stats: StepStats, rows: Sequence[TrajectoryRow], advantages: Sequence[object],
                 sequences: list[TrainSequence], seconds: float) -> dict[str, float]:
        dist = self.engine.dist
        totals = torch.tensor([stats.tokens, stats.model_tokens, stats.loss,
                               *(stats.weighted.get(k, 0.0) for k in _WEIGHTED)], dtype=torch.float64)
        all_reduce(totals, dist)
        tokens, model_tokens, loss = float(totals[0]), float(totals[1]), float(totals[2])
        metrics = {
            "grad_norm": sum(stats.grad_norms) / max(len(stats.grad_norms), 1),
            "train_tokens": model_tokens,
            "loss_tokens": tokens,
            "train_tokens_per_s": model_tokens / max(seconds, 1e-9),
            "train_sequences": float(len(sequences)),
            "skipped_rows": float(len(rows) - len(sequences)),
            "filtered_groups_rows": float(sum(a is None for a in advantages)),
        }
        if stats.lr is not None:
            metrics["lr"] = stats.lr  # the rate the step's last update used
        if tokens > 0:  # a step whose groups were all filtered computed no loss: nothing to report
            metrics["loss"] = loss / max(len(stats.grad_norms), 1)
            metrics.update({name: float(totals[3 + i]) / tokens for i, name in enumerate(_WEIGHTED)
                            if name not in self._not_computed})
        return metrics

    @property
    def _not_computed(self) -> set[str]:
        """Loss metrics that are constants under these settings (no KL term, no correction)."""
        off = set()
        if self.loss_config.kl_coef == 0:
            off.add("kl")
        if self.loss_config.correction == "none":
            off.add("is_weight_mean")
        if self.loss_config.top_entropy_quantile >= 1.0:
            off.add("policy_token_share")
        if self._single_update:  # the ratio to pi_old is 1 by construction: nothing is ever clipped
            off.update({"clip_fraction", "ratio_mean"})
        return off


_WEIGHTED = (*LOSS_METRICS, "entropy")


def _split(items: list[TrainSequence], parts: int) -> list[list[TrainSequence]]:
    size = math.ceil(len(items) / parts) if items else 0
    return [items[i * size:(i + 1) * size] for i in range(parts)] if size else [[] for _ in range(parts)]


def make_grpo(config: TrainConfig, dist: Dist) -> Learner:
    """The registry's entry point: GRPO on ``config.run.backend``'s engine."""
    return build_learner(GRPOLearner, config, dist)
