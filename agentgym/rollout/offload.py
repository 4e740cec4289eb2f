"""Blocking env calls from the event loop: in a thread pool, or inline once they prove quick."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["Offload"]

_T = TypeVar("_T")


class Offload:
    """Runs one kind of blocking env call (opening an env, a step) for a whole run: in the
    thread pool, or on the event loop's thread once it proves quick.

    Handing a call to a thread costs the event loop about 0.1 ms of CPU, and while the
    thread runs Python the two take turns at the GIL, which costs more: opening each
    Sokoban episode's env in the pool cost the manager about 2 ms of CPU more than doing
    it inline (benchmarks/bench_rollout.py). A call that computes gains nothing from a
    thread (the GIL lets one run at a time); a call that waits (on a sandbox, a page)
    frees the loop while it waits there. So a call timed in the pool that took under
    ``always_inline_s``, or computed for most of a time under the interpreter's switch
    interval (5 ms), lets the next ones run inline; an inline call that takes over
    ``inline_stall_s`` sends the rest back. In the pool a call also waits for the GIL and
    for a loaded machine's cores, so one that computes can look as if it waited: while calls
    go there, every ``judge_again_every``-th one that computed runs inline to be judged
    again. The first call is timed in the pool while the others wait for its verdict (so a
    run's first wave of episodes does not all go there).
    """

    #: any call this short runs inline: it holds the loop about as long as a hand-over to a
    #: thread costs it (0.1 ms), give or take what a loaded machine adds to a call's time
    always_inline_s = 1e-3
    #: a call that spends less CPU than this hardly computes: it waits
    hardly_computes_s = 2e-4
    #: the longest an inline call may hold the loop before the rest go to the pool
    inline_stall_s = 0.05
    judge_again_every = 32

    def __init__(self, pool: ThreadPoolExecutor, *, may_inline: bool = True) -> None:
        self.pool = pool
        #: False for calls that wait on another process or event loop (an env from outside,
        #: a verifiers rubric): they always go to the pool, however quick the last one was
        self.may_inline = may_inline
        self.inline = False
        self._first: asyncio.Event | None = None  # set once the first call is timed
        self._last_cpu = 0.0  # CPU seconds of the last call timed
        self._calls_in_pool = 0

    async def call(self, function: Callable[..., _T], *args: Any,
                   abandoned: Callable[[_T], None] | None = None) -> _T:
        """``function(*args)``; if the caller stops waiting (its episode timed out) while the
        pool runs it, ``abandoned`` gets the result once there is one (to close an env)."""
        if self._first is None:
            self._first = asyncio.Event()
            try:
                return await self._in_pool(function, args, abandoned)
            finally:
                self._first.set()
        await self._first.wait()
        if self.may_inline and (self.inline or self._judge_again()):
            result, wall, cpu = _timed(function, *args)
            self.inline, self._last_cpu = wall < self.inline_stall_s, cpu
            return result
        return await self._in_pool(function, args, abandoned)

    async def _in_pool(self, function: Callable[..., _T], args: tuple[Any, ...],
                       abandoned: Callable[[_T], None] | None) -> _T:
        job = self.pool.submit(_timed, function, *args)
        try:
            result, wall, cpu = await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            if abandoned is not None:
                job.add_done_callback(lambda done: _hand_over(done, abandoned))
            raise
        computed = wall < sys.getswitchinterval() and cpu >= wall / 2
        # Only ever toward inline: a slow time in the pool may be the machine's load, and a
        # call that finished late must not undo what a quicker one showed; inline calls,
        # timed without the pool's noise, are what send the rest back.
        if self.may_inline and (wall < self.always_inline_s or computed):
            self.inline = True
        self._last_cpu = cpu
        return result

    def _judge_again(self) -> bool:
        """Whether this call, due for the pool, runs inline to be judged again (a call that
        hardly computes, such as one waiting on a sandbox, never is)."""
        if self._last_cpu < self.hardly_computes_s:
            return False
        self._calls_in_pool += 1
        return self._calls_in_pool % self.judge_again_every == 0


def _timed(function: Callable[..., _T], *args: Any) -> tuple[_T, float, float]:
    """The result, the seconds it took, and the CPU seconds this thread spent on it."""
    wall, cpu = time.perf_counter(), time.thread_time()
    result = function(*args)
    return result, time.perf_counter() - wall, time.thread_time() - cpu


def _hand_over(done: Future[tuple[_T, float, float]], receiver: Callable[[_T], None]) -> None:
    if not done.cancelled() and done.exception() is None:
        receiver(done.result()[0])
