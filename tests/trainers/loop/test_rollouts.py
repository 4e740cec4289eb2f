"""A run's episodes: stale rows dropped, episode statistics, the format warm-up's episodes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentgym.parsing import extract_answer
from agentgym.rollout.storage import RolloutWriter
from agentgym.trainers.loop.rollouts import format_warmup_rows, rollout_config, round_rows
from agentgym.trainers.loop.sources import OfflineGroups, drop_stale, episode_stats
from agentgym.trainers.settings import TrainConfig


def test_rows_older_than_the_staleness_limit_are_dropped(make_row) -> None:
    rows = [make_row(version=v, index=i) for i, v in enumerate([5, 4, 3, None])]
    kept, dropped = drop_stale(rows, version=5, max_staleness=1)
    assert [r.policy_version for r in kept] == [5, 4, None] and dropped == 1  # unknown versions stay
    assert drop_stale(rows, version=5, max_staleness=0)[1] == 2


def test_episode_stats_count_episodes_not_rows(make_row) -> None:
    rows = [make_row(reward=1.0, index=0), make_row(reward=1.0, index=0, row_index=1),
            make_row("bad", reward=-0.1, index=1).model_copy(update={"invalid_actions": 1})]
    stats = episode_stats(rows)
    assert stats["episodes"] == 2 and stats["success"] == 0.5
    assert stats["reward"] == pytest.approx(0.45) and stats["valid_actions"] == 0.5
    assert episode_stats([]) == {}


def test_format_warmup_episodes_are_well_formed_and_reproducible(tiny_renderer) -> None:
    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "format_warmup_episodes": 12, "seed": 4})
    rows = asyncio.run(format_warmup_rows(config, tiny_renderer))
    again = asyncio.run(format_warmup_rows(config, tiny_renderer))
    assert len(rows) == 12 and [r.completion_ids for r in rows] == [r.completion_ids for r in again]
    answers = {extract_answer(r.messages[2].content) for r in rows}
    assert answers <= {"Phoenix", "Dragon"} and len(answers) == 2  # random arms, always readable
    assert all(r.invalid_actions == 0 and any(r.completion_mask) for r in rows)
    # Its seeds never meet the training steps' seeds.
    assert {r.seed for r in rows}.isdisjoint({seed for step in range(100) for seed in config.step_seeds(step)})


def test_each_step_has_its_own_seeds_and_seeded_sampling() -> None:
    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "seed": 2})
    first, second = rollout_config(config, 0), rollout_config(config, 1)
    assert set(first.seeds).isdisjoint(second.seeds) and first.sampling_seed != second.sampling_seed
    assert first.episodes == config.rollout.episodes_per_step and first.max_tokens_per_turn == config.rollout.max_tokens


def test_a_steps_extra_rounds_play_seeds_and_groups_of_their_own(make_row, tmp_path: Path) -> None:
    """Dynamic sampling's rounds: new seeds (never a step's), their own sampling seed, groups numbered after
    the step's; from a level file, its levels."""
    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "seed": 2})
    step, refill = rollout_config(config, 3), rollout_config(config, 3, 1)
    assert refill.seeds == config.refill_seeds(3, 1) == rollout_config(config, 3, 1).seeds  # reproducible
    assert refill.sampling_seed != step.sampling_seed and refill.seeds != config.refill_seeds(3, 2)
    steps = {seed for s in range(1000) for seed in config.step_seeds(s)}
    assert steps.isdisjoint(refill.seeds) and all(2**31 <= seed < 2**32 for seed in refill.seeds)
    levels = tmp_path / "levels.txt"
    levels.write_text("7\n8\n9\n")
    leveled = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "level_seeds": str(levels)})
    assert set(leveled.refill_seeds(0, 1)) <= {7, 8, 9}
    rows = round_rows([make_row(group=1, index=0)], 2, groups_per_step=4)
    assert rows[0].group_id == 9 and rows[0].episode_id.endswith("/g1/e0/r2")
    assert round_rows(rows, 0, groups_per_step=4) == rows


def test_the_turn_budget_reaches_the_rollout_and_leaves_the_env_alone() -> None:
    rollout = rollout_config(TrainConfig.from_dict({"env_id": "Sokoban-LLM-v0", "turn_budget": 12}), 0)
    assert rollout.turn_budget == 12 and "max_turns" not in rollout.make_env_kwargs()


def test_offline_steps_take_whole_groups_round_and_round(make_row, tmp_path: Path) -> None:
    """Groups of 2, 3 and 2 episodes (a failed one left out), 4 episodes a step."""
    path = tmp_path / "rows.parquet"
    with RolloutWriter(path) as writer:
        for group, size in enumerate([2, 3, 2]):
            writer.add([make_row(group=group, index=i, seed=group) for i in range(size)])
        writer.add([make_row(group=0, index=9, seed=0).model_copy(update={"error": "TimeoutError"})])
    offline = OfflineGroups(str(path), episodes_per_step=4)
    groups_of = [sorted({row.group_id for row in offline.rows_of_step(step)}) for step in range(4)]
    assert groups_of == [[0, 1], [0, 2], [1, 2], [0, 1]]  # step 1 wraps: groups 2 then 0
    assert len(offline.rows_of_step(0)) == 5 and all(row.error is None for row in offline.rows_of_step(3))
    position, walked = 0, []
    for _ in range(4):  # what the run skeleton does, carrying the position in its checkpoint
        rows, position = offline.take(position)
        walked.append(rows)
    assert walked == [offline.rows_of_step(step) for step in range(4)]
