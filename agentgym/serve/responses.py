"""Building OpenAI (and vLLM-extended) responses and SSE streams from engine updates.

Logprobs follow vLLM's layout: completions report ``tokens``,
``token_logprobs``, ``top_logprobs`` (the sampled token first, then the top
``logprobs`` others, as a dict keyed by token text) and ``text_offset``;
chat reports ``logprobs.content[]`` entries with ``token``, ``logprob``,
``bytes`` and ``top_logprobs`` (the first ``top_logprobs`` entries of that
same list).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass

from agentgym.errors import ServeError
from agentgym.serve.batch import SequenceUpdate
from agentgym.serve.engine import BaseEngine, Generation
from agentgym.serve.protocol import (
    ChatCompletionLogProb,
    ChatCompletionLogProbs,
    ChatCompletionLogProbsContent,
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
    ChatCompletionStreamChoice,
    ChatCompletionStreamResponse,
    ChatMessage,
    CompletionLogProbs,
    CompletionResponse,
    CompletionResponseChoice,
    CompletionStreamChoice,
    CompletionStreamResponse,
    DeltaMessage,
    ErrorInfo,
    ErrorResponse,
    PromptLogprob,
    PromptTokenUsageInfo,
    UsageInfo,
)

__all__ = [
    "chat_logprobs",
    "chat_response",
    "chat_stream",
    "completion_logprobs",
    "completion_response",
    "completion_stream",
    "DONE",
    "error_event",
    "Job",
]

DONE = "data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class Job:
    """What a response needs besides the updates: the request's shape and extensions."""

    model: str
    prompts: list[list[int]]
    n: int
    logprobs: int | None  # None: no logprobs; else how many alternatives
    return_token_ids: bool
    include_usage: bool = False
    prompt_logprobs: list[list[dict[int, tuple[float, int]] | None]] | None = None
    """per prompt, vLLM's prompt_logprobs as (logprob, rank) by token id (asked for with prompt_logprobs)"""


def _entries(engine: BaseEngine, token: int, logprob: float,
             top: list[tuple[int, float]]) -> list[tuple[str, float]]:
    """The sampled token first, then the alternatives that are not it (vLLM's order)."""
    entries = [(engine.token_text(token), logprob)]
    entries += [(engine.token_text(other), value) for other, value in top if other != token]
    return entries


def completion_logprobs(engine: BaseEngine, update: SequenceUpdate, k: int,
                        offset: int = 0) -> CompletionLogProbs:
    """vLLM's completion logprobs for the tokens of ``update``, text offsets from ``offset``."""
    result = CompletionLogProbs()
    for token, logprob, top in zip(update.token_ids, update.logprobs, update.top_logprobs, strict=True):
        text = engine.token_text(token)
        result.tokens.append(text)
        result.token_logprobs.append(logprob)
        result.top_logprobs.append(dict(_entries(engine, token, logprob, top)[:k + 1]))
        result.text_offset.append(offset)
        offset += len(text)
    return result


def chat_logprobs(engine: BaseEngine, update: SequenceUpdate, k: int) -> ChatCompletionLogProbs:
    """vLLM's chat logprobs for the tokens of ``update``."""
    content = []
    for token, logprob, top in zip(update.token_ids, update.logprobs, update.top_logprobs, strict=True):
        text = engine.token_text(token)
        alternatives = [
            ChatCompletionLogProb(token=t, logprob=v, bytes=list(t.encode("utf-8", "replace")))
            for t, v in _entries(engine, token, logprob, top)[:k]]
        content.append(ChatCompletionLogProbsContent(
            token=text, logprob=logprob, bytes=list(text.encode("utf-8", "replace")),
            top_logprobs=alternatives))
    return ChatCompletionLogProbs(content=content)


def _usage(job: Job, generated: int, cached: dict[int, int]) -> UsageInfo:
    """Token counts; ``cached``: prompt index -> its tokens prefilled from the prefix cache."""
    prompt = sum(len(prompt) for prompt in job.prompts)
    return UsageInfo(prompt_tokens=prompt, completion_tokens=generated, total_tokens=prompt + generated,
                     prompt_tokens_details=PromptTokenUsageInfo(cached_tokens=sum(cached.values())))


def _note_cached(job: Job, cached: dict[int, int], update: SequenceUpdate) -> None:
    """Count a prompt's cached tokens once, however many choices it has (the most any reused)."""
    prompt = update.index // job.n
    cached[prompt] = max(cached.get(prompt, 0), update.cached_tokens)


def _cached(job: Job, updates: Sequence[SequenceUpdate]) -> dict[int, int]:
    cached: dict[int, int] = {}
    for update in updates:
        _note_cached(job, cached, update)
    return cached


def _version(updates: Sequence[SequenceUpdate]) -> int | None:
    return max((update.policy_version for update in updates), default=None)


def _prompt_logprobs(engine: BaseEngine, job: Job, prompt: int) -> list[dict[int, PromptLogprob] | None] | None:
    if job.prompt_logprobs is None:
        return None
    return [None if entry is None else
            {token: PromptLogprob(logprob=value, rank=rank, decoded_token=engine.token_text(token))
             for token, (value, rank) in entry.items()}
            for entry in job.prompt_logprobs[prompt]]


def completion_response(engine: BaseEngine, job: Job, updates: list[SequenceUpdate]) -> CompletionResponse:
    """The non-streamed ``/v1/completions`` response."""
    choices = []
    for update in updates:
        choices.append(CompletionResponseChoice(
            index=update.index, text=update.text,
            logprobs=None if job.logprobs is None else completion_logprobs(engine, update, job.logprobs),
            finish_reason=update.finish_reason, stop_reason=update.stop_reason,
            token_ids=update.token_ids if job.return_token_ids else None,
            prompt_logprobs=_prompt_logprobs(engine, job, update.index // job.n),
            prompt_token_ids=job.prompts[update.index // job.n] if job.return_token_ids else None))
    generated = sum(len(update.token_ids) for update in updates)
    return CompletionResponse(model=job.model, choices=choices,
                              usage=_usage(job, generated, _cached(job, updates)),
                              policy_version=_version(updates))


def chat_response(engine: BaseEngine, job: Job, updates: list[SequenceUpdate]) -> ChatCompletionResponse:
    """The non-streamed ``/v1/chat/completions`` response."""
    choices = []
    for update in updates:
        choices.append(ChatCompletionResponseChoice(
            index=update.index, message=ChatMessage(role="assistant", content=update.text),
            logprobs=None if job.logprobs is None else chat_logprobs(engine, update, job.logprobs),
            finish_reason=update.finish_reason, stop_reason=update.stop_reason,
            token_ids=update.token_ids if job.return_token_ids else None))
    generated = sum(len(update.token_ids) for update in updates)
    return ChatCompletionResponse(
        model=job.model, choices=choices, usage=_usage(job, generated, _cached(job, updates)),
        prompt_token_ids=job.prompts[0] if job.return_token_ids else None,
        policy_version=_version(updates))


def _sse(payload: str) -> str:
    return f"data: {payload}\n\n"


def error_event(exc: ServeError) -> str:
    """An error as the last event of a stream whose 200 was already sent (as vLLM)."""
    info = ErrorInfo(message=exc.message, type=exc.error_type, param=exc.param, code=exc.status_code)
    return _sse(ErrorResponse(error=info).model_dump_json())


def _chunk(model: type[CompletionStreamResponse | ChatCompletionStreamResponse],
           head: CompletionStreamResponse | ChatCompletionStreamResponse, **fields: object) -> str:
    """One SSE event: a chunk sharing ``head``'s id and time; unset fields are left out (as vLLM)."""
    chunk = model(id=head.id, object=head.object, created=head.created, model=head.model, **fields)
    return _sse(chunk.model_dump_json(exclude_unset=True))


async def _framed(job: Job, generation: Generation,
                  head: CompletionStreamResponse | ChatCompletionStreamResponse,
                  events: Callable[[SequenceUpdate, bool], Iterator[str]]) -> AsyncIterator[str]:
    """The frame every stream shares: ``events(update, is_first)`` per update, then
    usage, an error event if generation fails, cancelling on disconnect, ``[DONE]``."""
    generated, version, started = 0, None, False
    cached: dict[int, int] = {}
    try:
        async for update in generation.updates():
            for event in events(update, not started):
                yield event
            started, version = True, update.policy_version
            generated += len(update.token_ids)
            _note_cached(job, cached, update)
        if job.include_usage:
            yield _chunk(type(head), head, choices=[], usage=_usage(job, generated, cached),
                         policy_version=version)
    except ServeError as exc:
        yield error_event(exc)
    finally:  # the client may leave mid-stream: stop generating what nobody will read
        generation.cancel()
    yield DONE


def completion_stream(engine: BaseEngine, job: Job, generation: Generation) -> AsyncIterator[str]:
    """SSE events of a streamed ``/v1/completions``: one chunk per choice per step."""
    head = CompletionStreamResponse(model=job.model, choices=[])
    offsets: dict[int, int] = {}

    def events(update: SequenceUpdate, _first: bool) -> Iterator[str]:
        first = update.index not in offsets
        offset = offsets.get(update.index, 0)
        logprobs = None
        if job.logprobs is not None:
            logprobs = completion_logprobs(engine, update, job.logprobs, offset)
        offsets[update.index] = offset + sum(len(engine.token_text(t)) for t in update.token_ids)
        choice = CompletionStreamChoice(
            index=update.index, text=update.text, logprobs=logprobs,
            finish_reason=update.finish_reason, stop_reason=update.stop_reason,
            prompt_token_ids=(job.prompts[update.index // job.n]
                              if job.return_token_ids and first else None),
            token_ids=update.token_ids if job.return_token_ids else None)
        yield _chunk(CompletionStreamResponse, head, choices=[choice],
                     policy_version=update.policy_version)

    return _framed(job, generation, head, events)


def chat_stream(engine: BaseEngine, job: Job, generation: Generation) -> AsyncIterator[str]:
    """SSE events of a streamed ``/v1/chat/completions``: a role chunk per choice, then deltas.

    The role chunks wait for the first token, so that they too can report the
    policy version that generates the answer.
    """
    head = ChatCompletionStreamResponse(model=job.model, choices=[])

    def events(update: SequenceUpdate, first: bool) -> Iterator[str]:
        if first:
            for index in range(job.n):
                role = ChatCompletionStreamChoice(
                    index=index, delta=DeltaMessage(role="assistant", content=""), logprobs=None,
                    finish_reason=None)
                yield _chunk(ChatCompletionStreamResponse, head, choices=[role],
                             prompt_token_ids=job.prompts[0] if job.return_token_ids else None,
                             policy_version=update.policy_version)
        choice = ChatCompletionStreamChoice(
            index=update.index, delta=DeltaMessage(content=update.text),
            logprobs=None if job.logprobs is None else chat_logprobs(engine, update, job.logprobs),
            finish_reason=update.finish_reason, stop_reason=update.stop_reason,
            token_ids=update.token_ids if job.return_token_ids else None)
        yield _chunk(ChatCompletionStreamResponse, head, choices=[choice],
                     policy_version=update.policy_version)

    return _framed(job, generation, head, events)
