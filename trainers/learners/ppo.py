"""PPO's learner (``--trainer ppo``): verl-style PPO with a critic, on either backend.

One :meth:`PPOLearner.train_step`:

1. the value model (:class:`~agentgym.trainers.engines.critic.Critic`: a head on the policy, or a
   separate critic) scores every completion token of the step's rows, and the state after each
   row's last token, with the step's starting weights;
2. :meth:`compute_targets`: GAE per episode (:mod:`~agentgym.trainers.losses.value`), over the
   sampled tokens (the episode's reward at its last one; env and tool tokens are no steps) or
   over the turns (``ppo.gae_level=turn``: a turn's value is read where its first token is
   predicted, its reward is the env's turn reward; every token of the turn gets its advantage),
   whitened over the step's sampled tokens. An episode that ended is terminal (the value after
   it is 0); one that was cut (``truncated``: a turn limit, a turn budget, the context limit)
   bootstraps from the value after its last token, as Gymnasium's truncation means;
3. GRPO's mini-batch loop and policy loss with these advantages, plus ``value_loss_coef`` times
   verl's clipped value loss, each normalised over the whole mini-batch; after each policy update
   the critic's optimiser steps too. A head on the policy reads the hidden states of the policy
   pass itself: one forward of the trunk a micro-batch, not one for each.

Each episode's reward is shaped first as GRPO's (DAPO's overlong penalty, ``loss.overlong_*``), and
with ``loss.kl_penalty=k1_reward`` loses ``kl_coef`` times its summed log-ratio to the reference
before GAE (at its last token), as GRPO's does. ``loss.policy_loss`` picks the surrogate (clip,
gspo, cispo) as for GRPO.
The value model checkpoints, resumes and exports with the policy (``OUT/final/critic.pt``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.engines.base import Engine
from agentgym.trainers.engines.batch import MicroBatch, TrainSequence, to_sequences
from agentgym.trainers.engines.critic import Critic
from agentgym.trainers.engines.distributed import all_reduce
from agentgym.trainers.learners.grpo import GRPOLearner, StepStats
from agentgym.trainers.losses.masked import masked_mean
from agentgym.trainers.losses.value import explained_variance, gae, masked_whiten, token_gae, value_loss

__all__ = ["PPOLearner", "Targets", "bootstrap_value", "token_level_targets", "turn_level_targets"]


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
    critic_norms: list[float] | None = None


class PPOLearner(GRPOLearner):
    """PPO with a critic (see the module's docstring)."""

    sections = frozenset({"rollout", "server", "warmup", "loss", "ppo"})
    ignored = frozenset()

    def __init__(self, config: Any, engine: Engine) -> None:
        super().__init__(config, engine)
        self.critic = Critic(engine, separate=config.ppo.value_model == "critic", lr=config.ppo.critic_lr)
        self._targets: dict[int, Targets] = {}
        self._value_sums = _ValueSums()
        self._value_tokens = 1.0
        self._hidden: torch.Tensor | None = None  # the policy pass's hidden states, for the value head

    # -- the pieces of a step -----------------------------------------------------

    def old_values(self, sequences: list[TrainSequence]) -> tuple[list[list[float]], list[float]]:
        """The value model's value at every completion token of each sequence, and after its last token,
        before this step's updates. Every rank scores every sequence (the same passes on each, as FSDP
        needs)."""
        values: dict[int, tuple[list[float], float]] = {}
        with torch.no_grad():
            for group in self.loop.micro_batches(sequences):
                per_token, final = self.critic.values(self.collate(group))
                per_token, final = per_token.float().cpu(), final.float().cpu()
                for s, sequence in enumerate(group):
                    values[id(sequence)] = per_token[s, :sequence.completion_length].tolist(), float(final[s])
        return ([values[id(s)][0] for s in sequences], [values[id(s)][1] for s in sequences])

    def compute_targets(self, rows: Sequence[TrajectoryRow], values: Sequence[list[float]],
                        finals: Sequence[float]) -> list[Targets]:
        """GAE advantages and returns of each row's completion tokens, per episode (its rows in order)."""
        ppo = self.config.ppo
        episodes: dict[str, list[int]] = defaultdict(list)
        for index, row in enumerate(rows):
            episodes[row.episode_id].append(index)
        targets: list[Targets | None] = [None] * len(rows)
        level = turn_level_targets if ppo.gae_level == "turn" else token_level_targets
        for members in episodes.values():
            members.sort(key=lambda i: rows[i].row_index)
            last = bootstrap_value(rows[members[-1]], finals[members[-1]])
            for index, target in zip(members, level([rows[i] for i in members], [values[i] for i in members],
                                                    ppo.gamma, ppo.gae_lambda, last)):
                targets[index] = target
        return [t for t in targets if t is not None]

    # -- a step ---------------------------------------------------------------------

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        start = time.perf_counter()
        rows = [row for row in rows if row.prompt_ids and any(row.completion_mask)]
        rows, extra = self.shaped_rewards(rows)
        if self.kl_in_reward:
            rows, kl_metrics = self.with_episode_kl(rows, self.token_kl(rows))
            extra.update(kl_metrics)
        plain = to_sequences(rows, [0.0] * len(rows))
        targets = self.compute_targets(rows, *self.old_values(plain))
        advantages = self._whitened([t.advantages for t in targets], [s.loss_mask for s in plain])
        sequences = [replace(s, advantages=a) for s, a in zip(plain, advantages)]
        self._targets = {id(s): t for s, t in zip(sequences, targets)}
        stats, self._value_sums = StepStats(), _ValueSums(critic_norms=[])
        self.remember_old_logprobs(self.loop.local_share(sequences))
        updates = self.loop.run(sequences, lambda group, normaliser: self.backward_pass(group, normaliser, stats),
                                before_update=self.before_update, after_update=self.after_update)
        metrics = self.step_metrics(stats, updates, rows, sequences, time.perf_counter() - start)
        if "loss" in metrics:
            metrics["policy_loss"] = metrics.pop("loss")
        metrics.update(self._value_metrics(targets, sequences, self._value_sums))
        return {**metrics, **extra}

    def policy_logprobs(self, batch: MicroBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A head on the policy reads the policy pass's own hidden states (kept for :meth:`backward_pass`):
        one forward of the trunk a micro-batch, not two, which halves the activations a pass keeps."""
        if self.critic.body is not None:
            return super().policy_logprobs(batch)
        logprobs, entropy, self._hidden = self.engine.logprobs_and_hidden(batch, with_entropy=True)
        return logprobs, entropy

    def backward_pass(self, group: list[TrainSequence], normaliser: float, stats: StepStats) -> None:
        """The policy's loss plus ``value_loss_coef`` times the clipped value loss of the pass."""
        batch, policy_term = self.policy_pass(group, normaliser, stats)
        hidden, self._hidden = self._hidden, None
        separate = self.critic.body is not None
        if separate:
            # A separate critic shares nothing with the policy: the policy's backward frees its
            # activations before the critic's forward keeps its own, so the two never add up.
            self.engine.backward(policy_term)
        values, _ = self.critic.values(batch, hidden)
        like = values.detach()
        value_mask = self._padded(group, like, "value_mask")
        critic = value_loss(values, self._padded(group, like, "old_values"), self._padded(group, like, "returns"),
                            value_mask, self.config.ppo.value_clip)
        share = float(value_mask.sum()) / self._value_tokens
        value_term = self.config.ppo.value_loss_coef * critic.loss * share
        self.engine.backward(value_term if separate else policy_term + value_term)
        sums = self._value_sums
        sums.loss += float(critic.loss.detach()) * share
        sums.clipped += critic.clip_fraction * float(value_mask.sum())
        sums.tokens += float(value_mask.sum())

    def after_update(self) -> None:
        assert self._value_sums.critic_norms is not None
        self._value_sums.critic_norms.append(self.critic.step())

    def finish_step(self, *, trained: bool) -> None:
        super().finish_step(trained=trained)
        self.critic.finish_step()

    def before_update(self, local: list[TrainSequence]) -> None:
        """The value tokens of the mini-batch over every rank: the loop's normaliser counts policy
        tokens, so the value loss keeps its own."""
        tokens = float(sum(sum(self._targets[id(s)].value_mask) for s in local if id(s) in self._targets))
        self._value_tokens = max(all_reduce(torch.tensor(tokens), self.engine.dist).item(), 1.0)

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

    def _value_metrics(self, targets: list[Targets], sequences: list[TrainSequence], sums: _ValueSums
                       ) -> dict[str, float]:
        totals = torch.tensor([sums.loss, sums.clipped, sums.tokens], dtype=torch.float64)
        all_reduce(totals, self.engine.dist)
        norms = sums.critic_norms or []
        updates = max(len(norms), 1)
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
                "critic_grad_norm": sum(norms) / updates}

    # -- the critic goes wherever the policy goes -------------------------------------------

    def state(self) -> dict[str, Any]:
        return {**self.engine.state(), "critic": self.critic.state()}

    def load_state(self, state: dict[str, Any]) -> None:
        self.engine.load_state(state)
        self.critic.load_state(state["critic"])

    def export(self, folder: str | Path) -> Path:
        """The policy as a transformers folder, and ``critic.pt`` in it: the value head (and a separate
        critic's weights), ``{"separate": bool, "state_dict": ...}``."""
        folder = self.engine.export(folder)
        self.critic.export(folder)
        return folder


def bootstrap_value(last_row: TrajectoryRow, final_value: float) -> float:
    """The value after an episode's last step: 0 when it ended (terminal), the value after its last token
    when it was cut (truncated and not terminated: a turn limit, a turn budget, the context limit)."""
    return final_value if last_row.truncated and not last_row.terminated else 0.0


def token_level_targets(rows: Sequence[TrajectoryRow], values: Sequence[list[float]], gamma: float, lam: float,
                        last_value: float = 0.0) -> list[Targets]:
    """An episode's rows (in order): :func:`~agentgym.trainers.losses.value.token_gae` over all its
    completion tokens, split back into its rows."""
    all_values = [v for row_values in values for v in row_values]
    mask = [int(m) for row in rows for m in row.completion_mask]
    advantages, returns = token_gae(all_values, mask, rows[0].reward, gamma, lam, last_value)
    out, at = [], 0
    for row_values in values:
        end = at + len(row_values)
        out.append(Targets(advantages[at:end], returns[at:end], list(row_values), mask[at:end]))
        at = end
    return out


def turn_level_targets(rows: Sequence[TrajectoryRow], values: Sequence[list[float]], gamma: float, lam: float,
                       last_value: float = 0.0) -> list[Targets]:
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
    advantages, returns = gae(rewards, turn_values, gamma, lam, last_value)
    out = [Targets([0.0] * len(v), [0.0] * len(v), list(v), [0] * len(v)) for v in values]
    for (r, span), advantage, target in zip(spans, advantages, returns):
        row_targets = out[r]
        row_targets.advantages[span.start:span.end] = [advantage] * (span.end - span.start)
        row_targets.returns[span.start] = target
        row_targets.value_mask[span.start] = 1
    return out
