"""Turning OpenAI requests into engine inputs: prompts as token ids, sampling parameters.

Each check raises ``InvalidRequestError`` naming the field at fault. Fields
the built-in server does not serve (``echo``, ``suffix``, ``best_of``,
penalties, ``logit_bias``, tools, structured output) are refused rather than
silently ignored.
"""

from __future__ import annotations

from typing import Any

from agentgym.errors import InvalidRequestError
from agentgym.serve.engine import BaseEngine
from agentgym.serve.protocol import ChatCompletionRequest, CompletionRequest, RequestMessage
from agentgym.serve.sampling import MAX_LOGPROBS, SamplingParams

__all__ = ["MAX_STOP_CHARS", "MAX_STOP_STRINGS", "chat_messages", "chat_params", "completion_params", "prompt_ids", "refuse_chat_extras"]


#: Stop strings per request and characters per stop string (OpenAI allows 4 stop strings).
MAX_STOP_STRINGS = 32
MAX_STOP_CHARS = 256


def _stop(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    if len(stops) > MAX_STOP_STRINGS:
        raise InvalidRequestError(f"stop may hold at most {MAX_STOP_STRINGS} strings, got {len(stops)}.",
                                  param="stop")
    longest = max(stops, key=len, default="")
    if len(longest) > MAX_STOP_CHARS:
        raise InvalidRequestError(f"each stop string may have at most {MAX_STOP_CHARS} characters; one "
                                  f"has {len(longest)}.", param="stop")
    return stops


def _refuse(field: str, value: object, unset: object) -> None:
    if value is not None and value != unset:
        raise InvalidRequestError(f"{field} is not supported by the built-in server (got {value!r}); "
                                  "leave it out or serve with --engine vllm.", param=field)


def completion_params(req: CompletionRequest) -> SamplingParams:
    for field, unset in (("echo", False), ("suffix", ""), ("best_of", 1), ("logit_bias", {}),
                         ("frequency_penalty", 0.0), ("presence_penalty", 0.0)):
        _refuse(field, getattr(req, field), unset)
    _check_prompt_logprobs(req)
    max_tokens = 16 if req.max_tokens is None else req.max_tokens
    return _params(req, max_tokens=max_tokens, logprobs=req.logprobs)


def _check_prompt_logprobs(req: CompletionRequest) -> None:
    """vLLM's bounds: 0 to its default ``max_logprobs`` (20), never with ``stream``."""
    if req.prompt_logprobs is None:
        return
    if req.stream:
        raise InvalidRequestError("prompt_logprobs are not available when stream=True.", param="prompt_logprobs")
    if not 0 <= req.prompt_logprobs <= MAX_LOGPROBS:
        raise InvalidRequestError(f"prompt_logprobs must be between 0 and {MAX_LOGPROBS}, got "
                                  f"{req.prompt_logprobs}.", param="prompt_logprobs")


def refuse_chat_extras(req: ChatCompletionRequest) -> None:
    for field, unset in (("logit_bias", {}), ("frequency_penalty", 0.0), ("presence_penalty", 0.0),
                         ("tools", [])):
        _refuse(field, getattr(req, field), unset)
    if req.response_format and req.response_format.get("type", "text") != "text":
        _refuse("response_format", req.response_format, None)


def chat_params(engine: BaseEngine, req: ChatCompletionRequest, prompt_tokens: int) -> SamplingParams:
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if max_tokens is None:  # as vLLM: whatever room the context leaves
        engine.check_length(prompt_tokens, 1, param="messages")
        max_tokens = engine.max_model_len - prompt_tokens
    else:
        if max_tokens < 1:  # named before the length check, which would blame the prompt
            raise InvalidRequestError(f"max_tokens must be at least 1, got {max_tokens}.",
                                      param="max_tokens")
        engine.check_length(prompt_tokens, max_tokens, param="messages")
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    return _params(req, max_tokens=max_tokens, logprobs=logprobs)


def _params(req: CompletionRequest | ChatCompletionRequest, *, max_tokens: int,
            logprobs: int | None) -> SamplingParams:
    """The sampling fields both kinds of request share, with the two they spell differently."""
    return SamplingParams(
        max_tokens=max_tokens, temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p, seed=req.seed, stop=_stop(req.stop),
        stop_token_ids=tuple(req.stop_token_ids or ()), ignore_eos=req.ignore_eos,
        logprobs=logprobs, skip_special_tokens=req.skip_special_tokens)


def prompt_ids(engine: BaseEngine, prompt: object) -> list[list[int]]:
    """The request's prompt(s) as lists of token ids (text is tokenized).

    Slow for long text: call it off the event loop.
    """
    if prompt is None or prompt == "" or prompt == []:
        raise InvalidRequestError("prompt is required: text, a list of token ids, or a list of either.",
                                  param="prompt")
    if isinstance(prompt, str):
        prompt = [prompt]
    if not isinstance(prompt, list):
        raise InvalidRequestError("prompt must be text, token ids, or a list of either.", param="prompt")
    if isinstance(prompt[0], int):
        return [list(prompt)]
    for item in prompt:
        if isinstance(item, str):
            engine.check_text_length(len(item), param="prompt")
    return [engine.encode(item) if isinstance(item, str) else list(item) for item in prompt]


def chat_messages(messages: list[RequestMessage]) -> list[dict[str, Any]]:
    """Messages as the chat template wants them: text parts joined into one string."""
    if not messages:
        raise InvalidRequestError("messages must hold at least one message.", param="messages")
    rendered = []
    for number, message in enumerate(messages):
        content = message.content
        if isinstance(content, list):
            texts = [part.get("text") for part in content]
            if any(part.get("type") != "text" or not isinstance(text, str)
                   for part, text in zip(content, texts, strict=True)):
                raise InvalidRequestError("only text content parts ({'type': 'text', 'text': ...}) "
                                          "are supported.", param=f"messages.{number}.content")
            content = "\n".join(str(text) for text in texts)
        entry: dict[str, Any] = {"role": message.role, "content": content or ""}
        if message.name:
            entry["name"] = message.name
        rendered.append(entry)
    return rendered
