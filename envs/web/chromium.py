"""Headless Chromium as a browser backend, for pages that build themselves with JavaScript.

:class:`ChromiumFetcher` loads each page in Debian's ``chromium`` (never a
browser download) driven by Playwright, waits for the ``load`` event, and
hands the DOM *after* its scripts ran to the same parser as the plain HTTP
backend::

    browser = Browser(backend="chromium")        # or WebShopEnv(backend="chromium")

Setup: ``scripts/setup.sh browser`` and ``apt-get install chromium``
(or point ``executable`` / ``AGENTGYM_CHROMIUM`` at another Chromium build).
Chromium starts with a new empty profile and the flags that keep it off the
network (no background requests, updates or sync); every request a page makes,
scripts and images included, for a host not in ``allowed_hosts`` goes to a
local port that refuses it (Chromium's proxy settings), so pages cannot reach
beyond ``allowed_hosts`` either.

What it does not do: run a page's click handlers. Links and form submissions
are followed as with the HTTP backend (a POST is sent by a form the fetcher
adds to the page, so the answer is rendered by Chromium too).

Playwright's sync API must stay on the thread that started it, so every call
runs on one worker thread of the fetcher's own; any thread may call
:meth:`ChromiumFetcher.fetch`.
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import tempfile
import threading
import weakref
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from agentgym.core import check_number
from agentgym.envs.web.browser import LOOPBACK_HOSTS, Fetched, check_host
from agentgym.errors import BrowserError, ConfigError, MissingDependencyError

__all__ = ["CHROMIUM_FLAGS", "ChromiumFetcher", "find_chromium"]

#: Flags known to work on these machines: no sandbox (root), no GPU, and no
#: background networking (a closed network otherwise refuses a stream of requests).
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")
_T = TypeVar("_T")
_WAITS = ("load", "domcontentloaded", "networkidle")
_POST = """([action, fields]) => {
    const form = document.createElement("form");
    form.method = "POST";
    form.action = action;
    for (const [name, value] of fields) {
        const input = document.createElement("input");
        input.type = "hidden"; input.name = name; input.value = value;
        form.appendChild(input);
    }
    (document.body || document.documentElement).appendChild(form);
    form.submit();
}"""


def find_chromium(executable: str | None = None) -> str | None:
    """Path of a Chromium binary: ``executable``, ``$AGENTGYM_CHROMIUM``, or ``chromium`` on PATH."""
    for candidate in (executable, os.environ.get("AGENTGYM_CHROMIUM"), shutil.which("chromium"),
                      "/usr/bin/chromium"):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


class _Worker:
    """One daemon thread that runs the jobs given to it, in order."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], Future[Any]] | None]
        self._jobs = queue.SimpleQueue()
        # A daemon: interpreter exit joins non-daemon threads *before* the
        # finalizer that stops Chromium could run.
        self._thread = threading.Thread(target=self._loop, name="agentgym-chromium", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            function, args, future = job
            try:
                future.set_result(function(*args))
            except BaseException as error:  # noqa: BLE001  (handed to the caller's thread, which re-raises it)
                future.set_exception(error)

    def call(self, function: Callable[..., _T], *args: Any) -> _T:
        future: Future[_T] = Future()
        self._jobs.put((function, args, future))
        return future.result()

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join()


def _network_flags(allowed: frozenset[str] | None, dead_port: int) -> list[str]:
    """Flags that send every request for a host not allowed to a port that refuses it.

    Chromium enforces this itself (scripts, images and redirects included), so
    no request waits on Python. ``<-loopback>`` drops Chromium's implicit
    bypass of loopback hosts, so only the listed ones skip the dead proxy; with
    a proxy, Chromium does not resolve the names of the hosts it refuses either.
    """
    if allowed is None:
        return []
    bypass = ";".join(f"[{host}]" if ":" in host else host for host in sorted(allowed))
    return [f"--proxy-server=http://127.0.0.1:{dead_port}", f"--proxy-bypass-list=<-loopback>;{bypass}"]


def _launch(executable: str, profile: str, flags: list[str], timeout_ms: float) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    driver = sync_playwright().start()
    started = False
    try:
        context = driver.chromium.launch_persistent_context(
            profile, executable_path=executable, headless=True, args=[*CHROMIUM_FLAGS, *flags])
        started = True
    finally:
        if not started:
            driver.stop()
    context.set_default_timeout(timeout_ms)
    page = context.pages[0] if context.pages else context.new_page()
    return {"driver": driver, "context": context, "page": page}


def _shut_down(worker: _Worker, state: dict[str, Any], profile: str, dead: socket.socket) -> None:
    def close() -> None:
        if "context" in state:
            state["context"].close()
        if "driver" in state:
            state["driver"].stop()

    try:
        worker.call(close)
    finally:
        worker.stop()
        dead.close()
        shutil.rmtree(profile, ignore_errors=True)


class ChromiumFetcher:
    """A :class:`~agentgym.envs.web.browser.Fetcher` that renders pages in headless Chromium.

    Args:
        allowed_hosts: hosts pages and their resources may come from (``None``: any).
        timeout: seconds a page may take to load.
        executable: the Chromium binary (default: see :func:`find_chromium`).
        wait_until: when a page counts as loaded: ``"load"`` (its ``load``
            event: scripts in the page ran), ``"domcontentloaded"``, or
            ``"networkidle"`` (no request for 0.5 s: for pages that fetch their
            content after loading; slower).
    """

    def __init__(self, *, allowed_hosts: Collection[str] | None = LOOPBACK_HOSTS,
                 timeout: float = 10.0, executable: str | None = None,
                 wait_until: str = "load") -> None:
        check_number("timeout", timeout, minimum=0.001, integer=False)
        if wait_until not in _WAITS:
            raise ConfigError(f"wait_until must be one of {', '.join(_WAITS)}, got {wait_until!r}.")
        self.wait_until = wait_until
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError as error:
            raise MissingDependencyError(
                "The chromium backend needs the playwright package, which is not installed: "
                f"{MissingDependencyError.install_hint('browser', 'playwright')}, and apt-get install chromium."
            ) from error
        from playwright.sync_api import Error as PlaywrightError

        binary = find_chromium(executable)
        if binary is None:
            raise BrowserError("No Chromium binary found (tried executable=, $AGENTGYM_CHROMIUM, "
                               "chromium on PATH): apt-get install chromium, or pass executable=.")
        self.allowed_hosts = None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)
        self.timeout = float(timeout)
        self._lock = threading.Lock()
        profile = tempfile.mkdtemp(prefix="agentgym-chromium-")
        # Bound but never listening: a connection to it is refused at once.
        dead = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        dead.bind(("127.0.0.1", 0))
        flags = _network_flags(self.allowed_hosts, dead.getsockname()[1])
        worker = _Worker()
        state: dict[str, Any] = {}
        self._state = state
        self._worker = worker
        self._finalizer = weakref.finalize(self, _shut_down, worker, state, profile, dead)
        try:
            state.update(worker.call(_launch, binary, profile, flags, self.timeout * 1000))
        except (PlaywrightError, OSError) as error:
            self._finalizer()
            raise BrowserError(f"Chromium ({binary}) did not start: {error}") from error

    def fetch(self, method: str, url: str, data: Sequence[tuple[str, str]] | None = None) -> Fetched:
        check_host(url, self.allowed_hosts)
        if not self._finalizer.alive:
            raise BrowserError("this Chromium fetcher is closed; make a new one.")
        from playwright.sync_api import Error as PlaywrightError

        with self._lock:
            try:
                return self._worker.call(self._load, method, url, list(data or []))
            except PlaywrightError as error:
                raise BrowserError(f"Chromium could not load {url[:200]!r}: {error.message}") from error

    def _load(self, method: str, url: str, data: list[tuple[str, str]]) -> Fetched:
        page = self._state["page"]
        if method == "GET":
            response = page.goto(url, wait_until=self.wait_until)
        else:
            with page.expect_navigation(wait_until=self.wait_until) as navigation:
                page.evaluate(_POST, [url, data])
            response = navigation.value
        status = response.status if response is not None else 200
        return Fetched(page.url, status, "text/html", page.content())

    def close(self) -> None:
        """Close Chromium and delete its profile. Safe to call twice."""
        self._finalizer()
