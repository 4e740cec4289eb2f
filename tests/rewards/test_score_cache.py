"""ScoreCache: an LRU in memory, a SQLite file that outlives it, thread safety."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.rewards.cache import CachedScore, ScoreCache


def test_the_least_recently_used_entry_goes_first() -> None:
    cache = ScoreCache(size=2)
    cache.put("a", 0.1, "A")
    cache.put("b", 0.2, "B")
    assert cache.get("a") == CachedScore(0.1, "A", True)  # "a" is now the most recent
    cache.put("c", 0.3, "C", parsed=False)
    assert cache.get("b") is None
    assert cache.get("a") is not None and cache.get("c") == CachedScore(0.3, "C", False)
    assert len(cache) == 2


def test_size_zero_keeps_nothing_in_memory() -> None:
    cache = ScoreCache(size=0)
    cache.put("a", 1.0, "A")
    assert cache.get("a") is None and len(cache) == 0


def test_a_file_outlives_the_cache_and_is_read_back(tmp_path: Path) -> None:
    path = tmp_path / "scores.sqlite"
    first = ScoreCache(size=0, path=path)
    first.put("k", 0.75, "Score: 3/4 \ud800", parsed=True)  # a lone surrogate is stored, replaced
    first.put("k", 0.5, "Score: 1/2")  # the last write wins
    first.close()
    second = ScoreCache(size=4, path=path)
    assert second.get("k") == CachedScore(0.5, "Score: 1/2", True)
    assert second.get("missing") is None
    second.close()
    assert second.get("k") is not None  # still in memory after the file is closed


def test_a_file_that_is_not_a_database_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database " * 100)
    with pytest.raises(ConfigError, match="cannot be used as a SQLite database"):
        ScoreCache(path=path)


def test_threads_can_share_one_cache(tmp_path: Path) -> None:
    cache = ScoreCache(size=1000, path=tmp_path / "s.sqlite")

    def work(n: int) -> CachedScore | None:
        cache.put(f"k{n}", n / 100, str(n))
        return cache.get(f"k{n}")

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert [entry.score for entry in pool.map(work, range(100))] == [n / 100 for n in range(100)]
    cache.close()
