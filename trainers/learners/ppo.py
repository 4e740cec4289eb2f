"""PPO's learner (``--trainer ppo``): verl-style PPO with a critic, on either backend.

One :meth:`PPOLearner.train_step`:

1. the value model (:mod:`~agentgym.trainers.engines.critic`: a head on the policy, or a separate
   critic) scores every completion token of the step's rows, with the step's starting weights;
2. :meth:`compute_advantages`: GAE per episode (:mod:`~agentgym.trainers.losses.value`), over the
   sampled tokens (the episode's reward at its last one; env and tool tokens are no steps) or
   over the turns (``ppo.gae_level=turn``: a turn's value is read where its first token is
   predicted, its reward is the env's turn reward; every token of the turn gets its advantage),
   whitened over the step's sampled tokens;
3. GRPO's batching (mini-batches, micro-batches, ranks) and policy loss
   (:func:`~agentgym.trainers.losses.policy_loss`, importance-corrected against the
   server's logprobs) with these advantages, plus ``value_loss_coef`` times verl's clipped value
   loss, each normalised over the whole mini-batch; the policy's and the value model's
   optimisers step together.

The value model checkpoints, resumes and exports with the policy (``OUT/final/critic.pt``).
A step past an episode's end is terminal (value 0), truncated episodes included, as verl treats
a response's end.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.batch import TrainSequence, to_sequences
from agentgym.trainers.engines.critic import CRITIC_FILE
from agentgym.trainers.engines.distributed import Dist, all_reduce
from agentgym.trainers.learners.base import Learner, build_learner
from agentgym.trainers.learners.grpo import GRPOLearner, StepStats, _split
from agentgym.trainers.losses.masked import masked_mean
from agentgym.trainers.losses.value import (
    explained_variance,
    gae,
    masked_whiten,
    token_gae,
    value_loss,
)
from agentgym.trainers.settings import TrainConfig

from agentgym.rollout.rows import TrajectoryRow

__all__ = ["PPOLearner", "Targets", "make_ppo", "token_level_targets", "turn_level_targets"]


@dataclass
class Targets:
    """One sequence's PPO numbers, per completion token."""

    advantages: list[float]
    returns: list[float]
    old_values: list[float]
    value_mask: list[int]
    """1 where the value is trained: the sampled tokens, or each turn's first token (turn level)"""


@dataclass
class _ValueSums:
    loss: float = 0.0
    clipped: float = 0.0
    tokens: float = 0.0
    critic_norms: list[float] = field(default_factory=list)


class PPOLearner(GRPOLearner):
    """PPO with a critic (see the module's docstring)."""

    sections = frozenset({"rollout", "server", "warmup", "grpo", "ppo"})
    # grpo's group advantage and its filter are not read: the critic is the baseline
    ignored = frozenset({"advantage", "baseline", "filter_zero_variance", "group_by_length"})

    def __init__(self, config: TrainConfig, engine: Engine) -> None:
        super().__init__(config, engine)
        engine.attach_critic(config.ppo.value_model == "critic", config.ppo.critic_lr)
        self._targets: dict[int, Targets] = {}

    # -- the pieces of a step -----------------------------------------------------

    def old_values(self, sequences: list[TrainSequence]) -> list[list[float]]:
        """The value model's value at every completion token of each sequence, before this step's updates.
        Every rank scores every sequence (the same passes on each, as FSDP needs)."""
        values: dict[int, list[float]] = {}
        with torch.no_grad():
            for group in self._micro_batches(sequences):
                scored = self.engine.values(self._collate(group)).float().cpu()
                for s, sequence in enumerate(group):
                    values[id(sequence)] = scored[s, :sequence.completion_length].tolist()
        return [values[id(sequence)] for sequence in sequences]

    def compute_targets(self, rows: Sequence[TrajectoryRow], values: Sequence[list[float]]) -> list[Targets]:
        """GAE advantages and returns of each row's completion tokens, per episode (its rows in order)."""
        ppo = self.config.ppo
        episodes: dict[str, list[int]] = defaultdict(list)
        for index, row in enumerate(rows):
            episodes[row.episode_id].append(index)
        targets: list[Targets | None] = [None] * len(rows)
        for members in episodes.values():
            members.sort(key=lambda i: rows[i].row_index)
            level = turn_level_targets if ppo.gae_level == "turn" else token_level_targets
            for index, target in zip(members, level([rows[i] for i in members], [values[i] for i in members],
                                                    ppo.gamma, ppo.gae_lambda)):
                targets[index] = target
        return [t for t in targets if t is not None]

    # -- a step ---------------------------------------------------------------------

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        start = time.perf_counter()
        rows = [row for row in rows if row.prompt_ids and any(row.completion_mask)]
        plain = to_sequences(rows, [0.0] * len(rows))
        targets = self.compute_targets(rows, self.old_values(plain))
        advantages = self._whitened([t.advantages for t in targets], [s.loss_mask for s in plain])
        sequences = [replace(s, advantages=a) for s, a in zip(plain, advantages)]
        self._targets = {id(s): t for s, t in zip(sequences, targets)}
        stats, value_sums = StepStats(), _ValueSums()
        local = self._my_share(sequences)
        self._remember_old_logprobs(local)
        mine = {id(sequence) for sequence in local}
        generator = torch.Generator().manual_seed(self.config.run.seed * 7919 + self.engine.version)
        for _ in range(self.config.optim.epochs):
            order = torch.randperm(len(sequences), generator=generator).tolist()
            for mini in _split([sequences[i] for i in order], self.config.optim.mini_batches):
                self._ppo_update([s for s in mini if id(s) in mine], stats, value_sums)
        self.engine.version += 1
        metrics = self._metrics(stats, rows, [0.0] * len(rows), sequences, time.perf_counter() - start)
        metrics.pop("filtered_groups_rows", None)
        if "loss" in metrics:
            metrics["policy_loss"] = metrics.pop("loss")
        metrics.update(self._value_metrics(targets, sequences, value_sums))
        return metrics

    def _whitened(self, advantages: list[list[float]], masks: list[list[int]]) -> list[list[float]]:
        if not self.config.ppo.whiten_advantages or not advantages:
            return advantages
        flat = torch.tensor([a for row in advantages for a in row], dtype=torch.float64)
        mask = torch.tensor([m for row in masks for m in row], dtype=torch.float64)
        whitened = (masked_whiten(flat, mask) * mask).tolist()
        out, at = [], 0
        for row in advantages:
            out.append(whitened[at:at + len(row)])
            at += len(row)
        return out

    def _padded(self, group: list[TrainSequence], like: torch.Tensor, name: str) -> torch.Tensor:
        out = torch.zeros_like(like)
        for s, sequence in enumerate(group):
            values = getattr(self._targets[id(sequence)], name) if id(sequence) in self._targets else []
            out[s, :len(values)] = torch.tensor(values, dtype=like.dtype)
        return out

    def _ppo_update(self, mini: list[TrainSequence], stats: StepStats, value_sums: _ValueSums) -> None:
        normaliser = self._normaliser(mini)
        value_tokens = float(sum(sum(self._targets[id(s)].value_mask) for s in mini))
        value_normaliser = max(all_reduce(torch.tensor(value_tokens), self.engine.dist).item(), 1.0)
        coef = self.config.ppo.value_loss_coef
        for group in self._micro_batches(mini):
            batch, policy_loss = self._policy_pass(group, normaliser, stats)
            values = self.engine.values(batch)
            value_mask = self._padded(group, values.detach(), "value_mask")
            critic = value_loss(values, self._padded(group, values.detach(), "old_values"),
                                self._padded(group, values.detach(), "returns"), value_mask,
                                self.config.ppo.value_clip)
            share = float(value_mask.sum()) / value_normaliser
            self.engine.backward(policy_loss + coef * critic.loss * share)
            value_sums.loss += float(critic.loss.detach()) * share
            value_sums.clipped += critic.clip_fraction * float(value_mask.sum())
            value_sums.tokens += float(value_mask.sum())
        grad_norm, stats.lr = self.engine.step()
        stats.grad_norms.append(grad_norm)
        value_sums.critic_norms.append(self.engine.critic_step())

    def _value_metrics(self, targets: list[Targets], sequences: list[TrainSequence], sums: _ValueSums
                       ) -> dict[str, float]:
        totals = torch.tensor([sums.loss, sums.clipped, sums.tokens], dtype=torch.float64)
        all_reduce(totals, self.engine.dist)
        updates = max(len(sums.critic_norms), 1)
        returns = torch.tensor([r for t in targets for r in t.returns], dtype=torch.float64)
        values = torch.tensor([v for t in targets for v in t.old_values], dtype=torch.float64)
        raw = torch.tensor([a for t in targets for a in t.advantages], dtype=torch.float64)
        value_mask = torch.tensor([m for t in targets for m in t.value_mask], dtype=torch.float64)
        token_mask = torch.tensor([m for s in sequences for m in s.loss_mask], dtype=torch.float64)
        if not len(returns):
            return {}
        return {"value_loss": float(totals[0]) / updates,
                "value_clip_fraction": float(totals[1]) / max(float(totals[2]), 1.0),
                "explained_variance": explained_variance(returns, values, value_mask),
                "value_mean": float(masked_mean(values, value_mask)),
                "return_mean": float(masked_mean(returns, value_mask)),
                "advantage_mean": float(masked_mean(raw, token_mask)),
                "critic_grad_norm": sum(sums.critic_norms) / updates}

    # -- the critic goes wherever the policy goes -------------------------------------------

    def state(self) -> dict[str, Any]:
        return {**self.engine.state(), "critic": self.engine.critic_state()}

    def load_state(self, state: dict[str, Any]) -> None:
        self.engine.load_state(state)
        self.engine.load_critic_state(state["critic"])

    def export(self, folder: str | Path) -> Path:
        """The policy as a transformers folder, and ``critic.pt`` in it: the value head (and a separate
        critic's weights), ``{"separate": bool, "state_dict": ...}``."""
        folder = self.engine.export(folder)
        state = self.engine.critic_state()["model"]
        if self.engine.dist.is_main:
            torch.save({"separate": self.engine.critic.body is not None, "state_dict": state}, folder / CRITIC_FILE)
        return folder


def token_level_targets(rows: Sequence[TrajectoryRow], values: Sequence[list[float]], gamma: float, lam: float
                        ) -> list[Targets]:
    """An episode's rows (in order): :func:`~agentgym.trainers.losses.value.token_gae` over all its
    completion tokens, split back into its rows."""
    all_values = [v for row_values in values for v in row_values]
    mask = [int(m) for row in rows for m in row.completion_mask]
    advantages, returns = token_gae(all_values, mask, rows[0].reward, gamma, lam)
    out, at = [], 0
    for row, row_values in zip(rows, values):
        end = at + len(row_values)
        out.append(Targets(advantages[at:end], returns[at:end], list(row_values), mask[at:end]))
        at = end
    return out


def turn_level_targets(rows: Sequence[TrajectoryRow], values: Sequence[list[float]], gamma: float, lam: float
                       ) -> list[Targets]:
    """An episode's rows (in order): GAE over its turns. A turn's value is read at its first token's
    position (the end of the observation it acts on); its reward is the env's turn reward, or, when the
    rows' turns do not match their rewards (an error after sampling), the episode's reward at the last turn."""
    spans = [(r, span) for r, row in enumerate(rows) for span in row.turns if span.end > span.start]
    turn_values = [values[r][span.start] for r, span in spans]
    first = rows[0]
    if [span.turn for _, span in spans] == list(range(len(first.turn_rewards))):
        rewards = list(first.turn_rewards)
    else:
        rewards = [0.0] * len(spans)
        if rewards:
            rewards[-1] = first.reward
    advantages, returns = gae(rewards, turn_values, gamma, lam)
    out = [Targets([0.0] * len(v), [0.0] * len(v), list(v), [0] * len(v)) for v in values]
    for (r, span), advantage, target in zip(spans, advantages, returns):
        row_targets = out[r]
        row_targets.advantages[span.start:span.end] = [advantage] * (span.end - span.start)
        row_targets.returns[span.start] = target
        row_targets.value_mask[span.start] = 1
    return out


def make_ppo(config: TrainConfig, dist: Dist) -> Learner:
    """The registry's entry point: PPO on ``config.run.backend``'s engine."""
    return build_learner(PPOLearner, config, dist)
