"""Trajectory rows -> training tensors: advantages, sequences, packed or padded micro-batches.

A row is ``prompt_ids + completion_ids``; only completion tokens whose
``completion_mask`` is 1 (sampled by the policy) carry loss, env replies and
padding never do. Each micro-batch carries, besides the model's inputs, a
``[S, T]`` view of its S sequences' completion tokens (T the longest
completion): where each token's logit sits, its target id, its loss mask, the
server's logprob and its advantage (the episode's, plus its turn's with GiGPO). So the loss functions of
:mod:`agentgym.trainers.algorithms` see the same ``[B, T]`` shapes whether the
inputs were padded or packed.

Packing puts several sequences end to end in one row, with position ids that
restart at 0 for each; transformers then builds a block-diagonal causal mask
from the position ids (no attention across sequences, no padding). The logits
are computed only where a completion token is predicted (``logits_to_keep``),
which skips the LM head over long prompts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentgym.rollout.rows import TrajectoryRow, TurnSpan
from agentgym.trainers.algorithms import (
    AdvantageMethod,
    Baseline,
    anchor_advantages,
    discounted_returns,
    group_advantages,
    playing_baseline_advantages,
)

__all__ = [
    "MicroBatch",
    "TrainSequence",
    "collate",
    "filler_sequence",
    "packed_attention_mask",
    "plan_micro_batches",
    "playing_turn_advantages",
    "row_advantages",
    "to_sequences",
    "token_advantages",
    "turn_advantages",
    "turn_credit_share",
]


def _group_key(row: TrajectoryRow) -> tuple[str, int, int]:
    return row.env_id, row.seed, row.group_id


def row_advantages(rows: Sequence[TrajectoryRow], method: AdvantageMethod = "grpo",
                   *, filter_zero_variance: bool = False,
                   filter_uniform_success: bool = False) -> list[float | None]:
    """One advantage per row from its episode's reward against its group's.

    An episode split into several rows gives each of them its advantage. A
    group is every episode sharing (env, seed, group_id); groups may differ in
    size. With ``filter_zero_variance`` a group whose rewards are all equal
    gets ``None`` (skip it: its advantage is zero everywhere); with
    ``filter_uniform_success`` so does a group whose episodes all succeeded or
    all failed (DAPO's filter: whatever its rewards differ by, it says nothing
    about what wins).
    """
    episodes: dict[tuple[str, int, int], dict[str, float]] = defaultdict(dict)
    successes: dict[tuple[str, int, int], set[bool]] = defaultdict(set)
    for row in rows:
        episodes[_group_key(row)][row.episode_id] = row.reward
        successes[_group_key(row)].add(row.success)
    skipped = None if filter_zero_variance or filter_uniform_success else 0.0  # a filtered group's value
    by_episode: dict[str, float | None] = {}
    for key, members in episodes.items():
        rewards = torch.tensor(list(members.values()), dtype=torch.float64)
        equal_rewards = filter_zero_variance and float(rewards.max() - rewards.min()) <= 1e-6
        one_outcome = filter_uniform_success and len(successes[key]) == 1
        if len(members) < 2 or equal_rewards or one_outcome:
            by_episode.update(dict.fromkeys(members, skipped))
            continue
        advantages = group_advantages(rewards, len(members), method).tolist()
        by_episode.update(zip(members, advantages))
    return [by_episode[row.episode_id] for row in rows]


def _rows_by_episode(rows: Sequence[TrajectoryRow]) -> dict[str, list[TrajectoryRow]]:
    episodes: dict[str, list[TrajectoryRow]] = defaultdict(list)
    for row in rows:
        episodes[row.episode_id].append(row)
    return {key: sorted(parts, key=lambda r: r.row_index) for key, parts in episodes.items()}


def turn_advantages(rows: Sequence[TrajectoryRow], method: AdvantageMethod = "grpo",
                    discount: float = 0.95) -> dict[str, list[float]]:
    """GiGPO's turn-level advantage of every turn, by episode id.

    Within a group (as :func:`row_advantages` forms them), the turns taken from
    the same observation are compared by their discounted return-to-go
    (:func:`~agentgym.trainers.algorithms.anchor_advantages`). An episode whose
    turns cannot be matched to its tokens (an error between sampling and
    stepping leaves a turn with no reward) gets zeros: only its episode-level
    advantage.
    """
    anchors: dict[tuple[str, int, int], list[tuple[str, int, str, float]]] = defaultdict(list)
    result: dict[str, list[float]] = {}
    for episode_id, parts in _rows_by_episode(rows).items():
        first = parts[0]
        result[episode_id] = [0.0] * len(first.turn_rewards)
        if not _matched_turns(first, parts):
            continue
        returns = discounted_returns(first.turn_rewards, discount)
        for span in _episode_turns(parts):
            anchors[_group_key(first)].append((episode_id, span.turn, span.observation_hash, returns[span.turn]))
    for members in anchors.values():
        values = anchor_advantages([m[3] for m in members], [m[2] for m in members], method)
        for (episode_id, turn, _, _), value in zip(members, values):
            result[episode_id][turn] = value
    return result


def _episode_turns(parts: Sequence[TrajectoryRow]) -> list[TurnSpan]:
    return [span for part in parts for span in part.turns]


def _matched_turns(first: TrajectoryRow, parts: Sequence[TrajectoryRow]) -> bool:
    """Whether every turn the rows record has its reward (an error between sampling and stepping
    leaves the last turn without one)."""
    turns = [span.turn for span in _episode_turns(parts)]
    return turns == list(range(len(first.turn_rewards)))


def playing_turn_advantages(rows: Sequence[TrajectoryRow], method: AdvantageMethod = "grpo"
                            ) -> dict[str, list[float]]:
    """Each turn's advantage against the episodes of its group still playing at that turn, by episode id.

    :func:`~agentgym.trainers.algorithms.playing_baseline_advantages` on the
    turns' undiscounted returns-to-go, within each group as :func:`row_advantages`
    forms them. With ``method="grpo"`` a group's values are divided by the
    standard deviation of its episodes' rewards, as GRPO scales its episode
    advantages; the other methods leave them as they are. An episode whose turns
    cannot be matched to its tokens is left out: it keeps its episode advantage.
    """
    groups: dict[tuple[str, int, int], list[tuple[str, list[float], float]]] = defaultdict(list)
    for episode_id, parts in _rows_by_episode(rows).items():
        first = parts[0]
        if _matched_turns(first, parts):
            groups[_group_key(first)].append((episode_id, discounted_returns(first.turn_rewards, 1.0), first.reward))
    result: dict[str, list[float]] = {}
    for members in groups.values():
        values = playing_baseline_advantages([returns for _, returns, _ in members])
        scale = 1.0
        if method == "grpo" and len(members) > 1:
            spread = float(torch.tensor([reward for *_, reward in members], dtype=torch.float64).std())
            scale = 1.0 / (spread + 1e-4) if spread > 1e-6 else 1.0  # equal rewards: no scale to take
        for (episode_id, _, _), per_turn in zip(members, values):
            result[episode_id] = [value * scale for value in per_turn]
    return result


def turn_credit_share(per_turn: dict[str, list[float]]) -> float:
    """The share of turns with a turn-level advantage (:func:`turn_advantages`) other than 0.

    How much of a step GiGPO reaches: a turn gets credit of its own only when
    another turn of its group acted on the same observation and fared differently.
    """
    turns = [value for values in per_turn.values() for value in values]
    return sum(abs(value) > 1e-9 for value in turns) / max(len(turns), 1)


def token_advantages(rows: Sequence[TrajectoryRow], method: AdvantageMethod = "grpo", *,
                     filter_zero_variance: bool = False, filter_uniform_success: bool = False,
                     turn_weight: float = 0.0,
                     turn_discount: float = 0.95,
                     per_turn: dict[str, list[float]] | None = None,
                     baseline: Baseline = "episode") -> list[list[float] | None]:
    """One advantage per completion token of each row (None: skip the row).

    Every sampled token gets its episode's advantage (:func:`row_advantages`);
    with ``turn_weight`` > 0, GiGPO's combination: plus ``turn_weight`` times its
    turn's advantage (:func:`turn_advantages`). Env tokens get 0 (they carry no
    loss). With ``filter_zero_variance`` (or ``filter_uniform_success``) a group
    is skipped only when neither level has anything to teach: equal episode
    rewards (or outcomes) and no turn advantage.
    ``per_turn``: :func:`turn_advantages` of these rows, when the caller has it already.
    ``baseline="turn"``: each turn's tokens get, instead of the episode's advantage, the turn's
    against the episodes still playing (:func:`playing_turn_advantages`); the filters still
    decide by the episodes' rewards.
    """
    episode_level = row_advantages(rows, method, filter_zero_variance=filter_zero_variance,
                                   filter_uniform_success=filter_uniform_success)
    if per_turn is None:
        per_turn = turn_advantages(rows, method, turn_discount) if turn_weight > 0 else {}
    playing = playing_turn_advantages(rows, method) if baseline == "turn" else {}
    rescued: set[tuple[str, int, int]] = set()  # filtered groups with a turn-level signal
    values: list[list[float]] = []
    for row, advantage in zip(rows, episode_level):
        tokens = [0.0] * len(row.completion_ids)
        turns = per_turn.get(row.episode_id, [])
        own = playing.get(row.episode_id) if advantage is not None else None
        for span in row.turns:
            turn = span.turn
            extra = turn_weight * turns[turn] if turn < len(turns) else 0.0
            if advantage is None and abs(extra) > 1e-9:
                rescued.add(_group_key(row))
            base = own[turn] if own is not None and turn < len(own) else (advantage or 0.0)
            tokens[span.start:span.end] = [base + extra] * (span.end - span.start)
        values.append(tokens)
    return [None if advantage is None and _group_key(row) not in rescued else tokens
            for row, advantage, tokens in zip(rows, episode_level, values)]


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
