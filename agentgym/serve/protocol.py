"""Request and response models of the built-in server, mirroring the OpenAI spec.

Fields are in the order of the OpenAI API reference (completions, chat
completions); every field that is not in that spec is marked ``# ext:`` and
is spelt and placed as vLLM 0.32 spells and places it, so one client reads
both servers. The extensions RL needs:

* ``return_token_ids`` (request): the response carries ``prompt_token_ids``
  and ``token_ids`` (the sampled ids, stop and EOS tokens included).
  On ``/v1/completions`` both sit on each choice; on ``/v1/chat/completions``
  ``prompt_token_ids`` sits on the response (the first chunk when streaming)
  and ``token_ids`` on each choice (the ids of that chunk when streaming).
* ``stop_reason`` (choice): the stop string or stop token id that ended the
  choice, None for EOS or length.
* ``prompt_logprobs`` (completions request, an int k): each choice carries, per
  prompt token (None for the first), a dict from token id to ``{logprob, rank,
  decoded_token}`` holding that token and the k most likely ones: the raw
  model's log-softmax, whatever the temperature (as vLLM). Not with ``stream``.
* ``policy_version`` (response, every chunk): the weights version that
  generated every token of the response. agentgym's own extension: vLLM does
  not send it, so clients must treat it as optional.

Logprobs are those of the *processed* distribution (after temperature and
top-p), like vLLM's ``--logprobs-mode processed_logprobs``; with
``temperature=0`` they are the raw model's log-softmax.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt

__all__ = [
    "ChatCompletionLogProb",
    "ChatCompletionLogProbs",
    "ChatCompletionLogProbsContent",
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "ChatCompletionResponseChoice",
    "ChatCompletionStreamChoice",
    "ChatCompletionStreamResponse",
    "ChatMessage",
    "CollectiveRPCRequest",
    "CompletionLogProbs",
    "CompletionRequest",
    "CompletionResponse",
    "CompletionResponseChoice",
    "CompletionStreamChoice",
    "CompletionStreamResponse",
    "DeltaMessage",
    "DetokenizeRequest",
    "DetokenizeResponse",
    "ErrorInfo",
    "ErrorResponse",
    "LoadLoRAAdapterRequest",
    "ModelCard",
    "ModelList",
    "RequestMessage",
    "StopParam",
    "StreamOptions",
    "TokenId",
    "TokenizeRequest",
    "TokenizeResponse",
    "UnloadLoRAAdapterRequest",
    "UpdateWeightsRequest",
    "UpdateWeightsResponse",
    "PromptLogprob",
    "PromptTokenUsageInfo",
    "UsageInfo",
]

def _integral(value: object) -> object:
    """1.0 is an integer to JSON Schema (and so to the OpenAPI schema); true is not."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


TokenId = Annotated[StrictInt, BeforeValidator(_integral), Field(ge=0)]  # strict: true is no token id
StopParam = str | list[str] | None


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def _now() -> int:
    return int(time.time())


class _Request(BaseModel):
    """Requests ignore fields they do not know, as OpenAI's and vLLM's servers do."""

    model_config = ConfigDict(extra="ignore")


class _Response(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ----------------------------------------------------------------- errors ---

class ErrorInfo(_Response):
    message: str
    type: str
    param: str | None = None
    code: int  # the HTTP status, as vLLM sends it (OpenAI sends a string or null)


class ErrorResponse(_Response):
    error: ErrorInfo


# ----------------------------------------------------------------- shared ---

class StreamOptions(_Request):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False  # ext: vLLM, usage on every chunk


class PromptTokenUsageInfo(_Response):
    cached_tokens: int | None = None


class UsageInfo(_Response):
    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: PromptTokenUsageInfo | None = None  # as OpenAI: cached_tokens


class ModelCard(_Response):
    id: str
    object: str = "model"
    created: int = Field(default_factory=_now)
    owned_by: str = "agentgym"
    root: str | None = None  # ext: vLLM, the folder the model came from
    parent: str | None = None  # ext: vLLM, the base model of a LoRA adapter
    max_model_len: int | None = None  # ext: vLLM, prompt + completion tokens allowed


class ModelList(_Response):
    object: str = "list"
    data: list[ModelCard] = Field(default_factory=list)


# ------------------------------------------------------------ completions ---

class CompletionRequest(_Request):
    # Ordered as the OpenAI API reference (completions/create).
    model: str | None = None
    prompt: list[TokenId] | list[list[TokenId]] | str | list[str] | None = None
    best_of: int | None = None
    echo: bool | None = False
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: int | None = None
    max_tokens: int | None = 16
    n: int = 1
    presence_penalty: float | None = None
    seed: int | None = None
    stop: StopParam = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    suffix: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    user: str | None = None
    stop_token_ids: list[TokenId] | None = None  # ext: vLLM, token ids that end a choice
    ignore_eos: bool = False  # ext: vLLM, keep sampling past EOS
    skip_special_tokens: bool = True  # ext: vLLM, drop special tokens from `text`
    return_token_ids: bool | None = None  # ext: vLLM, prompt_token_ids/token_ids on each choice
    prompt_logprobs: int | None = None  # ext: vLLM, the prompt tokens' logprobs and the top this many


class CompletionLogProbs(_Response):
    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


class PromptLogprob(_Response):
    """One entry of vLLM's ``prompt_logprobs``: a token's logprob, its rank in the vocabulary (1: the
    most likely; ties count as ahead) and its text."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class CompletionResponseChoice(_Response):
    index: int
    text: str
    logprobs: CompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None  # ext: vLLM, the stop string or token id hit
    token_ids: list[int] | None = None  # ext: vLLM, sampled ids (with return_token_ids)
    # ext: vLLM, per prompt token (None for the first): its own entry and the top prompt_logprobs, by token id
    prompt_logprobs: list[dict[int, PromptLogprob] | None] | None = None
    prompt_token_ids: list[int] | None = None  # ext: vLLM, the prompt ids (with return_token_ids)


class CompletionResponse(_Response):
    id: str = Field(default_factory=lambda: _id("cmpl"))
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[CompletionResponseChoice]
    system_fingerprint: str | None = None
    usage: UsageInfo
    policy_version: int | None = None  # ext: agentgym, weights version of every token


class CompletionStreamChoice(_Response):
    index: int
    text: str
    logprobs: CompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None  # ext: vLLM
    prompt_token_ids: list[int] | None = None  # ext: vLLM, first chunk of each choice only
    token_ids: list[int] | None = None  # ext: vLLM, the ids of this chunk


class CompletionStreamResponse(_Response):
    id: str = Field(default_factory=lambda: _id("cmpl"))
    object: str = "text_completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[CompletionStreamChoice]
    usage: UsageInfo | None = None
    policy_version: int | None = None  # ext: agentgym


# ------------------------------------------------------- chat completions ---

class RequestMessage(_Request):
    """One message of a conversation; content is text or a list of text parts."""

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class ChatCompletionRequest(_Request):
    # Ordered as the OpenAI API reference (chat/create).
    messages: list[RequestMessage]
    model: str | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = 0
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = 1
    presence_penalty: float | None = None
    response_format: dict[str, Any] | None = None
    seed: int | None = None
    stop: StopParam = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = "none"
    user: str | None = None
    stop_token_ids: list[TokenId] | None = None  # ext: vLLM
    ignore_eos: bool = False  # ext: vLLM
    skip_special_tokens: bool = True  # ext: vLLM
    add_generation_prompt: bool = True  # ext: vLLM, end the prompt with the assistant header
    continue_final_message: bool = False  # ext: vLLM, let the model continue the last message
    chat_template_kwargs: dict[str, Any] | None = None  # ext: vLLM, extra template variables
    return_token_ids: bool | None = None  # ext: vLLM, prompt_token_ids and token_ids


class ChatMessage(_Response):
    role: str
    content: str | None = None
    refusal: str | None = None


class ChatCompletionLogProb(_Response):
    token: str
    logprob: float = -9999.0
    bytes: list[int] | None = None


class ChatCompletionLogProbsContent(ChatCompletionLogProb):
    top_logprobs: list[ChatCompletionLogProb] = Field(default_factory=list)


class ChatCompletionLogProbs(_Response):
    content: list[ChatCompletionLogProbsContent] | None = None


class ChatCompletionResponseChoice(_Response):
    index: int
    message: ChatMessage
    logprobs: ChatCompletionLogProbs | None = None
    finish_reason: str | None = "stop"
    stop_reason: int | str | None = None  # ext: vLLM
    token_ids: list[int] | None = None  # ext: vLLM, sampled ids (with return_token_ids)


class ChatCompletionResponse(_Response):
    id: str = Field(default_factory=lambda: _id("chatcmpl"))
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[ChatCompletionResponseChoice]
    system_fingerprint: str | None = None
    usage: UsageInfo
    prompt_token_ids: list[int] | None = None  # ext: vLLM, the templated prompt's ids
    policy_version: int | None = None  # ext: agentgym


class DeltaMessage(_Response):
    role: str | None = None
    content: str | None = None


class ChatCompletionStreamChoice(_Response):
    index: int
    delta: DeltaMessage
    logprobs: ChatCompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None  # ext: vLLM
    token_ids: list[int] | None = None  # ext: vLLM, the ids of this chunk


class ChatCompletionStreamResponse(_Response):
    id: str = Field(default_factory=lambda: _id("chatcmpl"))
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[ChatCompletionStreamChoice]
    usage: UsageInfo | None = None
    prompt_token_ids: list[int] | None = None  # ext: vLLM, first chunk only
    policy_version: int | None = None  # ext: agentgym


# ---------------------------------------------------- vLLM's extra routes ---

class TokenizeRequest(_Request):
    """``POST /tokenize`` (vLLM): either ``prompt`` or ``messages``."""

    model: str | None = None
    prompt: str | None = None
    messages: list[RequestMessage] | None = None
    add_special_tokens: bool | None = None  # default: True for prompt, False for messages
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    return_token_strs: bool | None = False


class TokenizeResponse(_Response):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(_Request):
    model: str | None = None
    tokens: list[TokenId]


class DetokenizeResponse(_Response):
    prompt: str


class LoadLoRAAdapterRequest(_Request):
    lora_name: str
    lora_path: str


class UnloadLoRAAdapterRequest(_Request):
    lora_name: str


class CollectiveRPCRequest(_Request):
    """vLLM's dev-mode ``POST /collective_rpc``; only ``reload_weights`` is understood."""

    method: str
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    timeout: float | None = None


# ---------------------------------------------- agentgym's weight updates ---

class UpdateWeightsRequest(_Request):
    """``POST /update_weights``: load full weights, then report ``version`` on responses.

    ``weights_path`` is a folder of ``*.safetensors`` files (``save_pretrained``
    output, sharded or not) or one ``.safetensors`` file, with the served
    model's tensor names and shapes. ``version`` defaults to the current one + 1.
    """

    weights_path: str
    version: int | None = None


class UpdateWeightsResponse(_Response):
    policy_version: int
    tensors: int
    seconds: float
