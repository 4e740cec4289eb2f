"""Offload: quick calls move inline; calls that wait elsewhere (may_inline=False) never do."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from agentgym.rollout.offload import Offload


def _threads_used(may_inline: bool, calls: int = 40) -> set[str]:
    async def run() -> set[str]:
        with ThreadPoolExecutor(2, thread_name_prefix="pool") as pool:
            offload = Offload(pool, may_inline=may_inline)
            names = [await offload.call(lambda: threading.current_thread().name) for _ in range(calls)]
        return {"loop" if name == threading.current_thread().name else "pool" for name in names}

    return asyncio.run(run())


def test_quick_calls_move_inline() -> None:
    assert _threads_used(may_inline=True) == {"loop", "pool"}  # the first call is timed in the pool


def test_calls_that_may_not_inline_always_go_to_the_pool() -> None:
    assert _threads_used(may_inline=False) == {"pool"}
