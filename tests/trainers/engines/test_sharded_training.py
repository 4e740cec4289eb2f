"""FSDP across processes: ``torchrun -m agentgym train`` on 2 gloo CPU ranks computes what one process does.

Both runs train offline on the same Parquet rows, through the real command
line (``python -m agentgym`` and real ``torchrun``); the final weights and
every step's metrics must agree to float32 round-off (the ranks sum their
gradients in another order than one process does). Beside plain GRPO: GRPO with a KL
to a reference (loaded from the run's reference folder on every rank, sharded) and
LoRA, PPO with a value head and with a separate critic (whose sharded body and
replicated head are clipped together), and DPO.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentgym.serve.launch import free_port
from agentgym.trainers.loop.metrics import read_jsonl

# Two epochs of two mini-batches (four optimiser steps a training step) of odd-sized
# micro-batches: the data order, the split over ranks and the loss normalisation all matter.
_FLAGS = ["--model", "tiny", "--steps", "2", "--group-size", "4", "--episodes-per-step", "8", "--seed", "3",
          "--lr", "1e-3", "-s", "mini_batches=2", "-s", "epochs=2", "-s", "micro_batch_size=3",
          "-s", "checkpoint_every=100"]


@pytest.fixture
def rollout_file(write_groups, tmp_path: Path) -> Path:
    """Four groups of four Bandit episodes with different rewards and lengths."""
    answers = [("<answer>Dragon</answer>", 1.0), ("<answer>Phoenix</answer>", 0.3),
               ("<answer>Dragon</answer> at once", 0.0), ("what?", -0.1)]
    return write_groups(tmp_path / "rows.parquet", [answers] * 4, logprob=-1.0)


def _train(command: list[str], out: Path, rollout_file: Path, extra: tuple[str, ...] = ()) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    full = [*command, "train", "--backend", "fsdp", "--trajectories", str(rollout_file), "--out", str(out), *_FLAGS,
            *extra]
    done = subprocess.run(full, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _weights(folder: str | Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(Path(folder) / "model.safetensors")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_gloo_ranks_match_one_process(rollout_file: Path, tmp_path: Path, tiny_model: str) -> None:
    _train([sys.executable, "-m", "agentgym"], tmp_path / "one", rollout_file)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "agentgym"]
    _train(torchrun, tmp_path / "two", rollout_file)

    one, two = read_jsonl(tmp_path / "one" / "metrics.jsonl"), read_jsonl(tmp_path / "two" / "metrics.jsonl")
    assert [r["step"] for r in two] == [r["step"] for r in one] == [1, 2]
    for got, want in zip(two, one):
        for key in ("train_sequences", "loss_tokens", "episodes", "reward"):
            assert got[key] == want[key], (got["step"], key)
        for key in ("loss", "grad_norm", "entropy", "clip_fraction", "ratio_mean", "is_weight_mean", "lr"):
            assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), (got["step"], key)
    assert one[0]["grad_norm"] > 0 and one[1]["ratio_mean"] != pytest.approx(1.0, abs=1e-7)

    single, sharded = _weights(tmp_path / "one" / "final"), _weights(tmp_path / "two" / "final")
    assert set(sharded) == set(single)
    initial = _weights(tiny_model)
    assert any(not torch.equal(single[name], initial[name]) for name in single)  # it did learn
    for name, value in sharded.items():
        torch.testing.assert_close(value, single[name], atol=1e-5, rtol=1e-4, msg=name)



# Each beside GRPO's flags above; compared on the metrics every trainer logs and on the final weights.
_OTHERS = {
    "grpo-kl-lora": ("-s", "kl_coef=0.05", "--lora", "-s", "epochs=1"),
    "ppo-head": ("--trainer", "ppo", "-s", "epochs=1"),
    "ppo-critic": ("--trainer", "ppo", "-s", "value_model=critic", "-s", "epochs=1"),
    "dpo": ("--trainer", "dpo", "-s", "epochs=1"),
}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(_OTHERS))
def test_two_gloo_ranks_match_one_process_for_every_trainer(name: str, rollout_file: Path, tmp_path: Path) -> None:
    extra = _OTHERS[name]
    _train([sys.executable, "-m", "agentgym"], tmp_path / "one", rollout_file, extra)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "agentgym"]
    _train(torchrun, tmp_path / "two", rollout_file, extra)
    one, two = read_jsonl(tmp_path / "one" / "metrics.jsonl"), read_jsonl(tmp_path / "two" / "metrics.jsonl")
    assert [r["step"] for r in two] == [r["step"] for r in one] == [1, 2]
    compared = [key for key in ("loss", "policy_loss", "value_loss", "kl", "grad_norm", "critic_grad_norm",
                                "reward_margin", "updates") if key in one[0]]
    assert "grad_norm" in compared and one[0]["updates"] > 0
    for got, want in zip(two, one):
        for key in compared:
            assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), (name, got["step"], key)
    single, sharded = _weights(tmp_path / "one" / "final"), _weights(tmp_path / "two" / "final")
    assert set(sharded) == set(single)
    for weight, value in sharded.items():
        torch.testing.assert_close(value, single[weight], atol=1e-5, rtol=1e-4, msg=f"{name}: {weight}")
    if name.startswith("ppo"):
        critics = [torch.load(tmp_path / run / "final" / "critic.pt", weights_only=True)["state_dict"]
                   for run in ("one", "two")]
        for weight, value in critics[1].items():
            torch.testing.assert_close(value, critics[0][weight], atol=1e-5, rtol=1e-4, msg=f"{name}: {weight}")
