"""Talking to an OpenEnv server: its JSON routes over HTTP, its session over a WebSocket.

What OpenEnv's server (``openenv.core.env_server.http_server``) speaks:

- ``GET /schema`` -> ``{"action": {...}, "observation": {...}, "state": {...}}`` (JSON
  schemas), ``GET /metadata`` -> ``{"name", "description", ...}``, ``GET /health``;
- ``/ws``: one env per connection. Send ``{"type": "reset", "data": {"seed": ...}}``,
  ``{"type": "step", "data": ACTION}``, ``{"type": "state"}``, ``{"type": "close"}``;
  get ``{"type": "observation", "data": {"observation": {...}, "reward", "done"}}``,
  ``{"type": "state", "data": {...}}`` or ``{"type": "error", "data": {"message", "code"}}``.

(Its HTTP ``/reset`` and ``/step`` make a new env per request, so an episode of more than
one move needs the WebSocket.) This is a small synchronous client of our own rather than
OpenEnv's ``EnvClient``: a Gymnasium env is synchronous, and OpenEnv's sync wrapper runs
an event loop thread per client; importing ``openenv.core`` also imports its web UI
(gradio), seconds per process. It is tested against OpenEnv's own server.

Everything the server sends is untrusted: a dropped connection, a late answer, text that
is not UTF-8 or not JSON each raise :class:`~agentgym.errors.RemoteEnvError` naming it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from websockets.exceptions import ConnectionClosed, InvalidHandshake, WebSocketException
from websockets.sync.client import ClientConnection, connect

from agentgym.errors import ConfigError, RemoteEnvError

__all__ = ["MAX_MESSAGE_BYTES", "OpenEnvSession", "get_json", "http_url", "ws_url"]

#: The largest message read from a server (OpenEnv's own client allows 100 MB).
MAX_MESSAGE_BYTES = 64 * 2**20
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_url(base_url: str) -> str:
    """``base_url`` as http(s)://HOST[:PORT][/PATH] without a trailing slash; ws(s) is turned
    into http(s). :class:`ConfigError` for anything else."""
    parts = urlsplit(base_url.strip())
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    if scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{base_url!r} is not the URL of an OpenEnv server: write it as "
                          "openenv:http://HOST:PORT (or ws://HOST:PORT).")
    try:
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError as exc:
        raise ConfigError(f"{base_url!r} has a bad port: {exc}.") from exc
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def ws_url(base_url: str) -> str:
    """The session WebSocket of the server at ``base_url`` (http -> ws, https -> wss)."""
    url = http_url(base_url)
    return ("wss" + url[5:] if url.startswith("https") else "ws" + url[4:]) + "/ws"


def get_json(base_url: str, route: str, timeout: float) -> Any:
    """``GET base_url + route`` as JSON; :class:`RemoteEnvError` says what went wrong."""
    url = http_url(base_url) + route
    try:
        with _NO_PROXY.open(url, timeout=timeout) as response:
            body = response.read(MAX_MESSAGE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise RemoteEnvError(f"GET {url} answered HTTP {exc.code}: is this an OpenEnv server?") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise RemoteEnvError(f"GET {url} failed: {getattr(exc, 'reason', exc)}. Is the server running?") from exc
    if len(body) > MAX_MESSAGE_BYTES:
        raise RemoteEnvError(f"GET {url} sent more than {MAX_MESSAGE_BYTES // 2**20} MiB.")
    return _decode(body, f"GET {url}")


def _decode(body: bytes | str, where: str) -> Any:
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RemoteEnvError(f"{where} sent text that is not UTF-8 ({exc.reason} at byte "
                                 f"{exc.start}).") from exc
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise RemoteEnvError(f"{where} sent text that is not JSON ({exc.msg} at {exc.pos}): "
                             f"{body[:80]!r}.") from exc


class OpenEnvSession:
    """One OpenEnv session (a WebSocket: one env on the server), opened on first use.

    ``timeout`` bounds every wait: connecting, and each answer. After a failure the
    session is closed; the next :meth:`request` opens a new one (a new env there).
    """

    def __init__(self, base_url: str, *, timeout: float = 60.0) -> None:
        self.url = ws_url(base_url)
        self.timeout = timeout
        self._ws: ClientConnection | None = None

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message``; return the ``data`` of the answer (an observation or a state)."""
        kind = message.get("type")
        try:
            ws = self._connect()
            ws.send(json.dumps(message))
            raw = ws.recv(timeout=self.timeout)
        except TimeoutError as exc:
            self.close()
            raise RemoteEnvError(f"{self.url} did not answer a {kind} within {self.timeout:g} s "
                                 "(-k timeout=S waits longer).") from exc
        except ConnectionClosed as exc:
            self.close()
            raise RemoteEnvError(f"{self.url} closed the session during a {kind} "
                                 f"({_close_reason(exc)}).") from exc
        except (OSError, InvalidHandshake, WebSocketException) as exc:
            self.close()
            raise RemoteEnvError(f"Cannot reach an OpenEnv session at {self.url}: {exc}.") from exc
        return self._answer(raw, kind)

    def _answer(self, raw: str | bytes, kind: Any) -> dict[str, Any]:
        try:
            answer = _decode(raw, f"{self.url} (answering a {kind})")
        except RemoteEnvError:
            self.close()
            raise
        data = answer.get("data") if isinstance(answer, dict) else None
        if isinstance(answer, dict) and answer.get("type") == "error":
            error = data if isinstance(data, dict) else {}
            raise RemoteEnvError(f"The OpenEnv server refused a {kind}: {error.get('message', data)} "
                                 f"({error.get('code', 'no code')}).")
        if not isinstance(data, dict):
            self.close()
            raise RemoteEnvError(f"{self.url} answered a {kind} with {str(answer)[:120]!r}, not "
                                 '{"type": ..., "data": {...}}.')
        return data

    def _connect(self) -> ClientConnection:
        if self._ws is None:
            self._ws = connect(self.url, open_timeout=self.timeout, close_timeout=1.0,
                               max_size=MAX_MESSAGE_BYTES, proxy=None)
        return self._ws

    def close(self) -> None:
        """End the session (the server closes its env). Safe to call twice."""
        ws, self._ws = self._ws, None
        if ws is None:
            return
        try:
            ws.send(json.dumps({"type": "close"}))
            # Let the server close first, so its handler ends cleanly.
            ws.recv(timeout=1.0)
        except (TimeoutError, OSError, WebSocketException):
            pass
        finally:
            ws.close()


def _close_reason(exc: ConnectionClosed) -> str:
    frame = exc.rcvd or exc.sent
    if frame is None:
        return "the connection dropped with no close frame"
    return f"close code {frame.code}" + (f": {frame.reason}" if frame.reason else "")
