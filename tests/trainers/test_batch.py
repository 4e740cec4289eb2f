"""Rows -> advantages, sequences and micro-batches; packed logprobs equal unpacked ones."""

from __future__ import annotations

import math

import pytest
import torch

from agentgym.trainers.batch import (
    TrainSequence,
    collate,
    has_rollout_logprobs,
    packed_attention_mask,
    plan_micro_batches,
    row_advantages,
    to_sequences,
)


def test_advantages_are_relative_to_the_group(make_row) -> None:
    rows = [make_row(reward=1.0, group=0, index=0), make_row(reward=0.0, group=0, index=1),
            make_row(reward=0.3, group=1, index=0), make_row(reward=0.3, group=1, index=1),
            make_row(reward=0.5, group=2, index=0), make_row(reward=0.0, group=2, index=1),
            make_row(reward=1.0, group=2, index=2)]
    advantages = row_advantages(rows, "grpo_no_std")
    assert advantages[:4] == pytest.approx([0.5, -0.5, 0.0, 0.0])
    assert advantages[4:] == pytest.approx([0.0, -0.5, 0.5])  # a group of three: its own mean
    # GRPO scales by the group's sample std: (1 - 0.5) / std([1, 0]) = 0.5 / 0.7071
    assert row_advantages(rows, "grpo")[0] == pytest.approx(0.5 / math.sqrt(0.5), rel=1e-3)


def test_zero_variance_groups_are_skipped_when_asked(make_row) -> None:
    rows = [make_row(reward=0.3, group=0, index=0), make_row(reward=0.3, group=0, index=1),
            make_row(reward=1.0, group=1, index=0), make_row(reward=0.0, group=1, index=1)]
    assert row_advantages(rows, filter_zero_variance=True)[:2] == [None, None]
    assert row_advantages(rows, filter_zero_variance=False)[:2] == [0.0, 0.0]


def test_rows_of_one_episode_share_its_advantage(make_row) -> None:
    first, second = make_row(reward=1.0, index=0), make_row(reward=1.0, index=0, row_index=1)
    other = make_row(reward=0.0, index=1)
    advantages = row_advantages([first, second, other], "grpo_no_std")
    assert advantages == pytest.approx([0.5, 0.5, -0.5])


def test_rollout_logprobs_known_only_from_a_server(make_row) -> None:
    assert has_rollout_logprobs(make_row(logprob=-0.3))
    assert not has_rollout_logprobs(make_row(logprob=0.0))  # a model-free policy's row
    assert not has_rollout_logprobs(make_row(logprob=-0.3).model_copy(update={"retokenized": True}))


def test_sequences_skip_rows_that_cannot_teach(make_row) -> None:
    good = make_row()
    no_sampled = good.model_copy(update={"completion_mask": [0] * len(good.completion_mask)})
    no_prompt = good.model_copy(update={"prompt_ids": []})
    sequences = to_sequences([good, no_sampled, no_prompt, good], [1.0, 1.0, 1.0, None])
    assert len(sequences) == 1
    (sequence,) = sequences
    assert sequence.input_ids == good.prompt_ids + good.completion_ids
    assert sequence.loss_mask == good.completion_mask  # env tokens (mask 0) carry no loss
    assert sequence.has_rollout_logprobs and sequence.advantage == 1.0


def test_sequences_are_cut_to_the_max_length(make_row) -> None:
    row = make_row()
    keep = 3
    (sequence,) = to_sequences([row], [1.0], max_length=len(row.prompt_ids) + keep)
    assert sequence.completion_length == keep and len(sequence.loss_mask) == keep
    assert to_sequences([row], [1.0], max_length=len(row.prompt_ids)) == []


def test_packing_fills_bins_without_overflow() -> None:
    lengths = [7, 3, 9, 2, 5, 5, 12]
    bins = plan_micro_batches(lengths, pack=True, micro_batch_tokens=10, micro_batch_size=99)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    for b in bins:
        assert sum(lengths[i] for i in b) <= 10 or len(b) == 1  # only an oversized one stands alone
    padded = plan_micro_batches(lengths, pack=False, micro_batch_tokens=10, micro_batch_size=3)
    assert [len(b) for b in padded] == [3, 3, 1]


def test_packed_mask_keeps_sequences_apart() -> None:
    segments = torch.tensor([[0, 0, 1, 1, 1, -1]])
    mask = packed_attention_mask(segments)[0, 0]
    assert mask[1].tolist() == [True, True, False, False, False, False]
    assert mask[4].tolist() == [False, False, True, True, True, False]
    assert mask[5].tolist() == [False] * 5 + [True]  # padding sees only itself: no empty softmax row
    additive = packed_attention_mask(segments, dtype=torch.float32)[0, 0]
    assert additive[1, 2] == torch.finfo(torch.float32).min and additive[1, 0] == 0


def _reference_logprobs(model, sequence: TrainSequence) -> torch.Tensor:
    """Each sequence alone through the model: what packing and padding must reproduce."""
    logits = model(torch.tensor([sequence.input_ids])).logits[0].log_softmax(-1)
    p = sequence.prompt_length
    return torch.stack([logits[p + j - 1, sequence.input_ids[p + j]] for j in range(sequence.completion_length)])


@pytest.mark.parametrize("pack", [True, False])
def test_packed_and_padded_logprobs_match_each_sequence_alone(tiny_model: str, pack: bool) -> None:
    from transformers import AutoModelForCausalLM

    from agentgym.trainers.config import TrainConfig
    from agentgym.trainers.fsdp import FSDPTrainer

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    generator = torch.Generator().manual_seed(0)
    sequences = []
    for prompt, completion in [(5, 3), (9, 6), (4, 2), (7, 1)]:
        ids = torch.randint(0, 1000, (prompt + completion,), generator=generator).tolist()
        sequences.append(TrainSequence(ids, prompt, [1] * completion, [0.0] * completion, False, 1.0))
    batch = collate(sequences, pack=pack, pad_id=0)
    assert batch.input_ids.shape[0] == (1 if pack else len(sequences))
    trainer = FSDPTrainer.__new__(FSDPTrainer)  # only compute_logprobs is used: no optimiser needed
    trainer.config = TrainConfig(env_id="Bandit-LLM-v0")
    with torch.no_grad():
        logprobs, entropy = trainer.compute_logprobs(model, batch, with_entropy=True)
        for s, sequence in enumerate(sequences):
            n = sequence.completion_length
            torch.testing.assert_close(logprobs[s, :n], _reference_logprobs(model, sequence), atol=1e-5, rtol=0)
    assert entropy is not None and bool((entropy[batch.loss_mask > 0] > 0).all())
    # The LM head ran only where a completion token is predicted.
    assert batch.keep.numel() == (sum(s.completion_length for s in sequences) if pack
                                  else len({s.prompt_length + j - 1 for s in sequences
                                            for j in range(s.completion_length)}))
