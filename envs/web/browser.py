"""A text browser for agents, and the ``browser`` tool built on it.

:class:`Browser` fetches pages over HTTP, turns them into the text view of
:mod:`agentgym.envs.web.page` and acts on them the way a person does: follow
link 3, type words into the search box, pick an option, press a button, go
back. An agent drives it with short commands (:func:`parse_command`)::

    http://127.0.0.1:8000/     open a URL (also open[URL]; relative URLs resolve
                               against the current page)
    click[3]                   follow link 3, or press button 3 (click[Buy now]
                               matches a link or button by its words)
    search[red t-shirt]        type into the page's search box and submit its form
    select[M]                  pick option M of the field that offers it
                               (select[size=M] when several fields offer M)
    back                       return to the previous page (as it was left)

Pages come from a *fetcher*: :class:`HttpFetcher` (the standard library's
``http.client``, keep-alive, no JavaScript) or, for pages that need
JavaScript, ``ChromiumFetcher`` (headless Chromium through Playwright; see
:mod:`agentgym.envs.web.chromium`). Only hosts in ``allowed_hosts`` are
fetched; the default is the loopback interface, so an agent cannot reach the
internet unless you allow it. Cookies are not kept.

Agent mistakes (no link 9, nothing to select) raise :class:`ToolInputError`;
a page that cannot be fetched raises :class:`BrowserError`.
"""

from __future__ import annotations

import http.client
import re
import threading
import weakref
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol
from urllib.parse import urlencode, urljoin, urlsplit, urlunsplit

from agentgym.core import check_number
from agentgym.envs.web.page import Button, Page, parse_page, parse_text_page
from agentgym.errors import BrowserError, ConfigError, ToolInputError
from agentgym.parsing import normalize, read_int
from agentgym.tools import Tool

__all__ = [
    "COMMANDS",
    "LOOPBACK_HOSTS",
    "Browser",
    "BrowserTool",
    "Fetched",
    "Fetcher",
    "HttpFetcher",
    "check_host",
    "parse_command",
]

#: Hosts a browser may fetch from unless told otherwise.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: Command names :meth:`Browser.act` understands.
COMMANDS = ("open", "click", "search", "select", "back")
_MAX_REDIRECTS = 5
_MAX_HISTORY = 50
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_RETRYABLE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
_BRACKETED = re.compile(r"\s*([A-Za-z_]+)\s*\[(.*)\]\s*", re.DOTALL)
_BARE = re.compile(r"\s*([A-Za-z_]+)\s*")
_CUT = "\n[... page cut: it goes on ...]"


def parse_command(text: str) -> tuple[str, str] | None:
    """``"click[3]"`` -> ``("click", "3")``; ``"back"`` -> ``("back", "")``; a URL -> ``("open", url)``.

    Names are lower-cased; the argument runs to the last ``]`` and is stripped.
    Returns ``None`` for anything else. Never raises.
    """
    if not isinstance(text, str):
        return None
    bracketed = _BRACKETED.fullmatch(text)
    if bracketed:
        return bracketed.group(1).lower(), bracketed.group(2).strip()
    bare = _BARE.fullmatch(text)
    if bare:
        return bare.group(1).lower(), ""
    stripped = text.strip()
    if stripped.lower().startswith(("http://", "https://")) and not any(c.isspace() for c in stripped):
        return "open", stripped
    return None


@dataclass(frozen=True, slots=True)
class Fetched:
    """A fetched resource: final URL (after redirects), status, content type, decoded text."""

    url: str
    status: int
    content_type: str
    text: str
    truncated: bool = False


class Fetcher(Protocol):
    """Where a :class:`Browser` gets pages from."""

    def fetch(self, method: str, url: str, data: Sequence[tuple[str, str]] | None = None) -> Fetched:
        """GET ``url`` or POST ``data`` (form-encoded) to it; follow redirects."""
        ...

    def close(self) -> None:
        """Release connections or the browser process. Safe to call twice."""
        ...


def check_host(url: str, allowed_hosts: Collection[str] | None) -> tuple[str, str, int, str]:
    """``(scheme, host, port, target)`` of ``url``; :class:`BrowserError` if it may not be fetched."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise BrowserError(f"{url[:200]!r} is not a valid URL ({error}).") from error
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BrowserError(f"{url[:200]!r} is not an http(s) URL; write e.g. http://127.0.0.1:8000/.")
    host = parts.hostname.lower()
    if allowed_hosts is not None and host not in allowed_hosts:
        raise BrowserError(f"fetching from {host!r} is not allowed; this browser may fetch from "
                           f"{', '.join(sorted(allowed_hosts))} (set allowed_hosts to change that).")
    target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    return parts.scheme, host, port or (443 if parts.scheme == "https" else 80), target


def _close_all(connections: dict[tuple[str, str, int], http.client.HTTPConnection]) -> None:
    for connection in connections.values():
        connection.close()
    connections.clear()


class HttpFetcher:
    """Fetch with ``http.client``: one keep-alive connection per host, a timeout, a size cap.

    Args:
        allowed_hosts: host names or IP addresses that may be fetched; ``None``
            allows any (then the agent can reach whatever this machine can).
        timeout: seconds to connect and for each read.
        max_bytes: longest body read; the rest is dropped and ``truncated`` set.
    """

    def __init__(self, *, allowed_hosts: Collection[str] | None = LOOPBACK_HOSTS,
                 timeout: float = 10.0, max_bytes: int = 2_000_000) -> None:
        check_number("timeout", timeout, minimum=0.001, integer=False)
        check_number("max_bytes", max_bytes, minimum=1)
        self.allowed_hosts = None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)
        self.timeout = float(timeout)
        self.max_bytes = max_bytes
        self._connections: dict[tuple[str, str, int], http.client.HTTPConnection] = {}
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _close_all, self._connections)

    def fetch(self, method: str, url: str, data: Sequence[tuple[str, str]] | None = None) -> Fetched:
        body = None if data is None else urlencode(list(data), errors="replace").encode("ascii")
        for _ in range(_MAX_REDIRECTS + 1):
            status, headers, text, truncated = self._request(method, url, body)
            location = headers.get("Location")
            if status not in _REDIRECTS or not location:
                return Fetched(url, status, headers.get("Content-Type", ""), text, truncated)
            url = urljoin(url, location.strip())
            if status in (301, 302, 303):  # as browsers do: the redirect is fetched with GET
                method, body = "GET", None
        raise BrowserError(f"{url[:200]!r} redirected more than {_MAX_REDIRECTS} times.")

    def _request(self, method: str, url: str,
                 body: bytes | None) -> tuple[int, http.client.HTTPMessage, str, bool]:
        scheme, host, port, target = check_host(url, self.allowed_hosts)
        headers = {"User-Agent": "agentgym-browser/0.1", "Accept": "text/html, text/plain;q=0.9"}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        key = (scheme, host, port)
        with self._lock:
            reused = key in self._connections
            try:
                response, raw = self._exchange(key, method, target, body, headers)
            except _RETRYABLE as error:
                # A kept-alive connection that the server had closed fails before
                # any answer: browsers retry those once, on a new connection.
                if not reused:
                    raise BrowserError(f"could not fetch {url[:200]!r}: {error!r}") from error
                try:
                    response, raw = self._exchange(key, method, target, body, headers)
                except (OSError, http.client.HTTPException) as again:
                    raise BrowserError(f"could not fetch {url[:200]!r}: {again!r}") from again
            except (OSError, http.client.HTTPException) as error:
                raise BrowserError(f"could not fetch {url[:200]!r}: {error!r}") from error
            truncated = len(raw) > self.max_bytes
            if truncated or response.will_close:
                self._drop(key)  # unread bytes would poison the next answer
        charset = response.headers.get_content_charset() or "utf-8"
        try:
            text = raw[: self.max_bytes].decode(charset, "replace")
        except LookupError:  # a charset Python does not know
            text = raw[: self.max_bytes].decode("utf-8", "replace")
        return response.status, response.headers, text, truncated

    def _exchange(self, key: tuple[str, str, int], method: str, target: str, body: bytes | None,
                  headers: dict[str, str]) -> tuple[http.client.HTTPResponse, bytes]:
        """One request and its answer on the host's connection; drops the connection on failure."""
        connection = self._connection(key)
        try:
            connection.request(method, target, body=body, headers=headers)
            response = connection.getresponse()
            return response, response.read(self.max_bytes + 1)
        except (OSError, http.client.HTTPException):
            self._drop(key)
            raise

    def _connection(self, key: tuple[str, str, int]) -> http.client.HTTPConnection:
        connection = self._connections.get(key)
        if connection is None:
            scheme, host, port = key
            kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
            connection = self._connections[key] = kind(host, port, timeout=self.timeout)
        return connection

    def _drop(self, key: tuple[str, str, int]) -> None:
        connection = self._connections.pop(key, None)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        """Close every connection. Safe to call twice."""
        with self._lock:
            self._finalizer()


def _make_fetcher(backend: str | Fetcher, allowed_hosts: Collection[str] | None,
                  timeout: float) -> Fetcher:
    if not isinstance(backend, str):
        return backend
    if backend == "http":
        return HttpFetcher(allowed_hosts=allowed_hosts, timeout=timeout)
    if backend == "chromium":
        from agentgym.envs.web.chromium import ChromiumFetcher

        return ChromiumFetcher(allowed_hosts=allowed_hosts, timeout=timeout)
    raise ConfigError(f"backend must be 'http', 'chromium' or a Fetcher, got {backend!r}.")


class Browser:
    """Pages, history and form state for one agent (not shared between threads).

    Args:
        backend: ``"http"`` (default), ``"chromium"`` (runs JavaScript; needs
            ``playwright`` and Debian's ``chromium``), or any :class:`Fetcher`.
        allowed_hosts: see :class:`HttpFetcher` (ignored when ``backend`` is a fetcher).
        timeout: seconds a fetch may take.
    """

    def __init__(self, *, backend: str | Fetcher = "http",
                 allowed_hosts: Collection[str] | None = LOOPBACK_HOSTS,
                 timeout: float = 10.0) -> None:
        self.fetcher = _make_fetcher(backend, allowed_hosts, timeout)
        self.history: list[Page] = []

    @property
    def page(self) -> Page | None:
        """The page on screen, or ``None`` before the first :meth:`open`."""
        return self.history[-1] if self.history else None

    def _current(self) -> Page:
        if not self.history:
            raise ToolInputError("no page is open yet; open a URL first, e.g. open[http://127.0.0.1:8000/].")
        return self.history[-1]

    # -- moving ---------------------------------------------------------------

    def open(self, url: str, *, method: str = "GET",
             data: Sequence[tuple[str, str]] | None = None) -> Page:
        """Fetch ``url`` (relative to the current page) and show it."""
        if self.history:
            url = urljoin(self.history[-1].url, url)
        fetched = self.fetcher.fetch(method, url, data)
        kind = fetched.content_type.split(";")[0].strip().lower()
        if kind in ("", "text/html", "application/xhtml+xml"):
            page = parse_page(fetched.text, fetched.url, status=fetched.status)
        elif kind.startswith("text/") or kind.endswith(("json", "xml")):
            page = parse_text_page(fetched.text, fetched.url, status=fetched.status)
        else:
            page = parse_text_page(f"[{kind} content: not shown as text]", fetched.url,
                                   status=fetched.status)
        if fetched.truncated:
            page.lines.append(["[... the page was too long: the rest was not loaded ...]"])
        self.history.append(page)
        del self.history[:-_MAX_HISTORY]
        return page

    def click(self, target: int | str) -> Page:
        """Follow link ``target`` or press button ``target`` (a number, or the words on it)."""
        page = self._current()
        number = target if isinstance(target, int) else read_int(target.strip("[] "))
        if number is None:
            number = self._number_of(page, str(target))
        if number in page.links:
            return self.open(page.links[number].url)
        if number in page.buttons:
            return self.submit(page.buttons[number])
        count = len(page.links) + len(page.buttons)
        shown = f"they go from 1 to {count}" if count else "this page has none"
        raise ToolInputError(f"there is no link or button [{number}] on this page ({shown}).")

    def _number_of(self, page: Page, words: str) -> int:
        wanted = normalize(words)
        for number in sorted([*page.links, *page.buttons]):
            item = page.links.get(number) or page.buttons[number]
            if normalize(item.text) == wanted:
                return number
        raise ToolInputError(f"no link or button on this page reads {words[:60]!r}; "
                             "write its number, e.g. click[3].")

    def press(self, *labels: str) -> Page:
        """Press the first button whose words are one of ``labels`` (any case)."""
        wanted = {normalize(label) for label in labels}
        page = self._current()
        for button in page.buttons.values():
            if normalize(button.text) in wanted:
                return self.submit(button)
        raise ToolInputError(f"this page has no {' or '.join(repr(label) for label in labels)} button.")

    def submit(self, button: Button) -> Page:
        """Send ``button``'s form as the button would."""
        return self._send(button.action, button.method, button.form.data(button))

    def _send(self, action: str, method: str, data: list[tuple[str, str]]) -> Page:
        """Send form ``data`` to ``action``: POSTed, or as the query of a GET (HTML's rules)."""
        if method == "POST":
            return self.open(action, method="POST", data=data)
        parts = urlsplit(action)
        query = urlencode(data, errors="replace")
        return self.open(urlunsplit((parts.scheme, parts.netloc, parts.path, query, "")))

    def search(self, text: str) -> Page:
        """Type ``text`` into the page's first text box and submit its form."""
        page = self._current()
        for form in page.forms:
            box = next((item for item in form.fields if item.kind == "text"), None)
            if box is None:
                continue
            box.value = text
            button = next((b for b in page.buttons.values() if b.form is form), None)
            if button is not None:
                return self.submit(button)
            return self._send(form.action, form.method, form.data())
        raise ToolInputError("this page has no search box; go back or open a page that has one.")

    def select(self, option: str) -> Page:
        """Pick ``option`` (``"M"`` or ``"size=M"``) on the current page; no fetch."""
        page = self._current()
        page.choose(option)
        return page

    def back(self) -> Page:
        """Return to the previous page, as it was left (no fetch)."""
        if len(self.history) < 2:
            raise ToolInputError("there is no previous page to go back to.")
        self.history.pop()
        return self.history[-1]

    def act(self, command: str) -> Page:
        """Carry out one agent command (see the module docstring)."""
        parsed = parse_command(command)
        if parsed is None or parsed[0] not in COMMANDS:
            raise ToolInputError(f"{command[:60]!r} is not a browser command; write one of "
                                 "a URL, click[N], search[words], select[option] or back.")
        name, argument = parsed
        if name != "back" and not argument:
            raise ToolInputError(f"{name}[...] needs something inside the brackets.")
        if name == "open":
            return self.open(argument)
        if name == "click":
            return self.click(argument)
        if name == "search":
            return self.search(argument)
        if name == "select":
            return self.select(argument)
        return self.back()

    def view(self, *, show_url: bool = False, max_chars: int | None = None) -> str:
        """The current page as text, cut to ``max_chars``."""
        page = self.page
        text = "(no page open)" if page is None else page.view(show_url=show_url)
        if max_chars is not None and len(text) > max_chars:
            text = text[: max(max_chars - len(_CUT), 0)] + _CUT
        return text

    def clear(self) -> None:
        """Forget the history (a new episode)."""
        self.history.clear()

    def close(self) -> None:
        """Close the fetcher's connections (or browser process). Safe to call twice."""
        self.history.clear()
        self.fetcher.close()


class BrowserTool(Tool):
    """The ``browser`` tool: an agent browses with commands and reads pages as text.

    One tool instance holds one browsing session (its current page and
    history): give each env its own.

    Args:
        start_url: page opened before the first command, so ``click[N]`` and
            relative URLs work at once; ``None`` starts with no page.
        allowed_hosts, backend, timeout: see :class:`Browser`.
        max_chars: longest page text returned (the rest is cut with a marker).
    """

    name = "browser"
    description = ("Browse web pages as text. Give one command: a URL to open, click[N] to "
                   "follow link N or press button N, search[words] to use the page's search box, "
                   "select[option] to pick a form option, or back. Returns the page with "
                   "numbered links and buttons.")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"command": {"type": "string", "description":
                                   "a URL, click[N], search[words], select[option] or back"}},
        "required": ["command"],
    }
    tag_argument = "command"

    def __init__(self, *, start_url: str | None = None,
                 allowed_hosts: Collection[str] | None = LOOPBACK_HOSTS,
                 backend: str | Fetcher = "http", timeout: float = 10.0,
                 max_chars: int = 8000) -> None:
        check_number("max_chars", max_chars, minimum=100)
        self.browser = Browser(backend=backend, allowed_hosts=allowed_hosts, timeout=timeout)
        self.start_url = start_url
        self.max_chars = max_chars
        self._lock = threading.Lock()

    def run(self, *, command: str) -> str:
        with self._lock:
            try:
                if self.browser.page is None and self.start_url is not None:
                    self.browser.open(self.start_url)
                self.browser.act(command)
            except BrowserError as error:
                raise ToolInputError(str(error)) from error
            return self.browser.view(show_url=True, max_chars=self.max_chars)

    def close(self) -> None:
        self.browser.close()
