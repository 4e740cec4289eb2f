"""A reward model folder (the tiny model with a fixed score head) for the reward model tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agentgym.rewards.model import RewardModelReward


@pytest.fixture(scope="package")
def reward_folder(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with a fixed score head (weights 0.01 * (i mod 7 - 3)): a reward model folder."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=1,
                                                               pad_token_id=tokenizer.pad_token_id)
    with torch.no_grad():
        hidden = model.score.weight.shape[1]
        model.score.weight.copy_(0.01 * (torch.arange(hidden) % 7 - 3).float().unsqueeze(0))
    folder = tmp_path_factory.mktemp("reward-model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="package")
def in_process(reward_folder: Path) -> RewardModelReward:
    return RewardModelReward(str(reward_folder), device="cpu", batch_size=2)
