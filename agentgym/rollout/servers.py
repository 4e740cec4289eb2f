"""Several inference servers behind one policy: least outstanding requests, sticky episodes.

:class:`ServerPool` chooses the server of each request:

- **sticky**: a key (the episode id) stays on the server that served it
  until a request fails there, so the server's prefix cache holds the episode's
  context from one turn to the next;
- **least outstanding**: a new key, or one whose server went down, goes to
  the up server with the fewest requests in flight (ties: the one that has
  served fewest), which also steers around a slow or hung server, as its
  count of requests in flight grows;
- **taken out, retried later**: a server that cannot be reached (connection
  refused or dropped, a timeout) is taken out on that failure; one that
  answers 429 or 5xx, after ``take_out_after`` such answers in a row with no
  success between them. Out means a cool-down that doubles with each time in
  a row, up to a cap. Once it has passed, the server is back in the choice,
  and its next request is the probe: a success resets the cool-down, a
  failure takes it out for twice as long. Failures of requests already in
  flight while it is out add nothing, so one outage costs one step of the
  cool-down, however many requests it broke.

Why this split: an unreachable server will fail every request sent to it
until it is back, so waiting for more proof only loses time; a server that
answers, but now and then with a 500, serves most requests well, and taking
it out on each error would stall the run. Either way the failed request
itself goes at once to another server that is up (``pick(key, avoid=...)``),
and its episode with it: moving is safe because every prompt carries the
full token ids.

The pool is plain bookkeeping with no I/O and no awaits, so one event loop
uses it without locks; :class:`agentgym.rollout.policy.OpenAIPolicy` sends the
requests. A pool of one server behaves like the old single-server client: its
cool-downs are the retry backoff.

    pool = ServerPool(["http://a:8000/v1", "http://b:8000/v1"])
    server = pool.pick("Sokoban-LLM-v0/s0/g0/e0")
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from yarl import URL

from agentgym.errors import ConfigError

__all__ = ["MAX_STICKY_KEYS", "Server", "ServerPool", "ServerStats", "parse_base_urls"]

#: sticky keys remembered at most; the oldest are forgotten first (a long
#: training run plays far more episodes than are ever in flight)
MAX_STICKY_KEYS = 65_536


@dataclass(eq=False, slots=True)
class Server:
    """One server and what the pool knows of it."""

    base_url: str
    #: parsed once: aiohttp would parse a str URL again on every request
    completions_url: URL
    #: requests in flight now
    outstanding: int = 0
    #: requests sent, and those of them that failed in a retryable way
    requests: int = 0
    failures: int = 0
    #: keys (episodes) moved here after a request failed on their server
    moved_in: int = 0
    #: retryable failures since the last success (5xx / 429 count towards taking it out)
    streak: int = 0
    #: times taken out in a row (0: trusted); sets the cool-down
    strikes: int = 0
    #: out of the choice until this time (``clock()`` seconds)
    down_until: float = 0.0
    last_error: str = ""
    #: the chat-completions client of this server, made on first use by the policy
    chat_client: Any = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class ServerStats:
    """What one server did during a run (:meth:`ServerPool.stats`)."""

    base_url: str
    requests: int
    failures: int
    moved_in: int
    up: bool
    last_error: str


class ServerPool:
    """Choose a server per request; take failing ones out for a growing cool-down.

    Args:
        base_urls: the servers' OpenAI base URLs (ending in ``/v1``).
        cooldown: seconds a server stays out the first time it is taken out.
        max_cooldown: the cap of the doubling cool-down.
        take_out_after: error answers (429, 5xx) in a row that take a server out.
        clock: monotonic seconds (a test passes its own).
    """

    def __init__(self, base_urls: Sequence[str], *, cooldown: float = 0.5, max_cooldown: float = 10.0,
                 take_out_after: int = 3, clock: Callable[[], float] = time.monotonic) -> None:
        for url in base_urls:
            if isinstance(url, str) and "," in url:  # one string may be a command line's list; here
                raise ConfigError(  # it would hide a second server from whoever else uses the URL
                    f"{url!r} holds several URLs: pass them as a list (parse_base_urls splits a "
                    "comma-separated string).")
        urls = parse_base_urls(base_urls)
        self.servers = [Server(url, URL(url + "/completions")) for url in urls]
        self.cooldown = cooldown
        self.max_cooldown = max_cooldown
        self.take_out_after = take_out_after
        self.clock = clock
        self._sticky: dict[object, Server] = {}
        self._only = self.servers[0] if len(self.servers) == 1 else None

    def __len__(self) -> int:
        return len(self.servers)

    def pick(self, key: object = None, avoid: Server | None = None) -> Server | None:
        """The server for ``key``'s next request, or None while every server is out.

        ``avoid`` (the server a request just failed on) is chosen only when no other is up.
        """
        if self._only is not None:  # one server: no choice to make, keep it cheap
            return self._only if self._only.down_until <= self.clock() else None
        now = self.clock()
        if key is not None:
            server = self._sticky.get(key)
            if server is not None and server is not avoid and server.down_until <= now:
                return server
        server = self._least_outstanding(now, avoid)
        if server is None and avoid is not None and avoid.down_until <= now:
            server = avoid
        if server is not None and key is not None:
            self._stick(key, server)
        return server

    def server_of(self, key: object) -> Server | None:
        """The server ``key`` is kept on (None: not seen, or forgotten)."""
        return self._sticky.get(key)

    def _least_outstanding(self, now: float, avoid: Server | None = None) -> Server | None:
        best: Server | None = None
        for server in self.servers:
            if server is avoid or server.down_until > now:
                continue
            if best is None or (server.outstanding, server.requests) < (best.outstanding, best.requests):
                best = server
        return best

    def _stick(self, key: object, server: Server) -> None:
        old = self._sticky.get(key)
        if old is server:
            return
        if old is not None:
            server.moved_in += 1  # its old server failed: the episode goes on here
        elif len(self._sticky) >= MAX_STICKY_KEYS:
            del self._sticky[next(iter(self._sticky))]  # dicts keep insertion order: the oldest
        self._sticky[key] = server

    def succeeded(self, server: Server) -> None:
        """A request to ``server`` got an answer: it is trusted again."""
        server.streak = server.strikes = 0

    def failed(self, server: Server, error: str, *, unreachable: bool = True) -> None:
        """A request to ``server`` failed in a retryable way; take it out if that is enough.

        ``unreachable``: no answer came (refused, dropped, timed out), rather than a 429 or 5xx.
        """
        server.failures += 1
        server.streak += 1
        server.last_error = error
        now = self.clock()
        if server.down_until > now:
            return  # already out: this request was in flight when the outage began
        if unreachable or server.streak >= self.take_out_after:
            server.strikes += 1
            server.down_until = now + min(self.cooldown * 2 ** (server.strikes - 1), self.max_cooldown)

    def ready_in(self) -> float:
        """Seconds until the first server that is out comes back (0 if one is up)."""
        now = self.clock()
        return max(0.0, min(server.down_until for server in self.servers) - now)

    def stats(self) -> list[ServerStats]:
        """Per-server counts, in the order the servers were given."""
        now = self.clock()
        return [ServerStats(s.base_url, s.requests, s.failures, s.moved_in, s.down_until <= now, s.last_error)
                for s in self.servers]


def parse_base_urls(values: str | Iterable[str]) -> list[str]:
    """Base URLs from one string or several, each of which may hold a comma-separated list.

    >>> parse_base_urls(["http://a:8000/v1,http://b:8000/v1/"])
    ['http://a:8000/v1', 'http://b:8000/v1']
    """
    items = [values] if isinstance(values, str) else list(values)
    urls: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"A server base URL must be a string, not {type(item).__name__} ({item!r}).")
        for part in item.split(","):
            url = part.strip().rstrip("/")
            if not url.startswith(("http://", "https://")) or not _host(url):
                raise ConfigError(f"{part.strip()!r} is not a server base URL: give one like "
                                  "http://127.0.0.1:8000/v1 (several: repeat --base-url or "
                                  "separate with commas).")
            if url in urls:
                raise ConfigError(f"The server {url} is listed twice: give each server once.")
            urls.append(url)
    if not urls:
        raise ConfigError("No server base URL given: pass at least one, e.g. http://127.0.0.1:8000/v1.")
    return urls


def _host(url: str) -> str | None:
    try:
        return URL(url).host
    except ValueError:  # yarl rejects e.g. a bad port
        return None
