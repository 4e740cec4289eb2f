"""The trajectory row: one training sequence of one episode, token by token.

``prompt_ids`` is the conversation up to the first assistant turn;
``completion_ids`` is everything after it, the policy's sampled tokens
(``completion_mask`` 1, with their ``logprobs``) interleaved with the env's
replies rendered by the chat template (mask 0, logprob 0). An episode is
usually one row; it becomes several (``row_index`` 0, 1, ...) only when the
token prefix could not be kept (see :mod:`agentgym.rollout.chat`).
A failed episode is a row too, with ``error`` set: never silently dropped.

Each row lists its ``turns``: where each turn's action tokens lie in
``completion_ids``, which turn of the episode it is (an index into
``turn_rewards``, numbered across the episode's rows) and a hash of the
observation it acted on, so turn-level credit needs no reconstruction from
the mask. ``server_logprobs`` says whether ``logprobs`` are the server's.

``tokenizer`` names the tokenizer the ids are in (see :mod:`agentgym.rollout.tokenizers`):
a trainer refuses rows of another tokenizer than its model's, and ``agentgym view --tokens``
decodes with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ARROW_SCHEMA", "DERIVED_COLUMNS", "Message", "OPTIONAL_COLUMNS", "TrajectoryRow", "TurnSpan",
           "derive_turns", "first_rows", "observation_hash"]


def observation_hash(text: str) -> str:
    """A short stable hash of an observation's text (16 hex digits), to group equal states.

    >>> observation_hash("#P_O#")  # doctest: +SKIP
    '3f0c...'
    """
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


class Message(BaseModel):
    """One chat message, kept for reading (training uses the ids)."""

    role: str
    content: str


class TurnSpan(BaseModel):
    """Where one turn's action tokens lie in a row's ``completion_ids``."""

    model_config = ConfigDict(extra="forbid")

    #: the turn's number in the episode, from 0 (indexes ``TrajectoryRow.turn_rewards``; in a
    #: failed episode whose env raised on the last turn's step, that turn has no reward)
    turn: int
    #: index in ``completion_ids`` of the turn's first action token
    start: int
    #: one past its last action token (the eos the model sampled included; the ids that
    #: close the turn and the env's reply after it not)
    end: int
    #: ``observation_hash`` of the observation this turn acted on (turn 0: the first one)
    observation_hash: str


class TrajectoryRow(BaseModel):
    """One training sequence of one episode."""

    model_config = ConfigDict(extra="forbid")

    episode_id: str
    group_id: int
    index_in_group: int
    row_index: int = 0
    env_id: str
    seed: int
    prompt_ids: list[int] = Field(default_factory=list)
    completion_ids: list[int] = Field(default_factory=list)
    completion_mask: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    reward: float = 0.0
    turn_rewards: list[float] = Field(default_factory=list)
    success: bool = False
    num_turns: int = 0
    terminated: bool = False
    truncated: bool = False
    #: why the episode ended: "terminated", "turn_limit", "turn_budget", "context_limit", "timeout", "error"
    stop_reason: str = ""
    invalid_actions: int = 0
    policy_version: int | None = None
    #: True when ids were made by tokenizing text (chat mode), not taken from the server
    retokenized: bool = False
    error: str | None = None
    duration_s: float = 0.0
    messages: list[Message] = Field(default_factory=list)
    #: the turns whose action tokens lie in this row, in order; a turn played but not learned
    #: (mask 0 over it: DAgger's played-only moves) is listed too. Empty without token ids.
    turns: list[TurnSpan] = Field(default_factory=list)
    #: True when ``logprobs`` of the sampled tokens are the server's (False for model-free
    #: policies, chat mode, expert-replaced turns: zeros there)
    server_logprobs: bool = False
    #: the tokenizer of the ids, ``NAME@HASH`` (:class:`agentgym.rollout.tokenizers.TokenizerId`);
    #: None: unknown (a file written before rows recorded it, or rows of a model-free policy
    #: written without a tokenizer)
    tokenizer: str | None = None

    @property
    def key(self) -> tuple[int, int]:
        """Which episode of the run this is: (group, index in group)."""
        return self.group_id, self.index_in_group

    def to_record(self) -> dict[str, Any]:
        return self.model_dump()


def first_rows(rows: Iterable[TrajectoryRow]) -> list[TrajectoryRow]:
    """One row per episode (its first: ``row_index`` 0), in the order given."""
    return [row for row in rows if row.row_index == 0]


ARROW_SCHEMA = pa.schema([
    ("episode_id", pa.string()),
    ("group_id", pa.int64()),
    ("index_in_group", pa.int64()),
    ("row_index", pa.int64()),
    ("env_id", pa.string()),
    ("seed", pa.int64()),
    ("prompt_ids", pa.list_(pa.int32())),
    ("completion_ids", pa.list_(pa.int32())),
    ("completion_mask", pa.list_(pa.int8())),
    ("logprobs", pa.list_(pa.float32())),
    ("reward", pa.float64()),
    ("turn_rewards", pa.list_(pa.float64())),
    ("success", pa.bool_()),
    ("num_turns", pa.int64()),
    ("terminated", pa.bool_()),
    ("truncated", pa.bool_()),
    ("stop_reason", pa.string()),
    ("invalid_actions", pa.int64()),
    ("policy_version", pa.int64()),
    ("retokenized", pa.bool_()),
    ("error", pa.string()),
    ("duration_s", pa.float64()),
    ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
    ("turns", pa.list_(pa.struct([("turn", pa.int64()), ("start", pa.int64()), ("end", pa.int64()),
                                  ("observation_hash", pa.string())]))),
    ("server_logprobs", pa.bool_()),
    ("tokenizer", pa.string()),
])

#: the columns files written before rows kept their turns lack; :func:`derive_turns` fills them
DERIVED_COLUMNS = ("turns", "server_logprobs")
#: the columns files written before rows recorded them lack; read as null (unknown)
OPTIONAL_COLUMNS = ("tokenizer",)


def derive_turns(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fill ``turns`` and ``server_logprobs`` of records from a file written without them.

    Done once, on read, for such files only: the turns are the runs of 1 in
    ``completion_mask``, numbered across an episode's rows in ``row_index``
    order; each turn's observation is the last user message before the
    matching assistant message; ``server_logprobs`` is ``not retokenized`` and
    any non-zero logprob on a sampled token. A turn played but not learned
    (mask 0) cannot be seen this way: such old rows list only their learned turns.
    """
    by_episode: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for record in records:
        key = (record["episode_id"], record["group_id"], record["index_in_group"])
        by_episode.setdefault(key, []).append(record)
    for rows in by_episode.values():
        turn = 0
        for record in sorted(rows, key=lambda r: r["row_index"]):
            observations = _observations(record.get("messages") or [])
            spans = []
            for start, end in _runs_of_one(record["completion_mask"]):
                seen = observations[turn] if turn < len(observations) else ""
                spans.append({"turn": turn, "start": start, "end": end, "observation_hash": observation_hash(seen)})
                turn += 1
            record["turns"] = spans
            record["server_logprobs"] = not record["retokenized"] and any(
                logprob != 0.0 for logprob, sampled in zip(record["logprobs"], record["completion_mask"]) if sampled)
    return records


def _runs_of_one(mask: list[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for index, sampled in enumerate(mask):
        if sampled and start is None:
            start = index
        elif not sampled and start is not None:
            spans.append((start, index))
            start = None
    if start is not None:
        spans.append((start, len(mask)))
    return spans


def _observations(messages: list[dict[str, str]]) -> list[str]:
    """The last user message before each assistant message."""
    seen, last = [], ""
    for message in messages:
        if message["role"] == "assistant":
            seen.append(last)
        elif message["role"] == "user":
            last = message["content"]
    return seen
