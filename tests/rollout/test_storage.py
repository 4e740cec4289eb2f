from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.rollout.rows import ARROW_SCHEMA, Message, TrajectoryRow, TurnSpan, observation_hash
from agentgym.rollout.storage import RolloutWriter, done_episodes, load_rollouts, read_rows


def row(group: int, index: int) -> TrajectoryRow:
    return TrajectoryRow(
        episode_id=f"e{group}-{index}", group_id=group, index_in_group=index, env_id="Sokoban-LLM-v0",
        seed=group, prompt_ids=[1, 2], completion_ids=[3, 4, 5], completion_mask=[1, 1, 0],
        logprobs=[-0.5, -0.25, 0.0], reward=1.5, turn_rewards=[0.5, 1.0], success=True, num_turns=2,
        terminated=True, stop_reason="terminated", messages=[Message(role="user", content="hi")],
        turns=[TurnSpan(turn=0, start=0, end=2, observation_hash=observation_hash("hi"))], server_logprobs=True,
    )


def test_schema_has_every_row_field() -> None:
    assert ARROW_SCHEMA.names == list(TrajectoryRow.model_fields)


def test_rows_round_trip_through_parquet_and_datasets(tmp_path: Path) -> None:
    out = tmp_path / "rollouts.parquet"
    with RolloutWriter(out) as writer:
        writer.add([row(0, 0), row(0, 1)])
    assert read_rows(out) == [row(0, 0), row(0, 1)]
    dataset = load_rollouts(out)
    assert dataset.num_rows == 2
    import datasets

    loaded = datasets.load_dataset("parquet", data_files=str(out), cache_dir=str(tmp_path / "hf"))["train"]
    assert loaded["completion_ids"] == [[3, 4, 5], [3, 4, 5]] and loaded["episode_id"] == ["e0-0", "e0-1"]
    assert dataset[0]["completion_mask"] == [1, 1, 0] and dataset[0]["messages"][0]["content"] == "hi"
    assert loaded["turns"][0] == [{"turn": 0, "start": 0, "end": 2, "observation_hash": observation_hash("hi")}]
    assert loaded["server_logprobs"] == [True, True]
    assert not (tmp_path / "rollouts.parquet.parts").exists()


def test_finished_episodes_survive_a_crash_and_resume_skips_them(tmp_path: Path) -> None:
    out = tmp_path / "rollouts.parquet"
    writer = RolloutWriter(out, flush_seconds=0)
    writer.add([row(0, 0)])
    writer.add([row(1, 0)])
    # The process dies here: close() never runs, no `out` exists, the parts do.
    assert not out.exists()
    assert done_episodes(out) == {(0, 0), (1, 0)}
    with RolloutWriter(out, resume=True) as resumed:
        resumed.add([row(2, 0)])
    assert sorted(r.key for r in read_rows(out)) == [(0, 0), (1, 0), (2, 0)]


def test_an_existing_file_is_not_overwritten_without_resume(tmp_path: Path) -> None:
    out = tmp_path / "rollouts.parquet"
    RolloutWriter(out).close()
    with pytest.raises(ConfigError, match="already exists: pass --resume"):
        RolloutWriter(out)


def test_rows_wait_in_memory_at_most_flush_seconds(tmp_path: Path) -> None:
    writer = RolloutWriter(tmp_path / "r.parquet", flush_seconds=3600)
    writer.add([row(0, 0)])
    assert writer.written == 0
    writer.flush()
    assert writer.written == 1 and done_episodes(tmp_path / "r.parquet") == {(0, 0)}
