"""A fake env and small helpers shared by the tests (a module of its own: conftest names collide)."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, TypeVar

import gymnasium as gym

from agentgym.core import Outcome, TextEnv
from agentgym.parsing import extract_answer, normalize

__all__ = ["EchoEnv", "SlowResetEnv", "ThreadNotingEnv", "make_game", "played_moves", "refuses", "write_jsonl", "write_parquet"]

_Env = TypeVar("_Env", bound=TextEnv)


def make_game(env_id: str, cls: type[_Env], **kwargs: object) -> _Env:
    """``gym.make(env_id).unwrapped``, checked to be a ``cls``."""
    env = gym.make(env_id, **kwargs).unwrapped
    assert isinstance(env, cls)
    return env


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    """Write ``rows`` one a line (a ``str`` row as it is, so tests can write broken lines)."""
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n"
                            for row in rows))
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Write ``rows`` (dicts) as a Parquet table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def refuses(port: int) -> bool:
    """Whether 127.0.0.1:``port`` refuses a connection (the server on it is really gone)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return False
    except ConnectionRefusedError:
        return True


class EchoEnv(TextEnv):
    """The smallest env: say the secret word (drawn from the seed) to win."""

    WORDS = ("apple", "river", "stone", "cloud")

    def __init__(self, max_turns: int = 3, format_penalty: float = 0.5,
                 render_mode: str | None = None) -> None:
        super().__init__(max_turns=max_turns, format_penalty=format_penalty, render_mode=render_mode)
        self.secret = ""

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        self.secret = self.WORDS[int(self.np_random.integers(len(self.WORDS)))]
        return f"The secret word is {self.secret}. Say it."

    def _play(self, action: str) -> Outcome:
        answer = extract_answer(action)
        if answer is None:
            return Outcome("Write <answer>word</answer>.", action_valid=False)
        won = normalize(answer) == self.secret
        return Outcome("Right." if won else "Wrong.", float(won), terminated=won, success=won)

    def _describe(self) -> str:
        return "Repeat the secret word inside <answer></answer>."

    def render_text(self) -> str:
        return f"secret={self.secret} turn={self.turn}"


class SlowResetEnv(EchoEnv):
    """:class:`EchoEnv` whose reset takes ``reset_s`` seconds; every instance is kept, to see which closed."""

    instances: list[SlowResetEnv] = []
    reset_s = 0.5

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.was_reset = self.closed = False
        SlowResetEnv.instances.append(self)

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        time.sleep(self.reset_s)
        self.was_reset = True
        return super()._new_episode(options)

    def close(self) -> None:
        self.closed = True
        super().close()


class ThreadNotingEnv(EchoEnv):
    """:class:`EchoEnv` noting the thread each reset and step ran on; steps take ``step_s``
    seconds, waiting or (``step_computes``) computing."""

    calls: list[tuple[str, str]] = []
    step_s = 0.0
    step_computes = False

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        ThreadNotingEnv.calls.append(("reset", threading.current_thread().name))
        return super()._new_episode(options)

    def _play(self, action: str) -> Outcome:
        ThreadNotingEnv.calls.append(("step", threading.current_thread().name))
        if self.step_computes:
            end = time.thread_time() + self.step_s
            while time.thread_time() < end:
                pass
        else:
            time.sleep(self.step_s)
        return super()._play(action)


def played_moves(rows: list[Any]) -> dict[tuple[int, int], list[str]]:
    """What each episode of a rollout played: its assistant messages, by (group, index in group)."""
    return {row.key: [message.content for message in row.messages if message.role == "assistant"] for row in rows}
