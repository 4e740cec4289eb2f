"""Sandboxes that the code envs of one process share: one per backend, reference-counted.

A Docker sandbox holds a pool of warm containers; a vector of 64 envs should
not start 64 pools. So an env that is given no sandbox borrows the process's
sandbox for its backend: the first borrower opens it, the last one to give it
back (``env.close()``) closes it, and whatever is still open at interpreter
exit is closed then.
"""

from __future__ import annotations

import atexit
import threading

from agentgym.sandbox import Sandbox, open_sandbox

__all__ = ["borrow_sandbox", "close_all", "give_back"]

_lock = threading.Lock()
_open: dict[str, Sandbox] = {}
_borrowers: dict[str, int] = {}


def borrow_sandbox(backend: str) -> Sandbox:
    """The shared sandbox of ``backend`` (``open_sandbox(backend)`` on first use)."""
    with _lock:
        sandbox = _open.get(backend)
        if sandbox is None:
            sandbox = open_sandbox(backend=backend)
            if not _open:
                atexit.register(close_all)
            _open[backend] = sandbox
        _borrowers[backend] = _borrowers.get(backend, 0) + 1
        return sandbox


def give_back(backend: str) -> None:
    """One borrower of ``backend`` is done; the last one closes the sandbox."""
    with _lock:
        left = _borrowers.get(backend, 0) - 1
        if left > 0:
            _borrowers[backend] = left
            return
        _borrowers.pop(backend, None)
        sandbox = _open.pop(backend, None)
        if not _open:
            atexit.unregister(close_all)
    if sandbox is not None:
        sandbox.close()


def close_all() -> None:
    """Close every shared sandbox (run at interpreter exit); envs still holding one must not run."""
    with _lock:
        sandboxes = list(_open.values())
        _open.clear()
        _borrowers.clear()
        atexit.unregister(close_all)
    for sandbox in sandboxes:
        sandbox.close()
