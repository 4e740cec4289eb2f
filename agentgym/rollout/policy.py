"""Policies backed by a model behind an OpenAI-compatible server.

Token in, token out: :meth:`OpenAIPolicy.complete_ids` sends the episode's
token ids as the prompt of ``/v1/completions`` with vLLM's
``return_token_ids`` and gets back the exact ids sampled and their logprobs
(vLLM and ``agentgym serve`` both speak it). :meth:`OpenAIPolicy.complete_chat`
serves APIs that return no ids (the manager then retokenizes and flags it).

Requests have a timeout, share a bounded connection pool, and are retried
with exponential backoff on what may pass (connection errors, timeouts,
429 and 5xx answers); a 4xx answer is a bug in the request and is not retried.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
from openai.types import Completion

from agentgym.errors import ServerRequestError

__all__ = ["Generation", "OpenAIPolicy", "SamplingConfig"]

_CONNECTIONS_PER_CLIENT = 2
_RETRYABLE = (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
              openai.InternalServerError)


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


class OpenAIPolicy:
    """A model behind an OpenAI-compatible server.

    >>> async with OpenAIPolicy("http://127.0.0.1:8000/v1", "tiny") as policy:  # doctest: +SKIP
    ...     generation = await policy.complete_ids([1, 2, 3])
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str = "EMPTY",
        sampling: SamplingConfig = SamplingConfig(),
        timeout: float = 120.0,
        max_connections: int = 256,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
    ) -> None:
        self.model = model
        self.sampling = sampling
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        # httpx's pool does work in proportion to its open connections on every
        # request, so many concurrent episodes share several small pools instead.
        shards = max(1, -(-max_connections // _CONNECTIONS_PER_CLIENT))
        per_client = -(-max_connections // shards)
        limits = httpx2.Limits(max_connections=per_client, max_keepalive_connections=per_client)
        tls = ssl.create_default_context()  # one for all clients: each costs ~30 ms to build
        self.clients = [
            openai.AsyncOpenAI(
                base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout,
                http_client=openai.DefaultAsyncHttpxClient(limits=limits, timeout=timeout, verify=tls),
            )
            for _ in range(shards)
        ]
        self._next_client = itertools.cycle(self.clients)

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The client for the next request (round robin over the shards)."""
        return next(self._next_client)

    async def complete_ids(
        self, prompt_ids: Sequence[int], *, max_tokens: int | None = None, seed: int | None = None
    ) -> Generation:
        """Sample one turn after ``prompt_ids``; returns the sampled ids and logprobs."""
        body: dict[str, Any] = {
            "model": self.model, "prompt": list(prompt_ids),
            "max_tokens": max_tokens or self.sampling.max_tokens,
            "temperature": self.sampling.temperature, "top_p": self.sampling.top_p, "logprobs": 1,
            "return_token_ids": True,  # vLLM's extension: the sampled ids themselves
        }
        if seed is not None:
            body["seed"] = seed
        if self.sampling.stop:
            body["stop"] = list(self.sampling.stop)
        # client.post with the JSON already encoded, rather than completions.create:
        # the SDK walks a token-id prompt element by element (~30 ms for 1,000 ids)
        # and deep-copies a dict body on every request.
        client = self.client
        response, attempts = await self._with_retries(
            client.post, "/completions", content=json.dumps(body).encode(), cast_to=Completion,
            options={"headers": {"Content-Type": "application/json"}},
        )
        choice = response.choices[0]
        extra = choice.model_extra or {}
        token_ids = extra.get("token_ids")
        if token_ids is None:
            raise ServerRequestError(
                "The server returned no token ids: it does not support return_token_ids "
                "(vLLM and `agentgym serve` do). Use --chat-mode for other servers."
            )
        logprobs = choice.logprobs.token_logprobs if choice.logprobs else None
        return Generation(
            text=choice.text, finish_reason=choice.finish_reason or "", token_ids=list(token_ids),
            logprobs=[float(x) for x in logprobs] if logprobs else [0.0] * len(token_ids),
            prompt_ids=extra.get("prompt_token_ids") or (response.model_extra or {}).get("prompt_token_ids"),
            policy_version=_policy_version(response), attempts=attempts,
        )

    async def complete_chat(
        self, messages: list[dict[str, str]], *, max_tokens: int | None = None, seed: int | None = None
    ) -> Generation:
        """Sample one turn with chat completions (for servers that return no ids)."""
        client = self.client
        response, attempts = await self._with_retries(
            client.chat.completions.create,
            model=self.model, messages=messages, max_tokens=max_tokens or self.sampling.max_tokens,
            temperature=self.sampling.temperature, top_p=self.sampling.top_p, seed=seed,
            stop=list(self.sampling.stop) or None,
        )
        choice = response.choices[0]
        return Generation(text=choice.message.content or "", finish_reason=choice.finish_reason or "",
                          policy_version=_policy_version(response), attempts=attempts)

    async def _with_retries(self, call: Any, *args: Any, **kwargs: Any) -> tuple[Any, int]:
        for attempt in range(1, self.retries + 2):
            try:
                return await call(*args, **kwargs), attempt
            except _RETRYABLE as exc:
                if attempt > self.retries:
                    raise ServerRequestError(
                        f"{type(exc).__name__} after {attempt} attempts: {exc}"
                    ) from exc
                await asyncio.sleep(min(self.backoff * 2 ** (attempt - 1), self.max_backoff))
            except openai.APIStatusError as exc:  # 4xx: the request is wrong, retrying won't help
                raise ServerRequestError(f"the server refused the request ({exc.status_code}): {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        for client in self.clients:
            await client.close()

    async def __aenter__(self) -> OpenAIPolicy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _policy_version(response: Any) -> int | None:
    version = (response.model_extra or {}).get("policy_version")
    return int(version) if version is not None else None
