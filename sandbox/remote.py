"""RemoteSandbox: run code on sandbox services (``agentgym sandbox serve``) on other hosts.

    with RemoteSandbox(["http://gpu1:8100", "http://gpu2:8100"], token="T") as sb:
        sb.run("print(sum(range(1000)))").stdout   # '499500\\n', from whichever host was least busy

    open_sandbox("http://gpu1:8100,http://gpu2:8100")   # the same, as a backend string

Each run goes to the host with the fewest runs of this client in flight (ties
taken in turn). A host that fails (refuses the connection, times out, drops
it, answers 5xx or refuses the token) sits out a cool-down and the run goes to
the next host; a host is tried at most once per run, and hosts that are
cooling down are tried last rather than never. Sending a run again is safe:
a run has no effect outside its own sandbox. When every host failed,
:class:`SandboxError` says what each one answered: that is the sandbox's own
failure, as with a lost Docker engine.

Whatever the code does comes back as an :class:`ExecResult`, never an
exception. A run the service refuses for its size (code, stdin or files over
the service's caps, which model output can reach) is an ``ExecResult`` too,
with ``exit_code=None`` and the reason in ``stderr``; arguments the caller got
wrong (a language, a file path) raise :class:`ConfigError` here, before
anything is sent, as on every backend.

The isolation is the service's (``isolation`` says which backend each host
runs), and so are the limits but the timeout: a run's timeout is the one
given, else this sandbox's ``Limits.timeout``, sent with the request. Given
no ``limits``, the client takes the first answering service's, so that
``limits`` says what the runs get. The
token comes from ``token=`` or ``AGENTGYM_SANDBOX_TOKEN``. Requests go
straight to the hosts (proxy variables are ignored).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentgym.core import check_number
from agentgym.errors import ConfigError, MissingDependencyError, SandboxError, SandboxUnavailable
from agentgym.sandbox.base import ExecResult, Limits, Sandbox
from agentgym.sandbox.protocol import build_request, valid_text

__all__ = ["TOKEN_ENV", "URL_ENV", "RemoteSandbox", "is_sandbox_url", "parse_urls"]

_log = logging.getLogger("agentgym.sandbox")

#: Where the code env and the python tool look for a service when given no sandbox or URL.
URL_ENV = "AGENTGYM_SANDBOX_URL"
#: The service's token, for the client and for ``agentgym sandbox serve``.
TOKEN_ENV = "AGENTGYM_SANDBOX_TOKEN"
_FIELDS = ("stdout", "stderr", "exit_code", "timed_out", "oom", "duration", "truncated")


def is_sandbox_url(backend: str) -> bool:
    """Whether a backend string names sandbox services (``http://...``) rather than a backend."""
    return backend.startswith(("http://", "https://"))


def parse_urls(urls: str | Sequence[str]) -> list[str]:
    """Service URLs from a list or a comma-separated string; ConfigError for one that is not."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    parsed = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"sandbox URLs must be strings, got {type(item).__name__}.")
        url = item.strip().rstrip("/")
        parts = urllib.parse.urlsplit(url)
        try:
            parts.port  # noqa: B018 -- raises ValueError on a bad port
        except ValueError:
            parts = parts._replace(netloc="")
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path:
            raise ConfigError(f"{item!r} is not a sandbox service URL; write it like "
                              "'http://127.0.0.1:8100' (several: comma-separated).")
        parsed.append(url)
    if not parsed:
        raise ConfigError("No sandbox service URL given; pass urls= or set "
                          f"{URL_ENV}=http://HOST:8100.")
    return parsed


class _HostFailed(Exception):
    """One host could not run one run (internal: the client moves on to the next host)."""


class _Host:
    """One service: its URL, this client's runs in flight there, and its cool-down."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.in_flight = 0
        self.cool_until = 0.0
        self.problem = ""


class RemoteSandbox(Sandbox):
    """Runs code on one or more sandbox services, spread by load (see this module's docstring).

    Args:
        urls: the services, ``"http://host:port"`` each (a list, or comma-separated).
        limits: ``timeout`` is sent with each run; the other limits are the services'.
            Default: the limits of the first service that answers.
        token: the services' token (default: ``AGENTGYM_SANDBOX_TOKEN``).
        cooldown: seconds a failed host sits out.
        connect_timeout: seconds to connect to a host before it counts as failed.
        wait_timeout: seconds a run may wait for a free slot on a busy host, on top of its
            own timeout, before that host counts as failed.
        max_in_flight: runs of this client at once (threads of ``arun``, HTTP connections).
    """

    name = "remote"

    def __init__(self, urls: str | Sequence[str], limits: Limits | None = None, *,
                 token: str | None = None, cooldown: float = 30.0, connect_timeout: float = 5.0,
                 wait_timeout: float = 300.0, max_in_flight: int = 64) -> None:
        super().__init__(limits)
        self._given_limits = limits is not None
        try:
            import httpx2
        except ImportError as exc:
            raise MissingDependencyError("The remote sandbox needs httpx2: "
                                         f"{MissingDependencyError.install_hint('sandbox-service')}.") from exc
        for field, value in (("cooldown", cooldown), ("connect_timeout", connect_timeout),
                             ("wait_timeout", wait_timeout)):
            check_number(f"RemoteSandbox {field}", value, minimum=0.001, integer=False)
        check_number("RemoteSandbox max_in_flight", max_in_flight, minimum=1)
        self._hosts = [_Host(url) for url in parse_urls(urls)]
        self.urls = [host.url for host in self._hosts]
        self.cooldown, self.connect_timeout, self.wait_timeout = cooldown, connect_timeout, wait_timeout
        token = token or os.environ.get(TOKEN_ENV) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx2.Client(headers=headers, trust_env=False,
                                     limits=httpx2.Limits(max_connections=max_in_flight))
        self._errors = (httpx2.HTTPError, ValueError)  # transport failures, bad JSON
        self._lock = threading.Lock()
        self._turn = 0
        self._runs = ThreadPoolExecutor(max_workers=max_in_flight,
                                        thread_name_prefix="agentgym-sandbox-remote")
        self._closed = False
        try:
            self.isolation = self._probe()
        except BaseException:
            self.close()
            raise

    def _probe(self) -> str:
        """Ask every host for ``/health``; the isolation they offer. SandboxUnavailable if none answers."""
        backends = []
        for host in self._hosts:
            try:
                response = self._client.get(f"{host.url}/health", timeout=self.connect_timeout)
                self._check_status(host, response)
                answer = response.json()
                backends.append(f"{host.url}: {answer['isolation']}")
                if len(backends) == 1 and not self._given_limits:
                    self.limits = Limits(**answer["limits"])
            except (_HostFailed, KeyError, TypeError, ConfigError, *self._errors) as exc:
                self._fail(host, str(exc) or type(exc).__name__)
        if not backends:
            raise SandboxUnavailable("No sandbox service can be used: " + self._problems() +
                                     ". Check the URLs (start a service with `agentgym sandbox "
                                     "serve`) and the token.")
        for host in self._hosts:
            if host.problem:
                _log.warning("Sandbox service %s is not answering (%s); it sits out %g s.",
                             host.url, host.problem, self.cooldown)
        return "remote services; " + "; ".join(backends)

    # -- choosing and failing hosts -------------------------------------------------

    def _order(self) -> list[_Host]:
        """Hosts to try, best first: ready ones by fewest in flight (ties in turn), then cooling."""
        with self._lock:
            now = time.monotonic()
            self._turn = (self._turn + 1) % len(self._hosts)
            turned = self._hosts[self._turn:] + self._hosts[:self._turn]
            ready = sorted((h for h in turned if h.cool_until <= now), key=lambda h: h.in_flight)
            cooling = sorted((h for h in turned if h.cool_until > now), key=lambda h: h.cool_until)
            return ready + cooling

    def _fail(self, host: _Host, problem: str) -> None:
        with self._lock:
            host.problem = problem
            host.cool_until = time.monotonic() + self.cooldown

    def hosts(self) -> list[dict[str, Any]]:
        """Each host as this client sees it: ``url``, ``in_flight``, ``cooling`` (seconds of
        cool-down left) and ``problem`` (its last failure, '' if none)."""
        with self._lock:
            now = time.monotonic()
            return [{"url": h.url, "in_flight": h.in_flight,
                     "cooling": max(0.0, h.cool_until - now), "problem": h.problem}
                    for h in self._hosts]

    def _problems(self) -> str:
        return "; ".join(f"{host.url}: {host.problem}" for host in self._hosts if host.problem)

    def _check_status(self, host: _Host, response: Any) -> None:
        """Raise _HostFailed for an answer that says the host, not the code, is the problem."""
        if response.status_code in (401, 403):
            raise _HostFailed(f"refused the token (HTTP {response.status_code}); pass token= the "
                              f"service's --token, or set {TOKEN_ENV}")
        if response.status_code >= 500 or response.status_code in (404, 405, 411, 429):
            raise _HostFailed(f"HTTP {response.status_code}: {_message(response)}")

    # -- running ----------------------------------------------------------------------

    def run(self, code: str, *, language: str = "python", stdin: str = "",
            files: Mapping[str, str | bytes] | None = None,
            timeout: float | None = None) -> ExecResult:
        if self._closed:
            raise SandboxError("This sandbox is closed; open a new one.")
        # Checks the caller's arguments exactly as the other backends do (ConfigError), and
        # makes the text valid Unicode (lone surrogates cannot be sent as UTF-8 JSON).
        request = build_request(code, language=language, stdin=stdin, files=files,
                                timeout=timeout, limits=self.limits)
        body = {"code": request["code"], "language": language, "stdin": request["stdin"],
                "files": {name: {"base64": content} for name, content in request["files"]},
                "timeout": request["timeout"]}
        for host in self._order():
            try:
                return self._run_on(host, body)
            except _HostFailed as exc:
                self._fail(host, str(exc))
                _log.warning("Sandbox service %s failed a run (%s); it sits out %g s.",
                             host.url, exc, self.cooldown)
        raise SandboxError("No sandbox service could run the code: " + self._problems())

    def _run_on(self, host: _Host, body: dict[str, Any]) -> ExecResult:
        import httpx2

        timeout = httpx2.Timeout(body["timeout"] + self.wait_timeout,
                                 connect=self.connect_timeout)
        with self._lock:
            host.in_flight += 1
        try:
            response = self._client.post(f"{host.url}/run", json=body, timeout=timeout)
            self._check_status(host, response)
            if response.status_code != 200:  # the service will not run this content
                return ExecResult(stdout="", stderr=f"[sandbox: the service refused the run: "
                                                    f"{_message(response)}]\n", exit_code=None)
            reply = response.json()
            if not (isinstance(reply["stdout"], str) and isinstance(reply["stderr"], str)):
                raise TypeError("stdout and stderr must be strings")
            result = ExecResult(**{field: reply[field] for field in _FIELDS})
            # A service could send lone surrogates (as JSON escapes): the caller gets valid text.
            return dataclasses.replace(result, stdout=valid_text(result.stdout),
                                       stderr=valid_text(result.stderr))
        except (KeyError, TypeError, *self._errors) as exc:
            raise _HostFailed(f"{type(exc).__name__}: {exc}") from exc
        finally:
            with self._lock:
                host.in_flight -= 1

    def close(self) -> None:
        """Close the connections (the services keep running). Safe to call twice."""
        self._closed = True
        self._runs.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def __repr__(self) -> str:
        return f"RemoteSandbox({self.urls!r})"


def _message(response: Any) -> str:
    """The service's error message, or the start of whatever body came."""
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:300] or response.reason_phrase
