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


def _online(make_row, tmp_path, rows, *, pushes: bool, version: int):
    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "out": str(tmp_path), "episodes_per_step": 4,
                                    "group_size": 4})
    learner = SimpleNamespace(version=version, engine=SimpleNamespace(dist=SimpleNamespace(is_main=True,
                                                                                          sharded=False)))
    log = MetricsLogger(tmp_path, config, enabled=False, console=Console(file=io.StringIO()))
    return row_source(config, learner, None, _PlayedRows(rows, pushes), log)


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
