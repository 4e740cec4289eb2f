"""ASGI pieces the project's HTTP services share (``agentgym serve``, ``agentgym sandbox serve``).

Plain ASGI, no web framework imported: each service adds it to its own app.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["CatchAll", "ErrorAnswer"]

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
