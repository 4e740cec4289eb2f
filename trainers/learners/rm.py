"""The reward model's learner (``--trainer rm``): a Bradley-Terry reward model on DPO's pairs.

    agentgym train --trainer rm --trajectories rows.parquet --model tiny --steps 20 --out runs/rm

The model is the start model's trunk with a scalar head read at each sequence's last token
(transformers' ``AutoModelForSequenceClassification`` with one label, the engine's
``head="score"``), trained as TRL's ``RewardTrainer`` trains it: -log sigmoid(r_chosen -
r_rejected) per pair (:func:`~agentgym.trainers.losses.preference.reward_model_loss`), plus
``rm.center_rewards_coefficient`` * (r_chosen + r_rejected)^2. On the trl backend the loss is
``RewardTrainer.compute_loss`` itself (:class:`~agentgym.trainers.engines.base.RewardLoss`); on
fsdp the same numbers computed natively.

The pairs are DPO's, read the same way (:func:`~agentgym.trainers.learners.dpo.read_preference_rows`,
:func:`~agentgym.trainers.learners.dpo.preference_pairs` with ``dpo.pairs`` and ``dpo.pair_margin``):
the episodes of a rollout file's groups ranked by reward, or a prompt / chosen / rejected file. An
episode is read as the reward model will be asked about it (:mod:`agentgym.rewards.model`): its
conversation up to its last action, rendered by the model's chat template; rows without
messages (a pairs file) as their tokens. ``rm.eval_fraction`` of the file's groups are held out
before training and never trained on: ``eval_accuracy`` (the share of held-out pairs whose chosen
episode scores higher) and ``eval_loss`` are measured on them every ``rm.eval_every`` steps.

Offline only (``--trajectories``): a reward model has no policy to play episodes with.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentgym.errors import ConfigError
from agentgym.rewards.model import conversation_ids, scored_conversation
from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.engines.base import Engine, RewardLoss
from agentgym.trainers.engines.distributed import all_reduce
from agentgym.trainers.learners.base import Learner
from agentgym.trainers.learners.dpo import preference_pairs, read_preference_rows
from agentgym.trainers.learners.minibatch import MiniBatchLoop
from agentgym.trainers.losses.preference import reward_model_loss

__all__ = ["RewardModelLearner", "ScoredPair", "episode_tokens", "hold_out_groups"]

#: rollout settings of playing, which a learner that only reads a file leaves alone
_PLAYING = frozenset({"env_id", "env_kwargs", "max_turns", "turn_budget", "max_tokens",
                      "max_context_tokens", "temperature", "top_p", "concurrency", "level_seeds", "max_staleness",
                      "asynchronous"})


@dataclass(frozen=True)
class ScoredPair:
    """The token sequences of a pair's preferred episode and of the other."""

    chosen: tuple[int, ...]
    rejected: tuple[int, ...]


#: the pair a rank with fewer passes runs: nothing to learn
_FILLER = ScoredPair((0,), (0,))


def episode_tokens(rows: Sequence[TrajectoryRow], tokenizer: Any) -> list[int]:
    """What the reward model reads of an episode: its conversation up to its last action through the
    chat template (as :class:`~agentgym.rewards.model.RewardModelReward` renders one), or, for rows
    without messages (a pairs file), the tokens of its last row."""
    ordered = sorted(rows, key=lambda row: row.row_index)
    messages = [message.model_dump() for message in ordered[0].messages]
    if messages:
        return conversation_ids(tokenizer, scored_conversation(messages))
    last = ordered[-1]
    return list(last.prompt_ids) + list(last.completion_ids)


def hold_out_groups(rows: Sequence[TrajectoryRow], fraction: float, seed: int
                    ) -> tuple[list[TrajectoryRow], list[TrajectoryRow]]:
    """(training rows, held-out rows): ``fraction`` of the groups (at least one when fraction > 0, never
    all), drawn by ``seed``, with every row of each."""
    groups: OrderedDict[tuple[str, int, int], list[TrajectoryRow]] = OrderedDict()
    for row in rows:
        groups.setdefault((row.env_id, row.seed, row.group_id), []).append(row)
    keys = list(groups)
    count = min(max(round(fraction * len(keys)), 1), len(keys) - 1) if fraction > 0 else 0
    held = set(random.Random(seed).sample(keys, count)) if count > 0 else set()
    train = [row for key in keys if key not in held for row in groups[key]]
    return train, [row for key in keys if key in held for row in groups[key]]


@dataclass
class _Totals:
    """Sums over pairs: loss, margin, correct, chosen and rejected scores, pairs."""

    values: list[float] = field(default_factory=lambda: [0.0] * 6)

    def add(self, losses: torch.Tensor, chosen: torch.Tensor, rejected: torch.Tensor) -> None:
        margin = (chosen - rejected).detach()
        for index, value in enumerate((losses.detach().sum(), margin.sum(), (margin > 0).sum(),
                                       chosen.detach().sum(), rejected.detach().sum())):
            self.values[index] += float(value)
        self.values[5] += len(margin)

    def means(self, dist: Any) -> dict[str, float]:
        """Means over every rank's pairs (a collective); {} when there were none."""
        summed = all_reduce(torch.tensor(self.values, dtype=torch.float64), dist).tolist()
        pairs = summed[5]
        if not pairs:
            return {}
        names = ("loss", "margin", "accuracy", "chosen_score", "rejected_score")
        return {name: value / pairs for name, value in zip(names, summed)}


class RewardModelLearner(Learner):
    """A Bradley-Terry reward model on a step's pairs (see the module's docstring)."""

    sections = frozenset({"rollout", "dpo", "rm"})
    #: DPO's pairs without its loss, and nothing of playing
    ignored = frozenset({"beta", "dpo_loss"}) | _PLAYING
    head = "score"

    def __init__(self, config: Any, engine: Engine) -> None:
        super().__init__(config, engine)
        self.settings = config.rm
        self.held_out: list[ScoredPair] = []
        self.loop: MiniBatchLoop[ScoredPair] = MiniBatchLoop(
            engine, config, size=lambda pair: max(len(pair.chosen), len(pair.rejected)), rows=lambda pair: 2,
            weight=lambda pair: float(pair is not _FILLER), filler=lambda: _FILLER)

    @classmethod
    def check(cls, config: Any) -> None:
        if config.rollout.trajectories is None:
            raise ConfigError("--trainer rm learns from recorded pairs: pass --trajectories FILE (a rollout file "
                              "with groups, from `agentgym rollout --group-size 8 --out FILE`, or a prompt / "
                              "chosen / rejected file).")
        if config.model.lora:
            raise ConfigError("--trainer rm trains the whole model (its new score head too); leave out -s lora.")

    def read_recorded(self, path: str) -> list[TrajectoryRow]:
        """The file's rows less the held-out groups, whose pairs are kept for ``eval_accuracy``."""
        rows = read_preference_rows(path, self.engine.tokenizer)
        train, held = hold_out_groups(rows, self.settings.eval_fraction, self.config.run.seed)
        self.held_out = self.scored_pairs(held)[0]
        if self.settings.eval_fraction > 0 and not self.held_out:
            raise ConfigError(f"rm.eval_fraction={self.settings.eval_fraction:g} held out groups of {path!r} that "
                              "give no pair (their rewards tie); hold out more, or -s eval_fraction=0.")
        return train

    def scored_pairs(self, rows: Sequence[TrajectoryRow]) -> tuple[list[ScoredPair], int]:
        """The pairs of ``rows``' groups as token sequences, and how many groups gave none."""
        pairs, unpaired = preference_pairs(rows, self.config.dpo.pairs, self.config.dpo.pair_margin)
        episodes: dict[str, list[TrajectoryRow]] = {}
        for row in rows:
            episodes.setdefault(row.episode_id, []).append(row)
        tokens = {name: tuple(episode_tokens(episodes[name], self.engine.tokenizer))
                  for name in {name for pair in pairs for name in (pair.chosen, pair.rejected)}}
        return [ScoredPair(tokens[pair.chosen], tokens[pair.rejected]) for pair in pairs], unpaired

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        started = time.perf_counter()
        pairs, unpaired = self.scored_pairs(rows)
        totals, measured = _Totals(), set()

        def backward_pass(chunk: list[ScoredPair], normaliser: float) -> None:
            real = [pair for pair in chunk if pair is not _FILLER]
            losses, chosen, rejected = self._loss(real or [_FILLER], normaliser, learn=bool(real))
            fresh = [i for i, pair in enumerate(real) if id(pair) not in measured]  # each pair once, before its update
            measured.update(id(pair) for pair in real)
            if fresh:
                keep = torch.tensor(fresh, device=losses.device)
                totals.add(losses[keep], chosen[keep], rejected[keep])

        updates = self.loop.run(pairs, backward_pass)
        metrics = {"updates": float(updates.updates), "pairs": float(len(pairs)), "unpaired_groups": float(unpaired),
                   "grad_norm": updates.grad_norm, **totals.means(self.engine.dist)}
        if updates.lr is not None:
            metrics["lr"] = updates.lr
        step = self.engine.schedule_step + 1
        if self.held_out and (step % self.settings.eval_every == 0 or step == self.config.run.steps):
            metrics.update(self.evaluate(self.held_out))
        metrics["train_seconds"] = time.perf_counter() - started
        return metrics

    def _loss(self, pairs: list[ScoredPair], normaliser: float, *, learn: bool
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Forward and backward one pass of pairs; each pair's loss and scores (detached)."""
        chosen_ids, rejected_ids = [pair.chosen for pair in pairs], [pair.rejected for pair in pairs]
        coefficient = self.settings.center_rewards_coefficient
        engine = self.engine
        if isinstance(engine, RewardLoss) and learn:  # the backend's own loss (TRL's RewardTrainer)
            mean, chosen, rejected = engine.reward_loss(chosen_ids, rejected_ids)
            engine.backward(mean * len(pairs) / normaliser)
            losses, _ = reward_model_loss(chosen.detach(), rejected.detach(), center_coefficient=coefficient)
            return losses, chosen.detach(), rejected.detach()
        scores = engine.scores([*chosen_ids, *rejected_ids])
        chosen, rejected = scores[:len(pairs)], scores[len(pairs):]
        losses, _ = reward_model_loss(chosen, rejected, center_coefficient=coefficient)
        engine.backward(losses.sum() / normaliser * float(learn))  # a filler pass: a gradient of zero
        return losses.detach(), chosen.detach(), rejected.detach()

    def evaluate(self, pairs: Sequence[ScoredPair]) -> dict[str, float]:
        """``eval_*`` metrics of ``pairs`` (every rank scores its share), without a gradient."""
        totals = _Totals()
        with torch.no_grad():
            for chunk in self.loop.micro_batches(self.loop.local_share(pairs)):
                real = [pair for pair in chunk if pair is not _FILLER]
                scores = self.engine.scores([pair.chosen for pair in chunk] + [pair.rejected for pair in chunk])
                if real:
                    chosen, rejected = scores[:len(real)], scores[len(chunk):len(chunk) + len(real)]
                    losses, _ = reward_model_loss(chosen, rejected,
                                                  center_coefficient=self.settings.center_rewards_coefficient)
                    totals.add(losses, chosen, rejected)
        means = totals.means(self.engine.dist)
        return {"eval_pairs": float(len(pairs)), **{f"eval_{name}": value for name, value in means.items()}}

    def idle_reason(self, metrics: dict[str, float]) -> str:
        return (f"no pair: in each of the {metrics.get('unpaired_groups', 0):.0f} groups the rewards were within "
                f"pair_margin ({self.config.dpo.pair_margin:g}) of each other")
