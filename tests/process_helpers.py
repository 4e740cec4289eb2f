"""Checks that a stopped server left no process behind (Linux /proc); not a test module."""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["assert_group_gone", "has_proc", "live_group_members"]


def has_proc() -> bool:
    return Path("/proc/self/stat").exists()


def live_group_members(pgid: int) -> list[int]:
    """Pids in process group ``pgid`` that are not zombies (read from /proc)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def assert_group_gone(pgid: int, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while live_group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_group_members(pgid) == [], f"processes left behind in group {pgid}"
