"""rollout.asynchronous: the next step plays while this one learns, within the staleness bound."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers import registry
from agentgym.trainers.learners.grpo import GRPOLearner
from agentgym.trainers.loop.metrics import read_jsonl
from agentgym.trainers.loop.run import train
from agentgym.trainers.registry import register_trainer
from agentgym.trainers.settings import TrainConfig

#: (learner version at the step, policy versions of the rows it trained on), per step
SEEN: list[tuple[int, list[int | None]]] = []


class RecordingGRPO(GRPOLearner):
    """Records what each step trains on, and learns slowly (as a big model would), so that the next
    step's episodes surely reach the server before this step's weights do."""

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        SEEN.append((self.version, [row.policy_version for row in rows]))
        time.sleep(5.0)
        return super().train_step(rows)


@pytest.fixture(autouse=True)
def recording_trainer(monkeypatch: pytest.MonkeyPatch) -> None:
    """GRPO that records what each step trained on, registered for these tests only."""
    monkeypatch.setattr(registry, "_TRAINERS", dict(registry._TRAINERS))
    register_trainer("recording-grpo", "test_asynchronous:RecordingGRPO", backends=("fsdp",),
                     description="GRPO, recorded.")


def _config(out: Path, **changes: Any) -> TrainConfig:
    return TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "trainer": "recording-grpo", "model": "tiny",
                                  "steps": 4, "episodes_per_step": 16, "group_size": 8, "asynchronous": True,
                                  "format_warmup_steps": 10, "format_warmup_episodes": 16, "checkpoint_every": 1,
                                  # every step trains (and pushes), so the versions advance step by step
                                  "filter_zero_variance": False,
                                  "out": str(out), **changes})


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_each_step_trains_on_rows_of_the_allowed_versions_and_the_overlap_happens(tmp_path: Path) -> None:
    SEEN.clear()
    result = train(_config(tmp_path / "run"))
    assert [version for version, _ in SEEN] == [0, 1, 2, 3]
    for version, played_by in SEEN:
        assert played_by and all(by is not None and 0 <= version - by <= 1 for by in played_by)
    # Step 0 was played before any learning; a later step began while its predecessor learned,
    # so some of its rows come from the weights one step behind (never in the synchronous loop).
    assert all(by == 0 for by in SEEN[0][1])
    assert any(by < version for version, played_by in SEEN[1:] for by in played_by)
    assert all("time/waiting" in m for m in result.metrics[1:])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_run_stopped_while_the_next_step_plays_resumes_without_losing_or_repeating_a_step(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = train(_config(out, steps=3), stop_after=2)  # step 2 was being played when it stopped
    assert first.stopped_early and len(first.metrics) == 2
    resumed = train(_config(out, steps=3, resume=True))
    assert len(resumed.metrics) == 1 and resumed.final_model is not None
    assert [record["step"] for record in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3]


def test_asynchronous_needs_a_step_of_staleness_and_an_env_to_play() -> None:
    from agentgym.errors import ConfigError

    with pytest.raises(ConfigError, match="asynchronous .* needs max_staleness of 1 or more"):
        TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "asynchronous": True, "max_staleness": 0})
    with pytest.raises(ConfigError, match="a rollout file plays nothing"):
        TrainConfig.from_dict({"trajectories": "rows.parquet", "asynchronous": True})


def test_playing_runs_up_to_max_staleness_steps_ahead() -> None:
    """max_staleness 2 plays two steps ahead of learning (it played exactly one ahead whatever it said,
    so values above 1 did nothing), never past the run's last step."""
    from agentgym.trainers.loop.rollouts import StepRollout
    from agentgym.trainers.loop.serving import Serving

    played: list[int] = []

    class Recording(Serving):
        def _play(self, step: int) -> StepRollout:
            played.append(step)
            return StepRollout(rows=[], seconds=0.0)

    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "asynchronous": True, "max_staleness": 2,
                                    "steps": 5})
    with Recording(config, None, "tiny", main=False) as serving:
        serving.start_ahead(0, 2, 5)
        serving.rollout(1)
        serving.start_ahead(1, 2, 5)
        serving.rollout(2)
        serving.start_ahead(2, 2, 5)
        serving.start_ahead(3, 2, 5)
        serving.rollout(4)
    assert played == [1, 2, 3, 4]
