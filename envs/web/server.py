"""A small HTTP server on 127.0.0.1 that serves a Python app from a background thread.

The shop (and the browser tests' pages) run on it. It is the standard
library's :class:`~http.server.ThreadingHTTPServer` (nothing to install),
speaking HTTP/1.1 with keep-alive, bound to ``127.0.0.1`` on a port the OS
picks. An app is a function from :class:`Request` to :class:`Response`::

    with LoopbackServer(lambda request: Response(f"<p>{request.path}</p>")) as server:
        print(server.url)          # http://127.0.0.1:41234

``stop()`` (or ``close()``, leaving the ``with`` block, garbage collection of
the server, interpreter exit) ends the serving thread, closes the listening
socket and shuts every open connection (whose handler threads then end);
afterwards the port accepts nothing.
"""

from __future__ import annotations

import http.server
import selectors
import socket
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self
from urllib.parse import parse_qsl, urlsplit

from agentgym.errors import ConfigError

__all__ = ["MAX_BODY_BYTES", "App", "LoopbackServer", "Request", "Response"]

#: Largest request body read; a larger one is answered 413.
MAX_BODY_BYTES = 1_000_000
_MAX_FIELDS = 200
_HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Request:
    """An HTTP request as an app sees it: query and form already decoded (last value wins)."""

    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    form: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Response:
    """What an app answers. ``location`` makes it a redirect (give a 3xx ``status``)."""

    body: str = ""
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    location: str | None = None


App = Callable[[Request], Response]


def _fields(text: str) -> dict[str, str]:
    try:
        pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=_MAX_FIELDS,
                          errors="replace")
    except ValueError:  # more than _MAX_FIELDS fields
        return {}
    return dict(pairs)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection serves a whole episode
    # Headers and body go out in two writes; with Nagle's algorithm the second
    # waits for the client's delayed ACK (40 ms a page on Linux).
    disable_nagle_algorithm = True
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.connections.add(self.connection)
        if self.server.closing:  # accepted just as the server stopped: end it too
            self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        self.server.connections.discard(self.connection)
        super().finish()

    def do_GET(self) -> None:  # http.server's naming
        self._serve(b"")

    def do_HEAD(self) -> None:
        self._serve(b"", head=True)

    def do_POST(self) -> None:
        length_text = self.headers.get("Content-Length", "0").strip()
        if not length_text.isdigit():
            self.send_error(411, "A POST needs a Content-Length")
            return
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            self.send_error(413, f"Request bodies are limited to {MAX_BODY_BYTES} bytes")
            return
        self._serve(self.rfile.read(length))

    def _serve(self, body: bytes, *, head: bool = False) -> None:
        parts = urlsplit(self.path)
        request = Request(
            method=self.command,
            path=parts.path or "/",
            query=_fields(parts.query),
            form=_fields(body.decode("utf-8", "replace")) if body else {},
        )
        response = self.server.app(request)
        payload = response.body.encode("utf-8", "replace")
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        if response.location is not None:
            self.send_header("Location", response.location)
        self.end_headers()
        if not head:
            self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: an env serves thousands of pages per episode batch."""


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # Accepting waits at most this long, so an aborted connection cannot hang the loop.
    timeout = 0.5

    def __init__(self, app: App) -> None:
        self.app = app
        self.connections: set[socket.socket] = set()
        self.closing = False
        super().__init__((_HOST, 0), _Handler)

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that hung up mid-answer is normal for a browser; anything
        # else is a bug worth the traceback that the default prints.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


def _serve_until_woken(httpd: _HTTPServer, wake: socket.socket) -> None:
    with selectors.DefaultSelector() as selector:
        selector.register(httpd.socket, selectors.EVENT_READ)
        selector.register(wake, selectors.EVENT_READ)
        while True:
            ready = selector.select()
            if any(key.fileobj is wake for key, _ in ready):
                return
            httpd.handle_request()


def _shut_down(httpd: _HTTPServer, wake: tuple[socket.socket, socket.socket],
               thread: threading.Thread) -> None:
    """Stop accepting, end every connection, close every socket. Takes no ``self``:
    it is the server's finalizer, so it must not keep the server alive."""
    try:
        wake[1].send(b"x")
    except OSError:
        pass
    thread.join()
    httpd.server_close()
    httpd.closing = True
    for connection in list(httpd.connections):
        try:
            connection.shutdown(socket.SHUT_RDWR)  # wakes its handler thread, which closes it
        except OSError:
            pass
    for end in wake:
        end.close()


class LoopbackServer:
    """Serve ``app`` on ``127.0.0.1`` (a free port) from a daemon thread.

    Args:
        app: a function from :class:`Request` to :class:`Response`; called on
            the server's handler threads, one per connection.
    """

    def __init__(self, app: App) -> None:
        if not callable(app):
            raise ConfigError(f"LoopbackServer needs a callable app, got {type(app).__name__}.")
        httpd = _HTTPServer(app)
        wake = socket.socketpair()
        thread = threading.Thread(target=_serve_until_woken, args=(httpd, wake[0]),
                                  name=f"agentgym-web-{httpd.server_address[1]}", daemon=True)
        thread.start()
        self._httpd = httpd
        self.port: int = int(httpd.server_address[1])
        self.url = f"http://{_HOST}:{self.port}"
        self._finalizer = weakref.finalize(self, _shut_down, httpd, wake, thread)

    @property
    def running(self) -> bool:
        """True until the server is stopped."""
        return self._finalizer.alive

    @property
    def app(self) -> App:
        """The app being served; assign to serve another."""
        return self._httpd.app

    @app.setter
    def app(self, app: App) -> None:
        self._httpd.app = app

    def stop(self) -> None:
        """Close the port and every connection. Safe to call twice."""
        self._finalizer()

    close = stop

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"LoopbackServer({self.url}, {state})"
