"""Policies backed by a model behind an OpenAI-compatible server.

Token in, token out: :meth:`OpenAIPolicy.complete_ids` sends the episode's
token ids as the prompt of ``/v1/completions`` with vLLM's
``return_token_ids`` and gets back the exact ids sampled and their logprobs
(vLLM and ``agentgym serve`` both speak it). :meth:`OpenAIPolicy.complete_chat`
serves APIs that return no ids (the manager then retokenizes and flags it).

The token path is the hot loop of every rollout, so it posts the JSON itself
over one pooled ``aiohttp`` session instead of going through the ``openai``
SDK: measured on two cores, the SDK and its httpx transport cost about 4 ms of
CPU per request, four times the manager's whole budget for a turn
(``benchmarks/bench_rollout.py``). Chat mode keeps the ``openai`` client.

Requests have a timeout, share a bounded connection pool, and are retried
with exponential backoff on what may pass (connection errors, timeouts,
429 and 5xx answers); a 4xx answer is a bug in the request and is not retried.

Given several servers, the policy spreads requests over them through a
:class:`~agentgym.rollout.servers.ServerPool`: fewest requests in flight
first, an episode (the ``key`` of its requests) kept on one server for its
prefix cache, and a server that fails taken out for a cool-down while the
request goes at once to another (every prompt carries the full token ids, so
an episode may move). One ``aiohttp`` session serves them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import httpx2
import openai
import orjson
from yarl import URL

from agentgym.errors import ServerRequestError
from agentgym.rollout.servers import Server, ServerPool, ServerStats

__all__ = ["Generation", "OpenAIPolicy", "SamplingConfig", "default_turn_timeout"]

_T = TypeVar("_T")
_RETRYABLE_SDK = (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
                  openai.InternalServerError)
_RETRYABLE_HTTP = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)


#: a turn's default time limit: this much for the queue and the prefill, and this much a token sampled
TURN_TIMEOUT_BASE_S, TURN_TIMEOUT_PER_TOKEN_S = 120.0, 2.0


def default_turn_timeout(max_tokens: int) -> float:
    """Seconds a turn sampling up to ``max_tokens`` tokens may take unless told otherwise: 120 s plus 2 s a
    token. A real model is slow on CPUs (SmolLM2-135M samples about 12 tokens/s alone on two cores, and a few
    a second per episode when 32 share the server), and a fixed limit either cut its long turns or
    waited minutes for a dead server's short ones.

    >>> default_turn_timeout(64)
    248.0
    """
    return TURN_TIMEOUT_BASE_S + TURN_TIMEOUT_PER_TOKEN_S * max_tokens


class _Retryable(Exception):
    """A failed attempt worth repeating (429, 5xx, a dropped or timed-out connection)."""

    def __init__(self, message: str, *, unreachable: bool) -> None:
        super().__init__(message)
        #: no answer came (refused, dropped, timed out), rather than an error status
        self.unreachable = unreachable


@dataclass(frozen=True, slots=True)
class SamplingConfig:
    """How the policy samples."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()


@dataclass(slots=True)
class Generation:
    """One sampled assistant turn."""

    text: str
    finish_reason: str
    #: sampled ids and their logprobs; None in chat mode
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    #: the prompt ids the server reports it saw (token mode), to check the prefix
    prompt_ids: list[int] | None = None
    policy_version: int | None = None
    attempts: int = 1
    #: False for an action played but not to be learned (a :class:`PlayOnly`): recorded with mask 0
    learn: bool = True
    #: True when ``logprobs`` came from the server (it may answer without them: zeros then)
    server_logprobs: bool = False


class OpenAIPolicy:
    """A model behind one OpenAI-compatible server, or several serving the same model.

    ``retries`` is the budget of each request: it may fail ``retries`` times
    plus once per extra server (each failure moves it to the next server up;
    while all are out, it waits for the first to come back, the cool-downs
    growing from ``backoff`` to ``max_backoff``).

    >>> async with OpenAIPolicy("http://127.0.0.1:8000/v1", "tiny") as policy:  # doctest: +SKIP
    ...     generation = await policy.complete_ids([1, 2, 3], key="episode-0")
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str,
        *,
        api_key: str = "EMPTY",
        sampling: SamplingConfig = SamplingConfig(),
        timeout: float | None = None,
        max_connections: int = 256,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
        weights_version: Callable[[], int] | None = None,
    ) -> None:
        #: which server each request goes to; its stats() say how each one fared
        self.pool = ServerPool([base_url] if isinstance(base_url, str) else base_url,
                               cooldown=backoff, max_cooldown=max_backoff)
        self.base_urls = [server.base_url for server in self.pool.servers]
        self.base_url = self.base_urls[0]
        self.model = model
        self.api_key = api_key
        self.sampling = sampling
        #: seconds one request may take (default: :func:`default_turn_timeout` of ``sampling.max_tokens``)
        self.timeout = timeout if timeout is not None else default_turn_timeout(sampling.max_tokens)
        self.max_connections = max_connections
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        #: the version of the weights the server has, as whoever pushes them knows it: a turn whose
        #: answer carries no ``policy_version`` (vLLM's) gets the version at its request's sending
        self.weights_version = weights_version
        # Made on first use, inside the event loop that uses it (chat clients: one per server).
        self._session: aiohttp.ClientSession | None = None

    async def complete_ids(
        self, prompt_ids: Sequence[int], *, max_tokens: int | None = None, seed: int | None = None,
        key: object = None,
    ) -> Generation:
        """Sample one turn after ``prompt_ids``; returns the sampled ids and logprobs.

        Requests with the same ``key`` (an episode id) go to the same server while it is up.
        """
        # The manager passes its episode's live list: serialised below before any await, so
        # it needs no copy (a copy of the whole context each turn is the cost to avoid).
        prompt = prompt_ids if isinstance(prompt_ids, list) else list(prompt_ids)
        body: dict[str, Any] = {
            "model": self.model, "prompt": prompt,
            "max_tokens": max_tokens or self.sampling.max_tokens,
            "temperature": self.sampling.temperature, "top_p": self.sampling.top_p, "logprobs": 1,
            "return_token_ids": True,  # vLLM's extension: the sampled ids themselves
        }
        if seed is not None:
            body["seed"] = seed
        if self.sampling.stop:
            body["stop"] = list(self.sampling.stop)
        content = orjson.dumps(body)  # ~20x faster than json for a long list of ids
        sent_at = self.weights_version() if self.weights_version is not None else None
        response, attempts = await self._with_servers(
            lambda server: self._post(server.completions_url, content), key)
        return _versioned(_generation(response, attempts), sent_at)

    async def _post(self, url: URL, content: bytes) -> dict[str, Any]:
        """One POST; raises _Retryable for what may pass and ServerRequestError for the rest."""
        session = self._http()
        try:
            async with session.post(url, data=content) as reply:
                payload = await reply.read()
                status = reply.status
        except asyncio.TimeoutError as exc:
            raise _Retryable(f"the request timed out: no answer within {self.timeout:g} s",
                             unreachable=True) from exc
        except _RETRYABLE_HTTP as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc or 'the connection failed'}",
                             unreachable=True) from exc
        if status == 429 or status >= 500:
            raise _Retryable(f"server error {status}: {_error_message(payload)}", unreachable=False)
        if status >= 400:  # the request is wrong: retrying won't help
            raise ServerRequestError(
                f"the server refused the request ({status}): {_error_message(payload)}")
        try:
            return orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise ServerRequestError(f"the server answered {status} with a body that is not "
                                     f"JSON: {payload[:200]!r}") from exc

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_connections),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers={"Authorization": f"Bearer {self.api_key}", "Content-Type": "application/json"},
            )
        return self._session

    async def complete_chat(
        self, messages: list[dict[str, str]], *, max_tokens: int | None = None, seed: int | None = None,
        key: object = None,
    ) -> Generation:
        """Sample one turn with chat completions (for servers that return no ids)."""

        async def create(server: Server) -> Any:
            try:
                return await self._chat(server).chat.completions.create(
                    model=self.model, messages=messages,  # type: ignore[arg-type]
                    max_tokens=max_tokens or self.sampling.max_tokens,
                    temperature=self.sampling.temperature, top_p=self.sampling.top_p, seed=seed,
                    stop=list(self.sampling.stop) or None,
                )
            except _RETRYABLE_SDK as exc:
                raise _Retryable(f"{type(exc).__name__}: {exc}",
                                 unreachable=isinstance(exc, openai.APIConnectionError)) from exc
            except openai.APIStatusError as exc:  # 4xx: the request is wrong
                raise ServerRequestError(
                    f"the server refused the request ({exc.status_code}): {exc}") from exc

        sent_at = self.weights_version() if self.weights_version is not None else None
        response, attempts = await self._with_servers(create, key)
        choice = response.choices[0]
        version = (response.model_extra or {}).get("policy_version")
        return _versioned(Generation(text=choice.message.content or "", finish_reason=choice.finish_reason or "",
                                     policy_version=int(version) if version is not None else None,
                                     attempts=attempts), sent_at)

    def _chat(self, server: Server) -> openai.AsyncOpenAI:
        if server.chat_client is None:
            server.chat_client = openai.AsyncOpenAI(
                base_url=server.base_url, api_key=self.api_key, max_retries=0, timeout=self.timeout,
                http_client=openai.DefaultAsyncHttpxClient(
                    limits=httpx2.Limits(max_connections=self.max_connections), timeout=self.timeout),
            )
        return server.chat_client

    async def _with_servers(self, attempt_once: Callable[[Server], Awaitable[_T]],
                            key: object) -> tuple[_T, int]:
        """Run ``attempt_once`` on the pool's choice of server until it succeeds.

        After a retryable failure (which may take its server out) the request
        goes again at once to another server that is up; with none but the one
        that failed, to that one after a backoff; with none at all, to the
        first one back from its cool-down.
        """
        pool = self.pool
        budget = self.retries + len(pool) - 1
        attempts = 0
        failed_on: Server | None = None
        while True:
            server = pool.pick(key, failed_on)
            if server is None:  # every server is cooling down: that wait is the backoff
                await asyncio.sleep(pool.ready_in())
                failed_on = None
                continue
            if server is failed_on:  # nowhere else to go
                await asyncio.sleep(min(self.backoff * 2 ** (attempts - 1), self.max_backoff))
            attempts += 1
            server.requests += 1
            server.outstanding += 1
            try:
                result = await attempt_once(server)
            except _Retryable as exc:
                pool.failed(server, str(exc), unreachable=exc.unreachable)
                failed_on = server
                if attempts > budget:
                    raise ServerRequestError(self._gave_up(str(exc), attempts)) from exc
                continue
            finally:
                server.outstanding -= 1
            pool.succeeded(server)
            return result, attempts

    def _gave_up(self, error: str, attempts: int) -> str:
        """Why a request failed for good: its last error, and with several servers each one's."""
        if len(self.pool) == 1:
            return f"{error} (after {attempts} attempts)"
        errors = "; ".join(f"{server.base_url}: {server.last_error}"
                           for server in self.pool.servers if server.last_error)
        return (f"no server answered the request (after {attempts} attempts over "
                f"{len(self.pool)} servers); last errors: {errors}")

    def server_stats(self) -> list[ServerStats]:
        """Per server: requests sent, retryable failures, episodes moved in, up now."""
        return self.pool.stats()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
        for server in self.pool.servers:
            if server.chat_client is not None:
                await server.chat_client.close()
                server.chat_client = None

    async def __aenter__(self) -> OpenAIPolicy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _versioned(generation: Generation, sent_at: int | None) -> Generation:
    """``generation`` with the version its request was sent at, when the server reported none (the
    older of the two a push during the request could mean: staleness is never understated)."""
    if generation.policy_version is None and sent_at is not None:
        generation.policy_version = sent_at
    return generation


def _generation(response: dict[str, Any], attempts: int) -> Generation:
    """A Generation from a ``/v1/completions`` answer with vLLM's token-id fields."""
    try:
        choice = response["choices"][0]
        token_ids = choice.get("token_ids")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ServerRequestError(f"the server's answer has no choices: {str(response)[:200]}") from exc
    if token_ids is None:
        raise ServerRequestError(
            "The server returned no token ids: it does not support return_token_ids "
            "(vLLM and `agentgym serve` do). Use --chat-mode for other servers."
        )
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
    version = response.get("policy_version")
    return Generation(
        text=choice.get("text") or "", finish_reason=choice.get("finish_reason") or "",
        token_ids=list(token_ids),
        logprobs=[float(x) for x in logprobs] if logprobs else [0.0] * len(token_ids),
        prompt_ids=choice.get("prompt_token_ids") or response.get("prompt_token_ids"),
        policy_version=int(version) if version is not None else None, attempts=attempts,
        server_logprobs=bool(logprobs),
    )


def _error_message(payload: bytes) -> str:
    """The ``error.message`` of an OpenAI-style error body, or the start of the raw body."""
    try:
        error = orjson.loads(payload).get("error")
        message = error.get("message") if isinstance(error, dict) else error
    except (orjson.JSONDecodeError, AttributeError):
        message = None
    return str(message) if message else payload[:200].decode("utf-8", "replace")
