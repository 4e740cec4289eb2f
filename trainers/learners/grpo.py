"""GRPO's learner: group advantages and the clipped policy loss, on either backend.

One :meth:`GRPOLearner.train_step` takes a step's rows and:

1. :meth:`compute_advantages`: group-relative, one per completion token of each row
   (the episode's, or each turn's with ``grpo.baseline=turn``), groups with nothing to teach
   left out; the rewards first shaped (:meth:`shaped_rewards`: DAPO's overlong penalty), and with
   ``loss.kl_penalty=k1_reward`` each episode's reward loses ``kl_coef`` times its summed
   log-ratio to the reference (``grpo.advantage=reinforce_pp``: token by token, REINFORCE++'s
   returns whitened over the step); the experimental options
   (:mod:`agentgym.trainers.research`) last;
2. turns the rows into sequences and runs the shared
   :class:`~agentgym.trainers.learners.minibatch.MiniBatchLoop` (epochs, mini-batches, ranks,
   micro-batches) over them;
3. :meth:`compute_loss` on each pass: :func:`~agentgym.trainers.losses.policy.policy_loss`,
   importance-corrected against the server's logprobs, normalised over the whole mini-batch
   (every rank, every micro-batch), so accumulation and the number of ranks change nothing.

With ``grpo.dynamic_sampling_rounds`` (DAPO's dynamic sampling) the loop plays more groups for a
step until it has ``groups_per_step`` of them with signal (:attr:`refill_rounds`, :meth:`has_signal`).

Each numbered piece is a method a subclass can override alone (PPO overrides the first and adds
its value loss to :meth:`backward_pass`). The engine computes the numbers, so both backends give
the same update on the same rows.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.batch import MicroBatch, TrainSequence, collate, filler_sequence, to_sequences
from agentgym.trainers.engines.distributed import all_reduce
from agentgym.trainers.learners.base import Learner
from agentgym.trainers.learners.minibatch import MiniBatchLoop, UpdateStats, padded, remembered_logprobs
from agentgym.trainers.losses.advantages import reinforce_pp_advantages, token_advantages
from agentgym.trainers.losses.kl import kl_k1
from agentgym.trainers.losses.policy import LOSS_METRICS, LossOutput, policy_loss
from agentgym.trainers.losses.shaping import episode_sampled_tokens, overlong_penalty
from agentgym.trainers.research.options import research_advantages

__all__ = ["GRPOLearner", "StepStats"]

_WEIGHTED = (*LOSS_METRICS, "entropy")


@dataclass
class StepStats:
    """Sums over a step's passes, turned into metrics at the end."""

    loss: float = 0.0
    tokens: float = 0.0
    weighted: dict[str, float] = field(default_factory=dict)
    model_tokens: int = 0

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

    sections = frozenset({"rollout", "server", "warmup", "loss", "grpo", "experimental"})
    ignored = frozenset({"group_by_length"})  # SFT's

    def __init__(self, config: Any, engine: Engine) -> None:
        super().__init__(config, engine)
        self.loss_settings = config.loss
        token_mean = self.loss_settings.aggregation == "token_mean"
        self.loop: MiniBatchLoop[TrainSequence] = MiniBatchLoop(
            engine, config, size=lambda s: len(s.input_ids), filler=lambda: filler_sequence(engine.pad_id),
            weight=(lambda s: float(s.loss_tokens)) if token_mean else (lambda s: float(s.loss_tokens > 0)))
        self._old: dict[int, torch.Tensor] = {}

    @classmethod
    def check(cls, config: Any) -> None:
        if "grpo" not in cls.sections:  # a subclass with advantages of its own (PPO)
            return
        grpo, loss = config.grpo, config.loss
        if grpo.advantage != "reinforce_pp":
            return
        if loss.kl_coef > 0 and loss.kl_penalty != "k1_reward":
            raise ConfigError("grpo.advantage=reinforce_pp puts the KL in the reward, token by token (REINFORCE++): "
                              f"with kl_coef > 0 set -s kl_penalty=k1_reward (it is {loss.kl_penalty}).")
        if grpo.baseline != "episode" or config.experimental.turn_advantage_weight > 0:
            raise ConfigError("grpo.advantage=reinforce_pp has no group baseline: it takes neither "
                              "grpo.baseline=turn nor experimental.turn_advantage_weight; remove them.")

    @classmethod
    def unread(cls, config: Any) -> frozenset[str]:
        offline = config.rollout.trajectories is not None
        return cls.ignored | (frozenset({"dynamic_sampling_rounds"}) if offline else frozenset())

    @property
    def needs_reference(self) -> bool:  # type: ignore[override]
        return self.loss_settings.kl_coef > 0

    @property
    def kl_in_reward(self) -> bool:
        return self.loss_settings.kl_coef > 0 and self.loss_settings.kl_penalty == "k1_reward"

    @property
    def refill_rounds(self) -> int:  # type: ignore[override]
        """DAPO's dynamic sampling: the extra rounds of groups a step may play (0: none)."""
        return self.config.grpo.dynamic_sampling_rounds if "grpo" in self.sections else 0

    def has_signal(self, group: Sequence[TrajectoryRow]) -> bool:
        """Whether a group's episodes' rewards (overlong-shaped, before any KL) differ: what
        ``filter_zero_variance`` keeps (with ``reinforce_pp``, a lone episode too: it has no group)."""
        rewards = {row.episode_id: row.reward for row in self.shaped_rewards(group)[0]}
        if len(rewards) == 1:
            return self.config.grpo.advantage == "reinforce_pp"
        return max(rewards.values()) - min(rewards.values()) > 1e-6

    # -- the pieces of a step -----------------------------------------------------

    def compute_advantages(self, rows: Sequence[TrajectoryRow]) -> tuple[list[list[float] | None], dict[str, float]]:
        """One advantage per completion token of each row (None: leave the row out), and metrics."""
        grpo = self.config.grpo
        scored, metrics = self.shaped_rewards(rows)
        kl = self.token_kl(scored) if self.kl_in_reward else None
        if grpo.advantage == "reinforce_pp":
            if kl is not None:
                metrics["kl_penalty"] = _mean(list(_episode_sums(scored, kl).values()))
            advantages = reinforce_pp_advantages(scored, kl, self.loss_settings.kl_coef,
                                                 filter_zero_variance=grpo.filter_zero_variance)
        else:
            if kl is not None:
                scored, kl_metrics = self.with_episode_kl(scored, kl)
                metrics.update(kl_metrics)
            advantages = token_advantages(scored, grpo.advantage, filter_zero_variance=grpo.filter_zero_variance,
                                          baseline=grpo.baseline)
        advantages, extra = research_advantages(scored, advantages, self.config.experimental, grpo.advantage)
        return advantages, {**metrics, **extra}

    def shaped_rewards(self, rows: Sequence[TrajectoryRow]) -> tuple[list[TrajectoryRow], dict[str, float]]:
        """The rows with their episodes' rewards shaped (DAPO's overlong penalty, ``loss.overlong_*``), and
        metrics: ``overlong_penalty`` (the mean reward an episode lost) and ``overlong_episodes`` (the
        share that lost some)."""
        settings = self.loss_settings
        if not settings.overlong_max_tokens:
            return list(rows), {}
        penalty = {episode: overlong_penalty(length, settings.overlong_max_tokens, settings.overlong_cache_tokens,
                                             settings.overlong_penalty)
                   for episode, length in episode_sampled_tokens(rows).items()}
        shaped = [row.model_copy(update={"reward": row.reward + penalty[row.episode_id]}) for row in rows]
        values = list(penalty.values())
        return shaped, {"overlong_penalty": -_mean(values), "overlong_episodes": _mean([v < 0 for v in values])}

    def with_episode_kl(self, rows: Sequence[TrajectoryRow], kl: Sequence[list[float]]
                        ) -> tuple[list[TrajectoryRow], dict[str, float]]:
        """PPO's KL-in-reward: each episode's reward less ``kl_coef`` times its summed k1 (``kl``: per row,
        per completion token), and ``kl_penalty``, the mean summed k1 of an episode."""
        sums = _episode_sums(rows, kl)
        coef = self.loss_settings.kl_coef
        shaped = [row.model_copy(update={"reward": row.reward - coef * sums[row.episode_id]}) for row in rows]
        return shaped, {"kl_penalty": _mean(list(sums.values()))}

    def token_kl(self, rows: Sequence[TrajectoryRow]) -> list[list[float]]:
        """Per row, k1 = log pi - log pi_ref of each completion token (0 where the policy did not sample),
        with the weights of the step's start. Every rank scores every row (the same passes on each, as
        FSDP needs)."""
        owner: dict[int, int] = {}
        sequences: list[TrainSequence] = []
        for index, row in enumerate(rows):
            for sequence in to_sequences([row], [0.0]):
                owner[id(sequence)] = index
                sequences.append(sequence)
        values = [[0.0] * len(row.completion_mask) for row in rows]
        with torch.no_grad():
            for group in self.loop.micro_batches(sequences):
                batch = self.collate(group)
                logprobs, _ = self.engine.logprobs(batch)
                reference, _ = self.engine.logprobs(batch, reference=True)
                per_token = (kl_k1(logprobs, reference) * batch.loss_mask.to(logprobs.device)).float().cpu()
                for s, sequence in enumerate(group):
                    if id(sequence) in owner:
                        values[owner[id(sequence)]] = per_token[s, :sequence.completion_length].tolist()
        return values

    def compute_loss(self, logprobs: torch.Tensor, old_logprobs: torch.Tensor, batch: MicroBatch,
                     ref_logprobs: torch.Tensor | None = None, entropy: torch.Tensor | None = None) -> LossOutput:
        """The policy loss of one micro-batch, aggregated within it (the caller rescales)."""
        rollout = None
        if self.loss_settings.correction != "none":
            # Rows without the server's logprobs (model-free, retokenized) get weight 1.
            device = logprobs.device
            rollout = torch.where(batch.has_rollout_logprobs.to(device).unsqueeze(-1),
                                  batch.rollout_logprobs.to(device), old_logprobs.detach())
        return policy_loss(logprobs, old_logprobs, batch.advantages.to(logprobs.device),
                           batch.loss_mask.to(logprobs.device), self.loss_settings, rollout_logprobs=rollout,
                           ref_logprobs=ref_logprobs, entropy=entropy)

    # -- a step ---------------------------------------------------------------------

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        start = time.perf_counter()
        advantages, extra = self.compute_advantages(rows)
        sequences = to_sequences(rows, advantages)
        stats = StepStats()
        self.remember_old_logprobs(self.loop.local_share(sequences))
        updates = self.loop.run(sequences, lambda group, normaliser: self.backward_pass(group, normaliser, stats),
                                after_update=self.after_update)
        metrics = self.step_metrics(stats, updates, rows, sequences, time.perf_counter() - start)
        metrics["filtered_groups_rows"] = float(sum(a is None for a in advantages))
        return {**metrics, **extra}

    def idle_reason(self, metrics: dict[str, float]) -> str:
        if metrics.get("filtered_groups_rows"):
            return (f"every group was left out ({metrics['filtered_groups_rows']:.0f} rows): its episodes' rewards "
                    "were all equal, so no advantage was other than 0")
        return super().idle_reason(metrics)

    def backward_pass(self, group: list[TrainSequence], normaliser: float, stats: StepStats) -> None:
        """One micro-batch's forward and backward pass (a subclass adds its own terms)."""
        _, loss = self.policy_pass(group, normaliser, stats)
        self.engine.backward(loss)

    def after_update(self) -> None:
        """Called after each optimiser step of the policy (PPO steps its critic here)."""

    def collate(self, group: list[TrainSequence]) -> MicroBatch:
        return collate(group, pack=self.engine.packs, pad_id=self.engine.pad_id)

    def policy_pass(self, group: list[TrainSequence], normaliser: float, stats: StepStats
                    ) -> tuple[MicroBatch, torch.Tensor]:
        """One micro-batch's policy loss, scaled to its share of the mini-batch (its metrics into
        ``stats``); the batch, for a subclass's own terms on it."""
        batch = self.collate(group)
        logprobs, entropy = self.policy_logprobs(batch)
        old = logprobs.detach() if self.single_update else padded(group, self._old, logprobs.detach())
        settings = self.loss_settings
        wants_ref = settings.kl_coef > 0 and settings.kl_penalty != "k1_reward"
        ref = self.engine.logprobs(batch, reference=True)[0] if wants_ref else None
        output = self.compute_loss(logprobs, old, batch, ref, entropy)
        mask = batch.loss_mask.to(logprobs.device)
        weight = (float(mask.sum()) if settings.aggregation == "token_mean"
                  else float(sum(s.loss_tokens > 0 for s in group)))
        loss = output.loss * (weight / normaliser)
        if output.metrics["tokens"] > 0:
            entropy_sum = float((entropy * mask).sum()) if entropy is not None else 0.0
            stats.add(output, float(loss.detach()), entropy_sum, batch.num_tokens)
        return batch, loss

    def policy_logprobs(self, batch: MicroBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The policy's logprobs and entropies of the batch, with gradient (a subclass may read more of
        the same forward pass)."""
        return self.engine.logprobs(batch, with_entropy=True)

    @property
    def single_update(self) -> bool:
        """One update per rollout: pi_old is the current policy, so no extra forward pass."""
        return self.config.optim.updates_per_step == 1

    def remember_old_logprobs(self, local: list[TrainSequence]) -> None:
        """pi_old of every local sequence, with the weights of the step's start (several updates a step)."""
        self._old = {} if self.single_update else remembered_logprobs(self.engine, self.loop, local, self.collate)

    def step_metrics(self, stats: StepStats, updates: UpdateStats, rows: Sequence[TrajectoryRow],
                     sequences: list[TrainSequence], seconds: float) -> dict[str, float]:
        totals = torch.tensor([stats.tokens, stats.model_tokens, stats.loss,
                               *(stats.weighted.get(k, 0.0) for k in _WEIGHTED)], dtype=torch.float64)
        all_reduce(totals, self.engine.dist)
        tokens, model_tokens, loss = float(totals[0]), float(totals[1]), float(totals[2])
        metrics = {
            "updates": float(updates.updates),
            "grad_norm": updates.grad_norm,
            "train_tokens": model_tokens,
            "loss_tokens": tokens,
            "train_tokens_per_s": model_tokens / max(seconds, 1e-9),
            "train_sequences": float(len(sequences)),
            "skipped_rows": float(len(rows) - len(sequences)),
        }
        if updates.lr is not None:
            metrics["lr"] = updates.lr  # the rate the step's updates used
        if tokens > 0:  # a step whose groups were all filtered computed no loss: nothing to report
            metrics["loss"] = loss / max(updates.updates, 1)
            metrics.update({name: float(totals[3 + i]) / tokens for i, name in enumerate(_WEIGHTED)
                            if name not in self._not_computed})
        return metrics

    @property
    def _not_computed(self) -> set[str]:
        """Loss metrics that are constants under these settings (no KL term, no correction)."""
        off = set()
        settings = self.loss_settings
        if settings.kl_coef == 0 or settings.kl_penalty == "k1_reward":
            off.add("kl")
        if settings.correction == "none":
            off.add("is_weight_mean")
        if settings.top_entropy_quantile >= 1.0:
            off.add("policy_token_share")
        if self.single_update:  # the ratio to pi_old is 1 by construction: nothing is ever clipped
            off.update({"clip_fraction", "ratio_mean"})
        return off


def _mean(values: Sequence[float]) -> float:
    return float(sum(values)) / max(len(values), 1)


def _episode_sums(rows: Sequence[TrajectoryRow], kl: Sequence[list[float]]) -> dict[str, float]:
    """Each episode's summed per-token values over its rows."""
    sums: dict[str, float] = {}
    for row, values in zip(rows, kl):
        sums[row.episode_id] = sums.get(row.episode_id, 0.0) + sum(values)
    return sums
