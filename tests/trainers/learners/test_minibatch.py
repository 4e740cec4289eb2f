"""The one mini-batch loop every learner runs (issue 47, defects 5 and 6; worked by hand)."""

from __future__ import annotations

import pytest
from trainer_helpers import learn, make_learner

from agentgym.trainers.engines.base import lr_factor
from agentgym.trainers.learners.grpo import GRPOLearner
from agentgym.trainers.learners.minibatch import even_split
from agentgym.trainers.settings import TrainConfig


def test_a_step_splits_into_even_mini_batches_never_an_empty_one() -> None:
    # Before: ceil(9 / 4) = 3 a part, so [3, 3, 3, 0], an update without gradient that moved the schedule.
    assert [len(part) for part in even_split(list(range(9)), 4)] == [3, 2, 2, 2]
    assert [len(part) for part in even_split(list(range(3)), 4)] == [1, 1, 1]  # never more parts than items
    assert even_split(list(range(8)), 4) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert even_split([], 4) == []


def test_the_schedule_spans_the_runs_training_steps_whatever_the_updates_a_step() -> None:
    """40 steps, 4 mini-batches, cosine to 0.1: the last step's factor is 0.1. Counted in optimiser
    steps (before), the schedule spanned 160 while DPO took 40 (one a step): at its last step
    0.1 + 0.9 x (1 + cos(pi x 39 / 160)) / 2 = 0.874."""
    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "steps": 40, "mini_batches": 4,
                                    "lr_schedule": "cosine", "min_lr_ratio": 0.1})
    assert lr_factor(config, 0) == 1.0
    assert lr_factor(config, 39) == pytest.approx(0.1)
    assert lr_factor(config, 20) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + __import__("math").cos(
        __import__("math").pi * 20 / 39)))


def test_nine_sequences_in_four_mini_batches_take_four_updates_that_each_learn(make_row, tiny_model: str,
                                                                                tmp_path) -> None:
    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "model": tiny_model, "group_size": 3,
                                    "episodes_per_step": 9, "mini_batches": 4, "out": str(tmp_path)})
    learner = make_learner(GRPOLearner, config)
    rows = [make_row(answer, reward=reward, group=g, index=i, seed=g)
            for g in range(3) for i, (answer, reward) in
            enumerate([("<answer>Dragon</answer>", 1.0), ("nope", 0.0), ("<answer>Phoenix</answer>", 0.5)])]
    metrics = learn(learner, rows)
    assert metrics["train_sequences"] == 9 and metrics["updates"] == 4.0
    assert learner.engine.optimizer_steps == 4 and learner.version == 1 and learner.engine.schedule_step == 1
    assert metrics["grad_norm"] > 0
