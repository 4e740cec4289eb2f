"""What an engine trains on: rows as sequences, and sequences as packed or padded micro-batches.

A row is ``prompt_ids + completion_ids``; only completion tokens whose
``completion_mask`` is 1 (sampled by the policy) carry loss, env replies and
padding never do. Each micro-batch carries, besides the model's inputs, a
``[S, T]`` view of its S sequences' completion tokens (T the longest
completion): where each token's logit sits, its target id, its loss mask, the
server's logprob and its advantage. So the losses (:mod:`agentgym.trainers.losses`)
see the same ``[B, T]`` shapes whether the inputs were padded or packed.

Packing puts several sequences end to end in one row, with position ids that
restart at 0 for each, and a block-diagonal causal mask keeps them apart (no
attention across sequences, no padding). The logits are computed only where a
completion token is predicted (``logits_to_keep``), which skips the LM head over
long prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentgym.rollout.rows import TrajectoryRow

__all__ = [
    "MicroBatch",
    "TrainSequence",
    "collate",
    "filler_sequence",
    "packed_attention_mask",
    "plan_micro_batches",
    "to_sequences",
]


@dataclass(frozen=True)
class TrainSequence:
    """One row ready for training."""

    input_ids: list[int]
    """prompt + completion"""
    prompt_length: int
    loss_mask: list[int]
    """per completion token: 1 where the policy sampled it"""
    rollout_logprobs: list[float]
    """per completion token: the server's logprob (0 where unknown)"""
    has_rollout_logprobs: bool
    advantages: list[float]
    """per completion token (only the sampled ones matter)"""

    @property
    def completion_length(self) -> int:
        return len(self.input_ids) - self.prompt_length

    @property
    def loss_tokens(self) -> int:
        return sum(self.loss_mask)


def to_sequences(rows: Sequence[TrajectoryRow], advantages: Sequence[float | Sequence[float] | None],
                 max_length: int | None = None) -> list[TrainSequence]:
    """Sequences of the rows that can teach something.

    ``advantages`` has one entry per row: a number for every token of the row,
    a list with one per completion token (:func:`token_advantages`), or None.
    Skipped: rows with no advantage (filtered groups), no sampled token, or no
    prompt (nothing predicts their first token). ``max_length`` cuts a longer
    sequence's completion (the cut part carries no loss).
    """
    sequences = []
    for row, advantage in zip(rows, advantages):
        if advantage is None or not row.prompt_ids or not any(row.completion_mask):
            continue
        completion = list(row.completion_ids)
        mask = [int(m) for m in row.completion_mask]
        logprobs = [float(x) for x in row.logprobs] or [0.0] * len(completion)
        per_token = ([float(advantage)] * len(completion) if isinstance(advantage, (int, float))
                     else [float(x) for x in advantage])
        if max_length is not None and len(row.prompt_ids) + len(completion) > max_length:
            keep = max(max_length - len(row.prompt_ids), 0)
            completion, mask, logprobs, per_token = completion[:keep], mask[:keep], logprobs[:keep], per_token[:keep]
            if not any(mask):
                continue
        sequences.append(TrainSequence(
            input_ids=list(row.prompt_ids) + completion, prompt_length=len(row.prompt_ids),
            loss_mask=mask, rollout_logprobs=logprobs, has_rollout_logprobs=row.server_logprobs,
            advantages=per_token))
    return sequences


def filler_sequence(pad_id: int) -> TrainSequence:
    """A sequence with nothing to learn: a rank with no rows of its own runs it, since FSDP needs every
    rank to run as many forward and backward passes."""
    return TrainSequence(input_ids=[pad_id, pad_id], prompt_length=1, loss_mask=[0], rollout_logprobs=[0.0],
                         has_rollout_logprobs=False, advantages=[0.0])


def plan_micro_batches(lengths: Sequence[int], *, pack: bool, micro_batch_tokens: int,
                       micro_batch_size: int) -> list[list[int]]:
    """Indices of the sequences in each micro-batch.

    Packed: first-fit decreasing into bins of ``micro_batch_tokens`` tokens
    (a longer sequence gets a bin of its own). Padded: ``micro_batch_size``
    sequences of similar length per batch (sorted, to pad little).
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    if not pack:
        return [order[i:i + micro_batch_size] for i in range(0, len(order), micro_batch_size)]
    bins: list[list[int]] = []
    room: list[int] = []
    for index in order:
        for b, free in enumerate(room):
            if lengths[index] <= free:
                bins[b].append(index)
                room[b] -= lengths[index]
                break
        else:
            bins.append([index])
            room.append(micro_batch_tokens - lengths[index])
    return bins


@dataclass
class MicroBatch:
    """The model's inputs for one forward pass and the [S, T] view of its completion tokens."""

    input_ids: torch.Tensor
    """[R, L]"""
    position_ids: torch.Tensor
    """[R, L]; restart at 0 for each packed sequence"""
    attention_mask: torch.Tensor | None
    """[R, L] when padded; None when packed (``segment_ids`` say which sequence each token is in)"""
    segment_ids: torch.Tensor
    """[R, L] which sequence of its row each token belongs to (padding: -1)"""
    keep: torch.Tensor
    """[K] positions whose logits are needed (logits at p predict the token at p + 1)"""
    token_index: torch.Tensor
    """[S, T] index into the flattened [R * K] kept logits of each completion token's prediction"""
    target_ids: torch.Tensor
    """[S, T]"""
    loss_mask: torch.Tensor
    """[S, T] float, 1 on policy-sampled tokens"""
    rollout_logprobs: torch.Tensor
    """[S, T]"""
    has_rollout_logprobs: torch.Tensor
    """[S] bool"""
    advantages: torch.Tensor
    """[S, T] per completion token"""

    @property
    def num_sequences(self) -> int:
        return int(self.advantages.shape[0])

    @property
    def num_tokens(self) -> int:
        """Tokens the model reads (padding excluded)."""
        if self.attention_mask is None:
            return int(self.input_ids.numel())
        return int(self.attention_mask.sum())

    def to(self, device: torch.device | str) -> MicroBatch:
        moved = {name: (value.to(device) if isinstance(value, torch.Tensor) else value)
                 for name, value in self.__dict__.items()}
        return MicroBatch(**moved)


def packed_attention_mask(segment_ids: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The [R, 1, L, L] causal mask that keeps packed sequences apart.

    Boolean (True: may attend) when ``dtype`` is None, as SDPA takes it;
    otherwise additive (0 or the dtype's minimum), as eager attention adds it.
    Built directly: transformers' own packed-mask path (from position ids)
    costs more than the forward pass of a small model on the CPU.
    """
    length = segment_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=segment_ids.device).tril()
    same = segment_ids.unsqueeze(-1) == segment_ids.unsqueeze(-2)
    allowed = (same & causal & (segment_ids >= 0).unsqueeze(-1)).unsqueeze(1)
    # A padding row attends to itself, so no softmax row is empty (NaN).
    allowed |= torch.eye(length, dtype=torch.bool, device=segment_ids.device)
    if dtype is None:
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(dtype).min)


def _layout(sequences: Sequence[TrainSequence], pack: bool) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Token rows of the micro-batch, and (row, start) of each sequence in them."""
    if pack:
        row: list[int] = []
        places = []
        for sequence in sequences:
            places.append((0, len(row)))
            row += sequence.input_ids
        return [row], places
    return [list(s.input_ids) for s in sequences], [(i, 0) for i in range(len(sequences))]


def collate(sequences: Sequence[TrainSequence], *, pack: bool, pad_id: int = 0) -> MicroBatch:
    """Tensors of one micro-batch (see :class:`MicroBatch`)."""
    rows, places = _layout(sequences, pack)
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    segment_ids = torch.full((len(rows), width), -1, dtype=torch.long)
    for r, ids in enumerate(rows):
        input_ids[r, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[r, :len(ids)] = 1
    for s, (sequence, (r, start)) in enumerate(zip(sequences, places)):
        position_ids[r, start:start + len(sequence.input_ids)] = torch.arange(len(sequence.input_ids))
        segment_ids[r, start:start + len(sequence.input_ids)] = s
    # Logit positions: the one before each completion token, in its row.
    needed = sorted({start + sequence.prompt_length + j - 1
                     for sequence, (r, start) in zip(sequences, places)
                     for j in range(sequence.completion_length)})
    column = {position: k for k, position in enumerate(needed)}
    span = max(s.completion_length for s in sequences)
    shape = (len(sequences), span)
    token_index = torch.zeros(shape, dtype=torch.long)
    target_ids = torch.zeros(shape, dtype=torch.long)
    loss_mask = torch.zeros(shape, dtype=torch.float32)
    rollout = torch.zeros(shape, dtype=torch.float32)
    advantages = torch.zeros(shape, dtype=torch.float32)
    for s, (sequence, (r, start)) in enumerate(zip(sequences, places)):
        n = sequence.completion_length
        first = start + sequence.prompt_length - 1
        token_index[s, :n] = torch.tensor([r * len(needed) + column[first + j] for j in range(n)])
        target_ids[s, :n] = torch.tensor(sequence.input_ids[sequence.prompt_length:])
        loss_mask[s, :n] = torch.tensor(sequence.loss_mask, dtype=torch.float32)
        rollout[s, :n] = torch.tensor(sequence.rollout_logprobs, dtype=torch.float32)
        advantages[s, :n] = torch.tensor(sequence.advantages, dtype=torch.float32)
    return MicroBatch(
        input_ids=input_ids, position_ids=position_ids, attention_mask=None if pack else attention_mask,
        segment_ids=segment_ids,
        keep=torch.tensor(needed, dtype=torch.long), token_index=token_index, target_ids=target_ids,
        loss_mask=loss_mask, rollout_logprobs=rollout,
        has_rollout_logprobs=torch.tensor([s.has_rollout_logprobs for s in sequences]),
        advantages=advantages)

