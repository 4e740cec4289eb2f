"""The proof that it learns, and that an interrupted online run resumes to the same place.

Both play real episodes against the built-in server, which gets the new
weights after every step, and train the tiny random-init model on the CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym.trainers.loop.metrics import read_jsonl
from agentgym.trainers.loop.run import train
from agentgym.trainers.settings import TrainConfig


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_grpo_fsdp_defaults_learn_bandit_in_40_steps(tmp_path: Path) -> None:
    """`agentgym train --trainer grpo --backend fsdp --env Bandit-LLM-v0 --model tiny --steps 40`."""
    config = TrainConfig.from_dict({"trainer": "grpo", "backend": "fsdp", "env_id": "Bandit-LLM-v0", "model": "tiny",
                                    "steps": 40, "out": str(tmp_path / "run")})
    train(config, device="cpu")
    success = [record["success"] for record in read_jsonl(tmp_path / "run" / "metrics.jsonl")]
    assert len(success) == 40
    # After the format warm-up the model writes valid answers but picks an arm at chance.
    start = sum(success[:3]) / 3
    end = sum(success[-5:]) / 5
    assert start <= 0.75, success
    assert end >= 0.9, success


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_online_run_stopped_half_way_resumes_to_the_same_metrics(tmp_path: Path) -> None:
    def config(out: str, **changes: object) -> TrainConfig:
        return TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "out": str(tmp_path / out), "steps": 4,
                                      "group_size": 4, "episodes_per_step": 8, "format_warmup_episodes": 16,
                                      "format_warmup_steps": 10, "checkpoint_every": 100, "seed": 5, **changes})

    train(config("straight"), device="cpu")
    first = train(config("resumed"), stop_after=2, device="cpu")
    assert first.stopped_early
    train(config("resumed", resume=True), device="cpu")  # a fresh server, synced from the checkpoint
    want = read_jsonl(tmp_path / "straight" / "metrics.jsonl")
    got = read_jsonl(tmp_path / "resumed" / "metrics.jsonl")
    assert [r["step"] for r in got] == [1, 2, 3, 4]
    for a, b in zip(got, want):
        # Same episodes (seeded per step and turn) and the same learning, step by step.
        for key in ("success", "reward", "valid_actions", "sampled_tokens", "train_sequences"):
            assert a[key] == b[key], (a["step"], key)
        for key in ("loss", "grad_norm", "entropy"):
            assert (key in a) == (key in b), (a["step"], key)  # a step of filtered groups computes no loss
            if key in b:
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (a["step"], key)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_cpu_ranks_under_torchrun(tmp_path: Path, tiny_model: str) -> None:
    """FSDP2 across 2 gloo ranks: an online run with the built-in server on rank 0."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    script = str(Path(sys.executable).parent / "agentgym")  # the installed console script
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", script, "train", "--env", "Bandit-LLM-v0", "--steps", "2", "--group-size", "4", "--episodes-per-step", "8",
               "--out", str(tmp_path / "run"), "-s", "format_warmup_episodes=8", "-s", "format_warmup_steps=2",
               "-s", "filter_zero_variance=false"]  # every step trains, so every step pushes
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["train_sequences"] >= 0 and r["time/sync"] > 0 for r in records)
    assert (tmp_path / "run" / "final" / "model.safetensors").exists()
