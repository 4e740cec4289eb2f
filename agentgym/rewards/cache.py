"""A cache of scores by key: an in-memory LRU, optionally backed by a SQLite file.

Rewards that cost a request (an LLM judge) keep what they computed here, so
the same answer is scored once per run, or once ever with a file::

    cache = ScoreCache(size=4096, path="judge-cache.sqlite")
    cache.put("key", 0.7, "Score: 7/10")
    cache.get("key")                 # CachedScore(score=0.7, detail='Score: 7/10', parsed=True)
    cache.close()

Thread-safe. The file may be shared by processes (SQLite locks it).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict
from typing import NamedTuple

from agentgym.errors import ConfigError

__all__ = ["CachedScore", "ScoreCache"]

_SCHEMA = ("CREATE TABLE IF NOT EXISTS scores "
           "(key TEXT PRIMARY KEY, score REAL NOT NULL, detail TEXT NOT NULL, parsed INTEGER NOT NULL)")


class CachedScore(NamedTuple):
    """A cached score, its text detail (e.g. the judge's reply), and whether it was parsed."""

    score: float
    detail: str
    parsed: bool = True


class ScoreCache:
    """Scores by key: ``size`` entries in memory (0: none), all of them in ``path`` if given."""

    def __init__(self, size: int = 4096, path: str | os.PathLike[str] | None = None) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ConfigError(f"cache_size must be an integer >= 0, got {size!r}.")
        self.size = size
        self.path = None if path is None else os.fspath(path)
        self._memory: OrderedDict[str, CachedScore] = OrderedDict()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if self.path is not None:
            self._open(self.path)

    def _open(self, path: str) -> None:
        try:
            # One connection, used under our lock from whichever thread scores.
            self._db = sqlite3.connect(path, check_same_thread=False)
            with self._db:
                self._db.execute(_SCHEMA)
        except sqlite3.Error as error:
            self.close()
            raise ConfigError(
                f"The cache file {path!r} cannot be used as a SQLite database ({error}); "
                "pass another cache_path."
            ) from error

    def get(self, key: str) -> CachedScore | None:
        """The cached entry of ``key``, or None."""
        with self._lock:
            hit = self._memory.get(key)
            if hit is not None:
                self._memory.move_to_end(key)
                return hit
            if self._db is None:
                return None
            row = self._db.execute("SELECT score, detail, parsed FROM scores WHERE key = ?",
                                   (key,)).fetchone()
            if row is None:
                return None
            entry = CachedScore(float(row[0]), str(row[1]), bool(row[2]))
            self._remember(key, entry)
            return entry

    def put(self, key: str, score: float, detail: str = "", *, parsed: bool = True) -> None:
        """Keep ``score`` (with its ``detail``) for ``key``."""
        entry = CachedScore(float(score), detail, parsed)
        with self._lock:
            self._remember(key, entry)
            if self._db is not None:
                with self._db:
                    # SQLite stores UTF-8: a lone surrogate in a reply is replaced, not an error.
                    text = detail.encode("utf-8", "replace").decode("utf-8")
                    self._db.execute("INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?)",
                                     (key, entry.score, text, int(parsed)))

    def _remember(self, key: str, entry: CachedScore) -> None:
        if self.size == 0:
            return
        self._memory[key] = entry
        self._memory.move_to_end(key)
        while len(self._memory) > self.size:
            self._memory.popitem(last=False)

    def __len__(self) -> int:
        """Entries held in memory."""
        return len(self._memory)

    def close(self) -> None:
        """Close the file (the memory part stays usable)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
