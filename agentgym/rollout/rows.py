"""The trajectory row: one training sequence of one episode, token by token.

``prompt_ids`` is the conversation up to the first assistant turn;
``completion_ids`` is everything after it, the policy's sampled tokens
(``completion_mask`` 1, with their ``logprobs``) interleaved with the env's
replies rendered by the chat template (mask 0, logprob 0). An episode is
usually one row; it becomes several (``row_index`` 0, 1, ...) only when the
token prefix could not be kept (see :mod:`agentgym.rollout.chat`).
A failed episode is a row too, with ``error`` set: never silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ARROW_SCHEMA", "Message", "TrajectoryRow", "first_rows"]


class Message(BaseModel):
    """One chat message, kept for reading (training uses the ids)."""

    role: str
    content: str


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
])
