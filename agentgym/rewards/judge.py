r"""An LLM judge as a reward: a rubric prompt, a parsed score, retries and a cache.

:class:`JudgeReward` asks any OpenAI-compatible server (vLLM, ``agentgym
serve``, a hosted API) to grade an answer to a question, optionally against a
reference, with chat completions, and reads a score in [0, 1] from the reply
(as ROLL's judge reward worker does)::

    judge = JudgeReward("http://127.0.0.1:8000/v1", "Qwen/Qwen3-8B")
    result = judge.score("What is 2 + 2?", "4", reference="4")
    result.score, result.parsed          # (1.0, True)
    await judge.ascore(...)              # the same, from asyncio

- The rubric is a template with ``{question}``, ``{answer}`` and
  ``{reference}``; it should ask for a final ``Score: N/10`` line (the
  default does). :func:`parse_score` reads ``Score: 7/10``, ``Rating: 7``,
  ``<score>0.7</score>``, ``70%`` or a reply that is only a number.
- A reply with no score is asked again (``parse_retries`` times, with a
  reminder of the format); after that the result carries ``fallback_score``
  and ``parsed=False``.
- Server errors (connection failures, timeouts, 429, 5xx) are retried with
  exponential backoff (``max_retries``); after that, and at once for any other
  4xx (wrong model, key or URL), :class:`~agentgym.errors.JudgeError` is raised:
  an unknown score is not a zero.
- Judgements are cached by (model, rubric, question, answer, reference): in
  memory (LRU, ``cache_size``) and, with ``cache_path``, in a SQLite file that
  outlives the process. Concurrent calls for the same key wait for one
  request. Fallback results are not cached (a later call asks again) unless
  ``cache_fallbacks=True``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Self

from agentgym.errors import ConfigError, JudgeError, MissingDependencyError
from agentgym.rewards.cache import ScoreCache

__all__ = ["DEFAULT_RUBRIC", "JudgeResult", "JudgeReward", "parse_score"]

DEFAULT_RUBRIC = """You are grading an answer to a question.

Question:
{question}

Reference answer (may be empty):
{reference}

Answer to grade:
{answer}

Decide whether the answer is correct and complete; if a reference is given, the answer must \
agree with it. Explain in at most three sentences, then end with a line of the form \
"Score: N/10", where N is 0 (wrong) to 10 (fully correct)."""

_PLACEHOLDER = re.compile(r"\{(question|answer|reference)\}")
_NUMBER = r"[+-]?\d+(?:\.\d+)?"
_SCORE_TAG = re.compile(rf"<\s*score\s*>\s*({_NUMBER})\s*(?:/\s*({_NUMBER}))?\s*(%)?\s*<\s*/\s*score\s*>",
                        re.IGNORECASE)
_SCORE_LINE = re.compile(
    rf"\b(?:score|rating|grade)\b[\s*_#]*(?:[:=]|\bis\b)[\s*_]*({_NUMBER})"
    rf"(?:\s*(?:/|\bout of\b)\s*({_NUMBER}))?\s*(%)?", re.IGNORECASE)
_BARE = re.compile(rf"^\s*({_NUMBER})\s*(?:/\s*({_NUMBER}))?\s*(%)?\s*\.?\s*$")


def parse_score(text: str, max_score: float = 10) -> float | None:
    """The score in a judge's reply, in [0, 1]; ``None`` when there is none.

    The last ``<score>...</score>`` wins, else the last ``Score:`` (or
    ``Rating:``, ``Grade:``, ``score is``) line, else a reply that is only a
    number. ``a/b`` is ``a/b``; ``p%`` is ``p/100``; a bare number is read on
    the rubric's 0..``max_score`` scale, except that a decimal between 0 and 1
    (``0.7``, ``1.0``) is read as already normalised. Out of range is ``None``.

    >>> parse_score("Mostly right. Score: 7/10"), parse_score("<score>0.7</score>")
    (0.7, 0.7)
    """
    if not isinstance(text, str):
        return None
    for pattern in (_SCORE_TAG, _SCORE_LINE, _BARE):
        matches = list(pattern.finditer(text))
        if matches:
            return _normalise(*matches[-1].groups(), max_score=max_score)
    return None


def _normalise(value: str, denominator: str | None, percent: str | None, *,
               max_score: float) -> float | None:
    number = float(value)
    if denominator is not None:
        scale = float(denominator)
        score = number / scale if scale > 0 else -1.0
    elif percent:
        score = number / 100
    elif "." in value and 0 <= number <= 1:
        score = number
    else:
        score = number / max_score
    return score if 0.0 <= score <= 1.0 else None


@dataclass(frozen=True, slots=True)
class JudgeResult:
    """One judgement.

    ``parsed`` is False when no reply had a score and ``score`` is the
    judge's ``fallback_score``; ``reply`` is the judge's last reply;
    ``requests`` counts the HTTP requests it took (0 when ``cached``).
    """

    score: float
    parsed: bool
    reply: str
    requests: int = 0
    cached: bool = False


class _Retryable(Exception):
    """A request failure that may pass: connection, timeout, 429 or 5xx."""


class _Conversation:
    """The messages of one judgement, and what each reply makes of it (no I/O)."""

    def __init__(self, judge: JudgeReward, prompt: str) -> None:
        self.judge = judge
        self.messages: list[dict[str, str]] = []
        if judge.system_prompt:
            self.messages.append({"role": "system", "content": judge.system_prompt})
        self.messages.append({"role": "user", "content": prompt})
        self.requests = 0
        self.asked = 0

    def take(self, reply: str, requests: int) -> JudgeResult | None:
        """The result, or None when the judge must be asked again."""
        self.requests += requests
        self.asked += 1
        score = parse_score(reply, self.judge.max_score)
        if score is not None:
            return JudgeResult(score, True, reply, self.requests)
        if self.asked > self.judge.parse_retries:
            return JudgeResult(self.judge.fallback_score, False, reply, self.requests)
        scale = f"{self.judge.max_score:g}"
        self.messages += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": f'Your reply has no score. Reply with one line: '
                                        f'"Score: N/{scale}", N from 0 to {scale}.'},
        ]
        return None


class JudgeReward:
    """Score answers with an LLM judge behind an OpenAI-compatible server.

    Args:
        base_url: the server's API root, ending in ``/v1``.
        model: the model name to request.
        rubric: the prompt, with ``{question}``, ``{answer}`` and (optionally)
            ``{reference}`` filled in one pass (other braces are left alone, so
            LaTeX is safe). It should ask for ``Score: N/<max_score>``.
        api_key: sent as the bearer token (any string for a local server).
        max_score: the top of the rubric's scale, for bare numbers.
        system_prompt: an optional system message before the rubric.
        temperature, max_tokens: sampling of the judge's reply.
        timeout: seconds one request may take.
        max_retries: retries of a request after a connection error, a timeout,
            a 429 or a 5xx, with backoff ``backoff * 2**n`` (at most ``max_backoff``).
        parse_retries: times to ask again when a reply has no score.
        fallback_score: the score when no reply had one (``parsed=False``).
        cache_size: judgements kept in memory (0: none).
        cache_path: a SQLite file that keeps judgements across runs.
        cache_fallbacks: cache fallback results too, so an answer the judge
            could not score is not asked about again (by default it is).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        rubric: str = DEFAULT_RUBRIC,
        *,
        api_key: str = "EMPTY",
        max_score: float = 10,
        system_prompt: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 512,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        parse_retries: int = 1,
        fallback_score: float = 0.0,
        cache_size: int = 4096,
        cache_path: str | os.PathLike[str] | None = None,
        cache_fallbacks: bool = False,
    ) -> None:
        _check_config(base_url, model, rubric, max_score, fallback_score)
        for name, value in (("max_retries", max_retries), ("parse_retries", parse_retries),
                            ("max_tokens", max_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an integer >= 0, got {value!r}.")
        for name, number in (("timeout", timeout), ("backoff", backoff), ("max_backoff", max_backoff)):
            if isinstance(number, bool) or not isinstance(number, (int, float)) or number < 0:
                raise ConfigError(f"{name} must be a number of seconds >= 0, got {number!r}.")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.rubric = rubric
        self.api_key = api_key
        self.max_score = float(max_score)
        self.system_prompt = system_prompt
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.parse_retries = parse_retries
        self.fallback_score = float(fallback_score)
        self.cache = ScoreCache(cache_size, cache_path)
        self.cache_fallbacks = bool(cache_fallbacks)
        self._pending: dict[str, concurrent.futures.Future[JudgeResult]] = {}
        self._lock = threading.Lock()
        self._client: Any = None
        self._async_client: Any = None
        self._async_loop: asyncio.AbstractEventLoop | None = None

    # -- the prompt and the cache ---------------------------------------------------------

    def prompt(self, question: str, answer: str, reference: str | None = None) -> str:
        """The rubric with the three fields filled in."""
        fields = {"question": question, "answer": answer,
                  "reference": reference if reference is not None else "(none)"}
        return _PLACEHOLDER.sub(lambda match: fields[match.group(1)], self.rubric)

    def key(self, question: str, answer: str, reference: str | None = None) -> str:
        """The cache key of a judgement: it covers the model and the rubric too."""
        text = json.dumps([self.model, self.rubric, self.max_score, question, answer, reference])
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def _cached(self, key: str) -> JudgeResult | None:
        hit = self.cache.get(key)
        return None if hit is None else JudgeResult(hit.score, hit.parsed, hit.detail, 0, cached=True)

    def _claim(self, key: str) -> tuple[JudgeResult | None, concurrent.futures.Future[JudgeResult],
                                        bool]:
        """A cached result; else the future of ``key``'s judgement and whether this caller
        must compute it (checked under one lock, so a judgement is never made twice)."""
        with self._lock:
            hit = self._cached(key)
            future = self._pending.get(key)
            if hit is not None or future is not None:
                return hit, future or concurrent.futures.Future(), False
            future = self._pending[key] = concurrent.futures.Future()
            return None, future, True

    def _settle(self, key: str, future: concurrent.futures.Future[JudgeResult],
                result: JudgeResult | None, error: BaseException | None) -> None:
        if result is not None and (result.parsed or self.cache_fallbacks):
            self.cache.put(key, result.score, result.reply, parsed=result.parsed)
        with self._lock:
            self._pending.pop(key, None)
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    # -- sync ------------------------------------------------------------------------------

    def score(self, question: str, answer: str, reference: str | None = None) -> JudgeResult:
        """Judge ``answer`` to ``question`` (against ``reference``, if given).

        Raises :class:`JudgeError` when the server refuses the request or
        keeps failing after ``max_retries``.
        """
        key = self.key(question, answer, reference)
        hit, future, mine = self._claim(key)
        if hit is not None:
            return hit
        if not mine:
            return replace(future.result(), requests=0, cached=True)
        result: JudgeResult | None = None
        try:
            conversation = _Conversation(self, self.prompt(question, answer, reference))
            while result is None:
                result = conversation.take(*self._request(conversation.messages))
        except BaseException as error:
            self._settle(key, future, None, error)
            raise
        self._settle(key, future, result, None)
        return result

    def __call__(self, question: str, answer: str, reference: str | None = None) -> float:
        """The score alone (see :meth:`score`)."""
        return self.score(question, answer, reference).score

    def _request(self, messages: list[dict[str, str]]) -> tuple[str, int]:
        """The judge's reply to ``messages`` and the requests it took (with retries)."""
        with self._lock:  # threads share one client (it is thread-safe); make it once
            if self._client is None:
                self._client = _openai().OpenAI(base_url=self.base_url, api_key=self.api_key,
                                                timeout=self.timeout, max_retries=0)
            client = self._client
        for attempt in range(1, self.max_retries + 2):
            try:
                with self._classified():
                    return _reply_text(client.chat.completions.create(**self._body(messages))), attempt
            except _Retryable as error:
                if attempt > self.max_retries:
                    raise self._gave_up(error, attempt) from error
                time.sleep(self._delay(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    # -- async -----------------------------------------------------------------------------

    async def ascore(self, question: str, answer: str, reference: str | None = None) -> JudgeResult:
        """:meth:`score` for asyncio. Inside ``async with judge:`` one client is reused."""
        key = self.key(question, answer, reference)
        hit, future, mine = self._claim(key)
        if hit is not None:
            return hit
        if not mine:
            return replace(await asyncio.wrap_future(future), requests=0, cached=True)
        result: JudgeResult | None = None
        try:
            conversation = _Conversation(self, self.prompt(question, answer, reference))
            while result is None:
                result = conversation.take(*await self._arequest(conversation.messages))
        except BaseException as error:
            self._settle(key, future, None, error)
            raise
        self._settle(key, future, result, None)
        return result

    async def _arequest(self, messages: list[dict[str, str]]) -> tuple[str, int]:
        if self._async_client is not None and self._async_loop is asyncio.get_running_loop():
            return await self._arequest_with(self._async_client, messages)
        # Outside ``async with``: a client for this call only, closed in its own loop.
        async with self._new_async_client() as client:
            return await self._arequest_with(client, messages)

    async def _arequest_with(self, client: Any, messages: list[dict[str, str]]) -> tuple[str, int]:
        for attempt in range(1, self.max_retries + 2):
            try:
                with self._classified():
                    return _reply_text(await client.chat.completions.create(**self._body(messages))), attempt
            except _Retryable as error:
                if attempt > self.max_retries:
                    raise self._gave_up(error, attempt) from error
                await asyncio.sleep(self._delay(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _new_async_client(self) -> Any:
        return _openai().AsyncOpenAI(base_url=self.base_url, api_key=self.api_key,
                                     timeout=self.timeout, max_retries=0)

    async def __aenter__(self) -> Self:
        self._async_client = self._new_async_client()
        self._async_loop = asyncio.get_running_loop()
        return self

    async def __aexit__(self, *exc: object) -> None:
        client, self._async_client, self._async_loop = self._async_client, None, None
        if client is not None:
            await client.close()

    # -- shared ----------------------------------------------------------------------------

    def _body(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        return {"model": self.model, "messages": messages, "temperature": self.temperature,
                "max_tokens": self.max_tokens}

    @contextlib.contextmanager
    def _classified(self) -> Iterator[None]:
        """Sorts a request's failure, sync or async: :class:`_Retryable` for what may pass,
        :class:`JudgeError` at once for any other error status."""
        openai = _openai()
        try:
            yield
        except (openai.APIConnectionError, openai.RateLimitError,
                openai.InternalServerError) as error:  # APITimeoutError is a connection error
            raise _Retryable(_describe(error)) from error
        except openai.APIStatusError as error:
            raise self._refused(error) from error

    def _delay(self, attempt: int) -> float:
        return min(self.backoff * 2 ** (attempt - 1), self.max_backoff)

    def _gave_up(self, error: Exception, attempts: int) -> JudgeError:
        return JudgeError(f"The judge at {self.base_url} failed {attempts} times: {error}. Is the "
                          "server up and answering? (max_retries and timeout set the patience.)")

    def _refused(self, error: Any) -> JudgeError:
        return JudgeError(
            f"The judge at {self.base_url} refused the request ({error.status_code}): "
            f"{_describe(error)}. Check base_url, model ({self.model!r}) and api_key."
        )

    def close(self) -> None:
        """Close the HTTP client and the cache file."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
        self.cache.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_config(base_url: str, model: str, rubric: str, max_score: float,
                  fallback_score: float) -> None:
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"base_url must be an http(s) URL ending in /v1, got {base_url!r}.")
    if not isinstance(model, str) or not model:
        raise ConfigError(f"model must be the served model's name, got {model!r}.")
    if not isinstance(rubric, str) or "{answer}" not in rubric:
        raise ConfigError("rubric must be a str containing {answer} (and usually {question} and "
                          "{reference}), where the answer to grade goes.")
    if isinstance(max_score, bool) or not isinstance(max_score, (int, float)) or max_score <= 0:
        raise ConfigError(f"max_score must be a positive number, got {max_score!r}.")
    if isinstance(fallback_score, bool) or not isinstance(fallback_score, (int, float)) \
            or not 0 <= fallback_score <= 1:
        raise ConfigError(f"fallback_score must be in [0, 1], got {fallback_score!r}.")


def _openai() -> Any:
    try:
        import openai
    except ImportError as error:
        raise MissingDependencyError(
            "JudgeReward talks to the judge with the openai client, which is not installed: "
            f"{MissingDependencyError.install_hint('rollout', 'openai')}."
        ) from error
    return openai


def _reply_text(response: Any) -> str:
    """The text of a chat completion; empty when the body has none (read as no score)."""
    try:
        return response.choices[0].message.content or ""
    except (AttributeError, IndexError, TypeError):
        return ""


def _describe(error: Any) -> str:
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    return f"{type(error).__name__}: {message}"
