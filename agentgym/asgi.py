"""ASGI pieces the project's HTTP services share (``agentgym serve``, ``agentgym sandbox serve``).

Plain ASGI, no web framework imported: each service adds it to its own app.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Self

__all__ = ["CatchAll", "ErrorAnswer", "ServerThread"]

#: what answers a request that failed: an ASGI app built from the error's message
ErrorAnswer = Callable[[str], Any]


class CatchAll:
    """ASGI middleware: an unexpected exception becomes a logged 500 made by ``answer``.

    Add it with ``app.add_middleware(CatchAll, answer=..., log=...)``, which
    puts it inside Starlette's own error middleware: that one would answer a
    plain-text 500 and re-raise, so uvicorn drops the connection. Here the
    client gets the service's error shape, its connection stays usable for the
    next request, and the server keeps serving. A response that already
    started can only be cut short.
    """

    def __init__(self, app: Any, *, answer: ErrorAnswer, log: logging.Logger) -> None:
        self.app = app
        self.answer = answer
        self.log = log

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:  # broad on purpose: no request may take the server down
            self.log.exception("%s %s failed", scope.get("method"), scope.get("path"), exc_info=exc)
            if started:
                raise
            await self.answer(f"internal error: {type(exc).__name__}: {exc}")(scope, receive, send)


class ServerThread:
    """A uvicorn server in a daemon thread of this process; a context manager.

    The in-process form of the project's services (tests, benchmarks, notebooks): ``start()``
    returns once the port accepts connections, ``stop()`` is safe to call twice. ``what`` names the
    service in the error a failed start raises.
    """

    def __init__(self, config: Any, *, name: str, what: str, url: str) -> None:
        import uvicorn

        self.url = url
        self._server = uvicorn.Server(config)
        self._name, self._what = name, what
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 30.0) -> Self:
        """Start serving; return once the port accepts connections."""
        from agentgym.errors import ServerStartError

        if self._thread is None:
            self._thread = threading.Thread(target=self._server.run, name=self._name, daemon=True)
            self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(f"{self._what} on {self.url} did not start.")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop serving and wait for the thread. Safe to call twice."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._server.should_exit = True
            thread.join(15)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
