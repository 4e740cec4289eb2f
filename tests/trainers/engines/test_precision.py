"""Mixed precision and chunked logprobs (issue 46): float32 masters under bf16 compute, and the
log-softmax of a 49k vocabulary never held for a whole micro-batch at once."""

from __future__ import annotations

import pytest
import torch
from trainer_helpers import learn, make_learner

from agentgym.trainers.engines.base import chunked_logprobs
from agentgym.trainers.learners.grpo import GRPOLearner
from agentgym.trainers.settings import TrainConfig


def test_chunked_logprobs_are_the_whole_log_softmax_and_so_are_their_gradients() -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(700, 50, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, 50, (700,), generator=generator)
    whole = logits.clone().requires_grad_()
    reference = (whole / 0.7).log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    (reference * torch.arange(700)).sum().backward()
    chunked = logits.clone().requires_grad_()
    values, entropy = chunked_logprobs(chunked, targets, temperature=0.7, with_entropy=True, chunk=64)
    (values * torch.arange(700)).sum().backward()
    torch.testing.assert_close(values.double(), reference.detach(), atol=1e-6, rtol=0)
    torch.testing.assert_close(chunked.grad, whole.grad, atol=1e-6, rtol=1e-5)  # float32 chunks, float64 logits
    probs = (logits / 0.7).softmax(-1)
    torch.testing.assert_close(entropy.double(), -(probs * probs.log()).sum(-1), atol=1e-5, rtol=0)
    assert not entropy.requires_grad


@pytest.mark.parametrize("backend", ["fsdp", "trl"])
def test_bf16_compute_keeps_float32_masters_that_take_updates_below_half_a_bf16_ulp(
        make_row, tiny_model: str, tmp_path, backend: str) -> None:
    """AdamW at lr 1e-5 moves each weight by about 1e-5. A weight near 0.02 has a bf16 ulp of 2^-13
    (1.2e-4): pure bf16 weights would round every such update away. The masters are float32: it stays."""
    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "model": tiny_model, "dtype": "bfloat16",
                                    "lr": 1e-5, "group_size": 2, "episodes_per_step": 2, "backend": backend,
                                    "out": str(tmp_path)})
    learner = make_learner(GRPOLearner, config)
    before = {name: p.detach().clone() for name, p in learner.engine.policy().named_parameters()}
    rows = [make_row("<answer>Dragon</answer>", reward=1.0, index=0), make_row("nope", reward=0.0, index=1)]
    assert learn(learner, rows)["updates"] == 1.0
    moved = 0
    for name, parameter in learner.engine.policy().named_parameters():
        assert parameter.dtype == torch.float32, name
        delta = (parameter.detach() - before[name]).abs()
        near = (before[name].abs() - 0.02).abs() < 0.005  # weights about 0.02
        moved += int(((delta > 5e-6) & (delta < 2e-5) & near).sum())
        # In bf16 those updates vanish: the rounded weights are the same before and after.
        lost = (before[name].bfloat16() == parameter.detach().bfloat16()) & near & (delta > 0)
        assert lost.sum() >= 0.9 * (near & (delta > 0)).sum()
    assert moved > 100
    weights = learner.engine.full_weights()
    assert all(value.dtype == torch.float32 for value in weights.values())  # what a checkpoint and a push get


def test_bf16_logprobs_are_close_to_float32_ones(make_row, tiny_model: str, tmp_path) -> None:
    from agentgym.trainers.engines.batch import collate, to_sequences

    rows = [make_row("<answer>Dragon</answer>", index=0), make_row("<answer>Phoenix and more</answer>", index=1)]
    batch = collate(to_sequences(rows, [1.0, 1.0]), pack=False)
    results = []
    for dtype in ("float32", "bfloat16"):
        config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "model": tiny_model, "dtype": dtype,
                                        "out": str(tmp_path / dtype)})
        with torch.no_grad():
            results.append(make_learner(GRPOLearner, config).engine.logprobs(batch)[0] * batch.loss_mask)
    assert (results[0] - results[1]).abs().max() < 0.05
    assert not torch.equal(results[0], results[1])  # bf16 did run
