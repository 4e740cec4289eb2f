"""Which played rows a step learns from (issue 47, defects 1, 3 and 4; worked by hand)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from agentgym.trainers.loop.metrics import MetricsLogger
from agentgym.trainers.loop.rollouts import StepRollout
from agentgym.trainers.loop.sources import drop_failed, drop_stale, row_source
from agentgym.trainers.losses.advantages import group_advantages, token_advantages
from agentgym.trainers.settings import TrainConfig


def _group(make_row, rewards, errors=()):
    rows = [make_row(reward=reward, index=i) for i, reward in enumerate(rewards)]
    return [row.model_copy(update={"error": "the episode took longer than 600 s", "stop_reason": "timeout"})
            if i in errors else row for i, row in enumerate(rows)]


def test_a_timed_out_episode_is_neither_punished_nor_part_of_its_groups_baseline(make_row) -> None:
    """Rewards [1, 0, 0, 0], the last a timeout. Kept, it got -0.5 (mean 0.25, sample std 0.5) and
    moved its group's baseline; left out, the group is [1, 0, 0]: mean 1/3, std sqrt(1/3), so
    [1.1547, -0.5774, -0.5774]."""
    rows = _group(make_row, [1.0, 0.0, 0.0, 0.0], errors={3})
    before = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4, eps=0.0).tolist()
    assert before == pytest.approx([1.5, -0.5, -0.5, -0.5])
    kept, failed = drop_failed(rows)
    assert failed == 1 and [row.index_in_group for row in kept] == [0, 1, 2]
    advantages = [set(a) - {0.0} for a in token_advantages(kept, "grpo")]
    assert [value for (value,) in advantages] == pytest.approx([1.1547, -0.5774, -0.5774], abs=1e-3)


class _PlayedRows:
    """What the loop's online source asks of its server: one step's rows, and whether weights are pushed."""

    def __init__(self, rows, pushes: bool) -> None:
        self.rows, self.pushes = rows, pushes

    def rollout(self, step: int) -> StepRollout:
        return StepRollout(rows=list(self.rows), seconds=1.0, stats={"episodes": float(len(self.rows))})


def _online(make_row, tmp_path, rows, *, pushes: bool, version: int, server=None, refill_rounds: int = 0,
            group_size: int = 4):
    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "out": str(tmp_path), "episodes_per_step": 4,
                                    "group_size": group_size})
    learner = SimpleNamespace(version=version, engine=SimpleNamespace(dist=SimpleNamespace(is_main=True,
                                                                                          sharded=False)),
                              refill_rounds=refill_rounds, has_signal=_rewards_differ)
    log = MetricsLogger(tmp_path, config, enabled=False, console=Console(file=io.StringIO()))
    return row_source(config, learner, None, server or _PlayedRows(rows, pushes), log)


def _rewards_differ(group) -> bool:
    return len({row.reward for row in group}) > 1


def test_the_online_rows_lose_their_failed_episodes_and_say_how_many(make_row, tmp_path) -> None:
    rows = _group(make_row, [1.0, 0.0, 0.0, 0.0], errors={3})
    kept, metrics, _ = _online(make_row, tmp_path, rows, pushes=True, version=0)(0, 0)
    assert len(kept) == 3 and metrics["failed_episodes"] == 1.0 and metrics["stale_rows"] == 0.0


def test_a_server_that_gets_no_weights_is_off_policy_on_purpose(make_row, tmp_path) -> None:
    """sync_weights=false: the server stays at version 0 while the learner's grows. Every row was
    dropped as stale from step 2 on (before); now they are all kept, and the lag is reported."""
    rows = _group(make_row, [1.0, 0.0, 0.0, 0.5])
    kept, metrics, _ = _online(make_row, tmp_path, rows, pushes=False, version=5)(5, 0)
    assert len(kept) == 4 and metrics["stale_rows"] == 0.0 and metrics["policy_lag"] == 5.0
    kept, metrics, _ = _online(make_row, tmp_path, rows, pushes=True, version=5)(5, 0)
    assert kept == [] and metrics["stale_rows"] == 4.0  # the learner's weights do reach this one


def test_max_staleness_keeps_rows_up_to_that_many_versions_behind(make_row) -> None:
    rows = [make_row(version=v, index=i) for i, v in enumerate([5, 4, 3, 2])]
    assert [r.policy_version for r in drop_stale(rows, version=5, max_staleness=2)[0]] == [5, 4, 3]


class _RoundsPlayed(_PlayedRows):
    """A server whose step plays ``rounds[0]`` and whose extra round k plays ``rounds[k]``."""

    def __init__(self, rounds) -> None:
        super().__init__(rounds[0], pushes=True)
        self.rounds, self.asked = rounds, []

    def refill(self, step: int, round: int) -> StepRollout:
        self.asked.append(round)
        return StepRollout(rows=list(self.rounds[round]), seconds=2.0, stats={})


def _pairs(make_row, first_seed: int, rewards) -> list:
    """Groups of two episodes, group g seeded ``first_seed + g``, with rewards ``rewards[g]``."""
    return [make_row(reward=reward, group=0, index=i, seed=first_seed + g)
            for g, pair in enumerate(rewards) for i, reward in enumerate(pair)]


def _dynamic_rounds(make_row):
    """Two groups a step. The step's own: both all-equal; round 1: one with signal (seed 12), one without;
    round 2: both with signal (seeds 14, 15): three in all, one more than the step wants."""
    return [_pairs(make_row, 10, [(1.0, 1.0), (0.0, 0.0)]), _pairs(make_row, 12, [(1.0, 0.0), (0.0, 0.0)]),
            _pairs(make_row, 14, [(0.0, 1.0), (1.0, 0.0)]), _pairs(make_row, 16, [(1.0, 0.0), (1.0, 0.0)])]


def test_dynamic_sampling_plays_rounds_until_the_step_has_its_groups_with_signal(make_row, tmp_path) -> None:
    """DAPO's dynamic sampling: rounds 1 and 2 are played (not 3), the first two groups with signal are
    kept (seeds 12 and 14, not 15), and the groups without signal too (the learner leaves them out)."""
    server = _RoundsPlayed(_dynamic_rounds(make_row))
    rows, metrics, _ = _online(make_row, tmp_path, [], pushes=True, version=0, server=server, refill_rounds=3,
                               group_size=2)(0, 0)
    assert server.asked == [1, 2]
    assert sorted({row.seed for row in rows}) == [10, 11, 12, 13, 14]
    assert metrics["sampling_rounds"] == 2.0 and metrics["groups_played"] == 6.0
    assert metrics["episodes_played"] == 12.0 and metrics["signal_groups"] == 2.0
    assert metrics["episodes"] == 12.0 and metrics["time/rollout"] == pytest.approx(1.0 + 2.0 + 2.0)


def test_dynamic_sampling_stops_at_its_cap_and_is_off_at_zero(make_row, tmp_path) -> None:
    server = _RoundsPlayed(_dynamic_rounds(make_row))
    rows, metrics, _ = _online(make_row, tmp_path, [], pushes=True, version=0, server=server, refill_rounds=1,
                               group_size=2)(0, 0)
    assert server.asked == [1] and metrics["sampling_rounds"] == 1.0 and metrics["signal_groups"] == 1.0
    assert len(rows) == 8
    server = _RoundsPlayed(_dynamic_rounds(make_row))
    rows, metrics, _ = _online(make_row, tmp_path, [], pushes=True, version=0, server=server, group_size=2)(0, 0)
    assert server.asked == [] and "sampling_rounds" not in metrics and len(rows) == 4


def test_a_failed_episode_does_not_count_towards_the_signal(make_row, tmp_path) -> None:
    """The step's group with signal has its winner time out: left out, the group is all-equal, so a round is
    played."""
    rounds = _dynamic_rounds(make_row)
    rounds[0] = _pairs(make_row, 10, [(1.0, 0.0), (0.0, 0.0)])
    rounds[0][0] = rounds[0][0].model_copy(update={"error": "the episode took longer than 600 s"})
    server = _RoundsPlayed(rounds)
    _, metrics, _ = _online(make_row, tmp_path, [], pushes=True, version=0, server=server, refill_rounds=3,
                            group_size=2)(0, 0)
    assert server.asked == [1, 2] and metrics["failed_episodes"] == 1.0
