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
                       micro_batch_size: int, rows: Sequence[int] | None = None) -> list[list[int]]:
    """Indices of the items in each micro-batch (an item is a sequence, or ``rows[i]`` sequences of at
    most ``lengths[i]`` tokens each, as a DPO pair is).

    Packed: first-fit decreasing into bins of ``micro_batch_tokens`` tokens. Padded: items of similar
    length (sorted, to pad little), at most ``micro_batch_size`` of them and at most
    ``micro_batch_tokens`` tokens padding included. An item over the token budget gets a batch of its own.
    """
    rows = rows if rows is not None else [1] * len(lengths)
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    if not pack:
        batches: list[list[int]] = []
        width = used_rows = 0
        for index in order:  # longest first: a batch's first item sets its padded width
            fits = (used_rows + rows[index]) * width <= micro_batch_tokens
            if batches and len(batches[-1]) < micro_batch_size and fits:
                batches[-1].append(index)
                used_rows += rows[index]
            else:
                batches.append([index])
                width, used_rows = lengths[index], rows[index]
        return batches
    bins: list[list[int]] = []
    room: list[int] = []
    for index in order:
        size = lengths[index] * rows[index]
        for b, free in enumerate(room):
            if size <= free:
                bins[b].append(index)
                room[b] -= size
                break
        else:
            bins.append([index])
            room.append(micro_batch_tokens - size)
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
    """[K] positions whose logits are needed (logits at p predict the token at p + 1): those that
    predict a sampled token, and each sequence's last position"""
    token_index: torch.Tensor
    """[S, T] index into the flattened [R * K] kept positions of each completion token's prediction
    (a token the policy did not sample points at its sequence's last position: it carries no loss)"""
    kept_targets: torch.Tensor
    """[R * K] the token each kept position predicts (its row's next token; 0 past a row's end)"""
    final_index: torch.Tensor
    """[S] index into the flattened [R * K] kept positions of each sequence's last token (what reads
    the whole sequence: PPO's value of the state after it)"""
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
    """Token rows of the micro-batch, and (row, start) of each sequence in them. Padded rows are
    padded on the left, so that every row's completion ends at the last column: the positions whose
    logits are kept then line up across rows."""
    if pack:
        row: list[int] = []
        places = []
        for sequence in sequences:
            places.append((0, len(row)))
            row += sequence.input_ids
        return [row], places
    width = max(len(s.input_ids) for s in sequences)
    return [list(s.input_ids) for s in sequences], [(i, width - len(s.input_ids)) for i, s in enumerate(sequences)]


def collate(sequences: Sequence[TrainSequence], *, pack: bool, pad_id: int = 0) -> MicroBatch:
    """Tensors of one micro-batch (see :class:`MicroBatch`)."""
    rows, places = _layout(sequences, pack)
    width = max(start + len(s.input_ids) for s, (_, start) in zip(sequences, places))
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    segment_ids = torch.full((len(rows), width), -1, dtype=torch.long)
    for s, (sequence, (r, start)) in enumerate(zip(sequences, places)):
        end = start + len(sequence.input_ids)
        input_ids[r, start:end] = torch.tensor(sequence.input_ids, dtype=torch.long)
        attention_mask[r, start:end] = 1
        position_ids[r, start:end] = torch.arange(len(sequence.input_ids))
        segment_ids[r, start:end] = s
    # Logit positions: the one before each sampled token, and each sequence's last, in its row.
    needed = sorted({start + sequence.prompt_length + j - 1
                     for sequence, (r, start) in zip(sequences, places)
                     for j, sampled in enumerate(sequence.loss_mask) if sampled}
                    | {start + len(sequence.input_ids) - 1 for sequence, (r, start) in zip(sequences, places)})
    column = {position: k for k, position in enumerate(needed)}
    span = max(s.completion_length for s in sequences)
    shape = (len(sequences), span)
    token_index = torch.zeros(shape, dtype=torch.long)
    final_index = torch.zeros(len(sequences), dtype=torch.long)
    target_ids = torch.zeros(shape, dtype=torch.long)
    loss_mask = torch.zeros(shape, dtype=torch.float32)
    rollout = torch.zeros(shape, dtype=torch.float32)
    advantages = torch.zeros(shape, dtype=torch.float32)
    for s, (sequence, (r, start)) in enumerate(zip(sequences, places)):
        n = sequence.completion_length
        first = start + sequence.prompt_length - 1
        final_index[s] = r * len(needed) + column[start + len(sequence.input_ids) - 1]
        token_index[s, :n] = torch.tensor([r * len(needed) + column[first + j] if sampled else int(final_index[s])
                                           for j, sampled in enumerate(sequence.loss_mask)])
        target_ids[s, :n] = torch.tensor(sequence.input_ids[sequence.prompt_length:])
        loss_mask[s, :n] = torch.tensor(sequence.loss_mask, dtype=torch.float32)
        rollout[s, :n] = torch.tensor(sequence.rollout_logprobs, dtype=torch.float32)
        advantages[s, :n] = torch.tensor(sequence.advantages, dtype=torch.float32)
    keep = torch.tensor(needed, dtype=torch.long)
    following = torch.cat([input_ids[:, 1:], torch.zeros((len(rows), 1), dtype=torch.long)], dim=1)
    return MicroBatch(
        input_ids=input_ids, position_ids=position_ids, attention_mask=None if pack else attention_mask,
        segment_ids=segment_ids, keep=keep, token_index=token_index,
        kept_targets=following[:, keep].reshape(-1), final_index=final_index, target_ids=target_ids, loss_mask=loss_mask, rollout_logprobs=rollout,
        has_rollout_logprobs=torch.tensor([s.has_rollout_logprobs for s in sequences]),
        advantages=advantages)
