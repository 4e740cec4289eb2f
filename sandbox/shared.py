"""The sandboxes a process shares: one per backend, reference-counted, closed by the last user.

A Docker sandbox holds a pool of warm containers; a vector of 64 code envs, or
a rollout that builds one env (and one python tool) per episode, should not
start a pool each. So whatever is given no sandbox borrows the process's
sandbox for its backend:

- :func:`borrow_sandbox` / :func:`give_back`: a counted borrow (a code env
  borrows on its first answer and gives back on ``close()``). The first
  borrower opens the sandbox (``open_sandbox(backend)``), the last one to give
  it back closes it.
- :func:`hold_sandbox` / :func:`release_hold`: one lasting borrow per backend,
  kept across the short lives of its users (python tools, built one per
  episode): the first call borrows, later calls return the same sandbox,
  :func:`release_hold` gives it back.
- :func:`close_all`: closes every shared sandbox and forgets every borrow and
  hold; it runs at interpreter exit.

So a code env and a python tool of one process, both on ``"auto"``, run in
the same sandbox.
"""

from __future__ import annotations

import atexit
import threading

from agentgym.sandbox import Sandbox, open_sandbox

__all__ = ["borrow_sandbox", "close_all", "give_back", "hold_sandbox", "release_hold"]

_lock = threading.Lock()
_open: dict[str, Sandbox] = {}
_borrowers: dict[str, int] = {}
_held: set[str] = set()  # backends with a lasting borrow (hold_sandbox)


def _borrow(backend: str) -> Sandbox:
    """One more borrower of ``backend``'s sandbox, opened if none is; call with ``_lock`` held."""
    sandbox = _open.get(backend)
    if sandbox is None:
        sandbox = open_sandbox(backend=backend)
        if not _open:
            atexit.register(close_all)
        _open[backend] = sandbox
    _borrowers[backend] = _borrowers.get(backend, 0) + 1
    return sandbox


def _give_back(backend: str) -> Sandbox | None:
    """One borrower fewer; the sandbox to close when it was the last. Call with ``_lock`` held."""
    left = _borrowers.get(backend, 0) - 1
    if left > 0:
        _borrowers[backend] = left
        return None
    _borrowers.pop(backend, None)
    sandbox = _open.pop(backend, None)
    if not _open:
        atexit.unregister(close_all)
    return sandbox


def borrow_sandbox(backend: str = "auto") -> Sandbox:
    """The shared sandbox of ``backend`` (``open_sandbox(backend)`` on first use)."""
    with _lock:
        return _borrow(backend)


def give_back(backend: str = "auto") -> None:
    """One borrower of ``backend`` is done; the last one closes the sandbox."""
    with _lock:
        sandbox = _give_back(backend)
    if sandbox is not None:
        sandbox.close()


def hold_sandbox(backend: str = "auto") -> Sandbox:
    """The shared sandbox of ``backend``, borrowed once and kept until :func:`release_hold`."""
    with _lock:
        if backend in _held:
            return _open[backend]
        sandbox = _borrow(backend)
        _held.add(backend)
        return sandbox


def release_hold(backend: str = "auto") -> None:
    """Give back the lasting borrow of ``backend``, if there is one; the last user closes it."""
    with _lock:
        if backend not in _held:
            return
        _held.discard(backend)
        sandbox = _give_back(backend)
    if sandbox is not None:
        sandbox.close()


def close_all() -> None:
    """Close every shared sandbox (run at interpreter exit); envs still holding one must not run."""
    with _lock:
        sandboxes = list(_open.values())
        _open.clear()
        _borrowers.clear()
        _held.clear()
        atexit.unregister(close_all)
    for sandbox in sandboxes:
        sandbox.close()
