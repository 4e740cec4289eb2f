"""Where a step's rows come from: episodes played now, whole groups of a rollout file, or batches
of the successful rows of rollout files; and which of them are fit to learn from.

A learner says which it takes (``Learner.data``); :func:`row_source` gives the loop a function
``rows(step, position) -> (rows, metrics, next position)`` for it. Played rows lose what is not
fit to learn from before any learner sees them, on every path alike:

- episodes that failed for reasons outside the policy's play (the env or the server raised, the
  episode ran out of time: ``row.error``), which would otherwise be punished as bad play and move
  their group's baseline (``failed_episodes``);
- rows sampled by weights more than ``rollout.max_staleness`` versions behind the learner's, when
  the server gets the learner's weights (``stale_rows``).

DAPO's dynamic sampling (a learner whose ``refill_rounds`` is above 0: GRPO's
``dynamic_sampling_rounds``): while a played step has fewer than ``groups_per_step`` groups that the
learner says have signal (``has_signal``), rank 0 plays another round of ``groups_per_step`` new
groups, up to ``refill_rounds`` rounds (:func:`play_until_signal`); the step then trains on the first
``groups_per_step`` groups with signal, and the ones without (which the learner leaves out)
(:func:`signal_groups_first`). ``sampling_rounds``, ``groups_played``, ``episodes_played`` and
``signal_groups`` say what it took; the episode metrics are over every episode played.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow, first_rows
from agentgym.trainers.research.options import sft_order

if TYPE_CHECKING:
    from agentgym.trainers.loop.rollouts import StepRollout  # rollouts.py imports this module

__all__ = ["OfflineGroups", "RowSource", "SFTBatches", "drop_failed", "drop_stale", "episode_stats", "groups_of",
           "play_until_signal", "random_batch_order", "row_source", "signal_groups_first", "trajectory_files"]

RowSource = Callable[[int, int], tuple[list[TrajectoryRow], dict[str, float], int]]


def trajectory_files(spec: str) -> list[Path]:
    """The files of ``--trajectories``: one path or several, comma-separated (a file named twice counts twice)."""
    paths = [Path(part.strip()) for part in spec.split(",") if part.strip()]
    if not paths:
        raise ConfigError(f"--trajectories {spec!r} names no file.")
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        raise ConfigError(f"--trajectories: no such file: {', '.join(missing)}.")
    return paths


def drop_failed(rows: Sequence[TrajectoryRow]) -> tuple[list[TrajectoryRow], int]:
    """The rows of episodes that did not fail (no ``error``: the env or the server raised, or the episode
    timed out), and how many episodes did."""
    failed = {row.episode_id for row in rows if row.error is not None}
    return [row for row in rows if row.episode_id not in failed], len(failed)


def drop_stale(rows: Sequence[TrajectoryRow], version: int, max_staleness: int) -> tuple[list[TrajectoryRow], int]:
    """Rows sampled at most ``max_staleness`` versions before ``version`` (unknown versions kept)."""
    kept = [row for row in rows
            if row.policy_version is None or version - row.policy_version <= max_staleness]
    return kept, len(rows) - len(kept)


def episode_stats(rows: Sequence[TrajectoryRow]) -> dict[str, float]:
    """Mean reward, success rate, valid-action rate, turns and sampled tokens of the episodes."""
    episodes = first_rows(rows)
    if not episodes:
        return {}
    count = len(episodes)
    turns = max(sum(row.num_turns for row in episodes), 1)
    return {
        "episodes": float(count),
        "reward": sum(row.reward for row in episodes) / count,
        "success": sum(row.success for row in episodes) / count,
        "valid_actions": 1.0 - sum(row.invalid_actions for row in episodes) / turns,
        "turns": turns / count,
        "sampled_tokens": float(sum(sum(row.completion_mask) for row in rows)),
        "completion_tokens": sum(sum(row.completion_mask) for row in rows) / count,
        "errors": float(sum(row.error is not None for row in episodes)),
    }


def groups_of(rows: Sequence[TrajectoryRow]) -> list[list[TrajectoryRow]]:
    """The rows by group (env, seed, group id), in the order the groups first come."""
    groups: OrderedDict[tuple[str, int, int], list[TrajectoryRow]] = OrderedDict()
    for row in rows:
        groups.setdefault((row.env_id, row.seed, row.group_id), []).append(row)
    return list(groups.values())


def play_until_signal(first: StepRollout, play_round: Callable[[int], StepRollout],
                      has_signal: Callable[[Sequence[TrajectoryRow]], bool], *, groups: int, max_rounds: int,
                      usable: Callable[[list[TrajectoryRow]], list[TrajectoryRow]] = list) -> StepRollout:
    """DAPO's dynamic sampling: ``first`` and as many extra rounds (``play_round(1)``, ``play_round(2)``,
    ...; at most ``max_rounds``) as it takes for the ``usable`` rows (not failed, not stale) to hold
    ``groups`` groups with signal. Its stats are over every episode played, with ``sampling_rounds``:
    the extra rounds played."""
    rows, seconds, rounds = list(first.rows), first.seconds, 0
    while rounds < max_rounds and sum(map(has_signal, groups_of(usable(rows)))) < groups:
        rounds += 1
        extra = play_round(rounds)
        rows += extra.rows
        seconds += extra.seconds
    if not rounds:
        return replace(first, stats={**first.stats, "sampling_rounds": 0.0})
    stats = {**first.stats, **episode_stats(rows), "sampling_rounds": float(rounds)}
    stats["rollout_tokens_per_s"] = stats.get("sampled_tokens", 0.0) / max(seconds, 1e-9)
    return replace(first, rows=rows, seconds=seconds, stats=stats)


def signal_groups_first(rows: Sequence[TrajectoryRow], has_signal: Callable[[Sequence[TrajectoryRow]], bool],
                        groups: int) -> tuple[list[TrajectoryRow], dict[str, float]]:
    """The rows of the first ``groups`` groups with signal and of every group without (the learner leaves
    those out and counts them), in play order; and what was played: ``groups_played``,
    ``episodes_played``, ``signal_groups`` (those trained on)."""
    kept: list[TrajectoryRow] = []
    signal = 0
    played = groups_of(rows)
    for group in played:
        if has_signal(group):
            if signal == groups:
                continue  # a round plays whole steps of groups: the surplus is left out, as verl does
            signal += 1
        kept += group
    return kept, {"groups_played": float(len(played)), "episodes_played": float(len({r.episode_id for r in rows})),
                  "signal_groups": float(signal)}


class OfflineGroups:
    """Whole groups of a rollout file, ``episodes_per_step`` episodes a step, round and round.

    Offline training (``--trajectories FILE``) of both backends reads its steps from here,
    so a step trains on the same rows whichever backend runs it. Failed episodes are left out.
    """

    def __init__(self, path: str, episodes_per_step: int, rows: list[TrajectoryRow] | None = None) -> None:
        """``rows``: the file's rows as the learner read them (None: read ``path`` as a rollout file)."""
        from agentgym.rollout.storage import read_rows

        groups = groups_of(drop_failed(read_rows(path) if rows is None else rows)[0])
        if not groups:
            raise ConfigError(f"{path!r} holds no usable rows (all failed, or the file is empty).")
        self.path = path
        self.groups = groups
        self.episodes_per_step = episodes_per_step
        self._starts = [0]  # the group each step starts at, as far as walked

    def take(self, position: int) -> tuple[list[TrajectoryRow], int]:
        """The rows of the next step from group ``position`` on, and the position after them."""
        rows: list[TrajectoryRow] = []
        episodes = 0
        while episodes < self.episodes_per_step:
            group = self.groups[position % len(self.groups)]
            rows += group
            episodes += len({row.episode_id for row in group})
            position += 1
        return rows, position % len(self.groups)

    def rows_of_step(self, step: int) -> list[TrajectoryRow]:
        """The rows training step ``step`` takes (a resumed run starts at any step)."""
        while len(self._starts) <= step:
            self._starts.append(self.take(self._starts[-1])[1])
        return self.take(self._starts[step])[0]


class SFTBatches:
    """Step ``k``'s batch of the successful rows of the rollout files: random batches, each pass over
    the rows reshuffled (or batches of similar length, ``experimental.group_by_length``). The order
    depends on the seed alone, so a resumed run takes the batches the stopped one would have."""

    def __init__(self, config: Any) -> None:
        from agentgym.rollout.storage import read_rows

        paths = trajectory_files(str(config.rollout.trajectories))
        loaded = {path: read_rows(path) for path in dict.fromkeys(paths)}  # a file named twice is read once
        everything = [row for path in paths for row in loaded[path]]
        self.rows = [row for row in everything if row.error is None and row.success and any(row.completion_mask)]
        if not self.rows:
            raise ConfigError(f"No successful episodes to fine-tune on among {len(everything)} rows of "
                              f"{config.rollout.trajectories}. Roll out more episodes (or a better policy) first.")
        self.total = len(everything)
        self.batch_size = min(config.optim.micro_batch_size, len(self.rows))
        lengths = [len(row.prompt_ids) + len(row.completion_ids) for row in self.rows]
        samples = config.run.steps * self.batch_size
        grouped = sft_order(lengths, batch_size=self.batch_size, samples=samples, seed=config.run.seed,
                            settings=config.experimental)
        self.order = grouped if grouped is not None else random_batch_order(
            len(lengths), batch_size=self.batch_size, samples=samples, seed=config.run.seed)

    def rows_of_step(self, step: int) -> list[TrajectoryRow]:
        return [self.rows[i] for i in self.order[step * self.batch_size:(step + 1) * self.batch_size]]


def random_batch_order(num_rows: int, *, batch_size: int, samples: int, seed: int) -> list[int]:
    """The first ``samples`` row indices of batches drawn at random, each pass over the rows reshuffled.

    A pass leaves out its last ``num_rows % batch_size`` rows (a different few each pass), so every
    batch is full and the batches stay aligned.
    """
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < samples:
        rows = list(range(num_rows))
        rng.shuffle(rows)
        order += rows[:num_rows - num_rows % batch_size]
    return order[:samples]


def row_source(config: Any, learner: Any, data: SFTBatches | OfflineGroups | None, serving: Any,
               log: Any) -> RowSource:
    """``rows(step, position) -> (rows, metrics, next position)`` for the learner's kind of data:
    batches of a file (SFT), whole groups of a file (offline), or episodes played now."""
    if isinstance(data, SFTBatches):
        batches = data
        log.note(f"{len(batches.rows)} successful rows of {batches.total} in {config.rollout.trajectories}.")

        def batch(step: int, position: int) -> tuple[list[TrajectoryRow], dict[str, float], int]:
            return batches.rows_of_step(step), {"train_rows": float(len(batches.rows))}, position
        return batch
    if isinstance(data, OfflineGroups):
        groups = data

        def offline(step: int, position: int) -> tuple[list[TrajectoryRow], dict[str, float], int]:
            rows, after = groups.take(position)
            log.log_samples(step, rows)
            return rows, {**episode_stats(rows), "time/rollout": 0.0}, after
        return offline
    return _online_source(config, learner, serving, log)


def _online_source(config: Any, learner: Any, serving: Any, log: Any) -> RowSource:
    from agentgym.trainers.engines.distributed import broadcast_object

    dist = learner.engine.dist
    groups = config.rollout.groups_per_step

    def usable(rows: list[TrajectoryRow]) -> list[TrajectoryRow]:
        rows = drop_failed(rows)[0]
        return drop_stale(rows, learner.version, config.rollout.max_staleness)[0] if serving.pushes else rows

    def online(step: int, position: int) -> tuple[list[TrajectoryRow], dict[str, float], int]:
        rollout = serving.rollout(step) if dist.is_main else None
        if dist.is_main and config.rollout.asynchronous:
            serving.start_ahead(step, config.rollout.max_staleness, config.run.steps)  # plays while this step learns
        if dist.is_main and learner.refill_rounds:
            rollout = play_until_signal(rollout, lambda round: serving.refill(step, round), learner.has_signal,
                                        groups=groups, max_rounds=learner.refill_rounds, usable=usable)
        rollout = broadcast_object(rollout, dist)
        log.log_episodes(step, rollout.rows)  # every episode played, failed and stale ones too
        log.log_samples(step, rollout.rows)
        rows, failed = drop_failed(rollout.rows)
        lags = [learner.version - row.policy_version for row in rows if row.policy_version is not None]
        stale = 0
        if serving.pushes:  # a server that never gets the learner's weights is off-policy on purpose
            rows, stale = drop_stale(rows, learner.version, config.rollout.max_staleness)
        metrics = {**rollout.stats, "failed_episodes": float(failed), "stale_rows": float(stale),
                   "time/rollout": rollout.seconds}
        if learner.refill_rounds:
            rows, sampled = signal_groups_first(rows, learner.has_signal, groups)
            metrics.update(sampled)
            metrics["episodes_played"] = float(len({row.episode_id for row in rollout.rows}))
        if lags:
            metrics["policy_lag"] = sum(lags) / len(lags)
        return rows, metrics, position
    return online
