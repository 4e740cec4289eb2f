"""The built-in OpenAI-compatible HTTP server: a FastAPI app over an engine (``agentgym.serve.engine``).

Routes (OpenAI, then vLLM's extensions, then agentgym's):

* ``GET /v1/models``, ``POST /v1/completions`` (text or token-id prompts,
  one or many; vLLM's ``prompt_logprobs``, computed by a forward pass of
  each prompt of its own), ``POST /v1/chat/completions`` (SSE when ``stream``);
* ``GET /health``, ``GET /version``, ``POST /tokenize``, ``POST /detokenize``,
  ``POST /v1/load_lora_adapter``, ``POST /v1/unload_lora_adapter``,
  ``POST /collective_rpc`` (``reload_weights`` only) and
  ``POST /reset_prefix_cache`` (clears the prefix cache) as vLLM in dev mode;
* ``POST /update_weights {"weights_path", "version"}``: load full weights
  from safetensors; every later response reports ``policy_version``;
* ``GET /stats``: engine counters (``max_batch_size`` shows batching,
  ``cached_prompt_tokens`` the prefix cache).

Errors use the OpenAI shape ``{"error": {"message", "type", "param",
"code"}}`` with a 4xx status and a message naming the field; an unexpected
failure is logged and answered with a 500 of the same shape; the server
keeps serving.

Keys: the control routes (``/update_weights``, the LoRA routes,
``/collective_rpc``, ``/reset_prefix_cache``) always want
``Authorization: Bearer KEY``: code a model wrote runs in a sandbox on the
same host and can reach loopback, so a keyless control route would let it
replace the policy's weights. With ``api_key`` every route but ``/health``
wants it; without, the control routes want ``control_key`` (one is generated
when none is given: ``app.state.control_key``) and inference stays open.

Departures from vLLM, on purpose: a prompt that fits but leaves less room
than ``max_tokens`` is refused (400 naming ``max_tokens``) where vLLM 0.32
silently shortens the completion; ``echo``, ``suffix``, ``best_of``,
penalties, ``logit_bias`` and tools are refused (400 naming the field)
rather than served.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
import os
import secrets
from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

import agentgym
from agentgym.asgi import CatchAll
from agentgym.errors import AuthenticationError, InvalidRequestError, ModelNotFoundError, ServeError
from agentgym.serve.batch import SequenceUpdate
from agentgym.serve.engine import BaseEngine, Generation
from agentgym.serve.inputs import (
    chat_messages,
    chat_params,
    completion_params,
    prompt_ids,
    refuse_chat_extras,
)
from agentgym.serve.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CollectiveRPCRequest,
    CompletionRequest,
    CompletionResponse,
    DetokenizeRequest,
    DetokenizeResponse,
    ErrorInfo,
    ErrorResponse,
    LoadLoRAAdapterRequest,
    ModelCard,
    ModelList,
    TokenizeRequest,
    TokenizeResponse,
    UnloadLoRAAdapterRequest,
    UpdateWeightsRequest,
    UpdateWeightsResponse,
)
from agentgym.serve.responses import (
    Job,
    chat_response,
    chat_stream,
    completion_response,
    completion_stream,
)

__all__ = ["CONTROL_PATHS", "DEFAULT_MAX_BODY_BYTES", "create_app", "error_response"]

_log = logging.getLogger("agentgym.serve")

_DISCONNECT_POLL_S = 1.0  # how often a waiting request checks that its client is still there
_OPEN_PATHS = frozenset({"/health"})  # reachable without the API key (load balancers, readiness)
#: Routes that change what the server serves: never reachable without a key.
CONTROL_PATHS = frozenset({"/update_weights", "/v1/load_lora_adapter", "/v1/unload_lora_adapter",
                           "/collective_rpc", "/reset_prefix_cache"})


def error_response(status: int, message: str, *, param: str | None = None,
                   error_type: str | None = None) -> JSONResponse:
    """A JSON response in the OpenAI error shape."""
    kind = error_type or HTTPStatus(status).phrase.replace(" ", "") + "Error"
    body = ErrorResponse(error=ErrorInfo(message=message, type=kind, param=param, code=status))
    return JSONResponse(body.model_dump(), status_code=status)


class _RequireKey:
    """ASGI middleware: 401 unless ``Authorization: Bearer <key>`` (constant-time compare).

    ``api_key`` (if any) guards every route but ``/health``; the control routes
    want ``control_key`` (the API key when there is one).
    """

    def __init__(self, app: ASGIApp, api_key: str | None, control_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode() if api_key else None
        self.control = f"Bearer {control_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in _OPEN_PATHS:
            expected = self.control if scope["path"] in CONTROL_PATHS else self.expected
            given = dict(scope["headers"]).get(b"authorization", b"")
            if expected is not None and not hmac.compare_digest(given, expected):
                error = AuthenticationError("Incorrect or missing API key: send the header "
                                            "'Authorization: Bearer <key>' with the server's --api-key "
                                            "(control routes always need one).")
                response = error_response(error.status_code, error.message, error_type=error.error_type)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _BodyTooLarge(HTTPException):
    """Raised from ``receive`` once a body passes the cap: FastAPI re-raises HTTP exceptions
    met while reading a body, and ``_add_error_handlers`` answers them in the OpenAI shape."""


class _LimitBody:
    """ASGI middleware: 413 for a body over ``max_bytes``, by Content-Length or while it streams in.

    A body is read whole (and parsed, and tokenized) before a route runs, so an
    uncapped one costs memory and seconds per MiB.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _message(self) -> str:
        return (f"The request body is larger than the server's limit of {self.max_bytes} bytes "
                f"(--max-body-mib); send a shorter prompt.")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.max_bytes:
            response = error_response(413, self._message(), error_type="RequestTooLargeError")
            await response(scope, receive, send)
            return
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise _BodyTooLarge(413, self._message())
            return message

        await self.app(scope, counted, send)


def _internal_error(message: str) -> Response:
    return error_response(500, message, error_type="InternalServerError")


#: The default cap on a request body: about two million tokens of text, far past any context.
DEFAULT_MAX_BODY_BYTES = 8 * 2**20


def create_app(engine: BaseEngine, *, api_key: str | None = None, control_key: str | None = None,
               served_model_name: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> FastAPI:
    """The FastAPI app serving ``engine`` as ``served_model_name`` (default: the model as given).

    ``control_key`` guards the control routes when there is no ``api_key``
    (generated when not given; read it from ``app.state.control_key``).
    """
    name = served_model_name or engine.config.model
    app = FastAPI(title="agentgym built-in server", version=agentgym.__version__)
    app.state.engine = engine
    app.state.served_model_name = name
    app.state.control_key = api_key or control_key or secrets.token_urlsafe(24)
    app.add_middleware(_LimitBody, max_bytes=max_body_bytes)
    app.add_middleware(_RequireKey, api_key=api_key, control_key=app.state.control_key)
    # Added last: the outermost of ours, so it also covers the key check.
    app.add_middleware(CatchAll, answer=_internal_error, log=_log)
    _add_error_handlers(app)
    _add_info_routes(app, engine, name)
    _add_generation_routes(app, engine, name)
    _add_control_routes(app, engine)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


#: Errors any route may answer, in the OpenAI shape (the schema lists them with each operation).
_ERROR_STATUSES = {"400": "Invalid request (a field is wrong; the message and param name it)",
                   "401": "Missing or wrong API key", "404": "Unknown model",
                   "413": "Request body over the server's limit", "500": "Internal error"}


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema with the errors this app really sends: validation errors are 400 in the
    OpenAI shape (as OpenAI and vLLM send them), not FastAPI's 422."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    error_schema = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(error_schema.pop("$defs", {}))
    components["ErrorResponse"] = error_schema
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for status, description in _ERROR_STATUSES.items():
                responses.setdefault(status, {"description": description, **error})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    app.openapi_schema = schema
    return schema


# ------------------------------------------------------------------ errors ---

def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServeError)
    async def serve_error(request: Request, exc: ServeError) -> JSONResponse:
        if exc.status_code >= 500:
            _log.error("%s %s failed: %s", request.method, request.url.path, exc.message)
        return error_response(exc.status_code, exc.message, param=exc.param, error_type=exc.error_type)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _describe_validation(exc)
        return error_response(400, message, param=param, error_type="BadRequestError")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        kind = "RequestTooLargeError" if exc.status_code == 413 else None
        response = error_response(exc.status_code, str(exc.detail), error_type=kind)
        response.headers.update(exc.headers or {})  # a 405 names the allowed methods (Allow)
        return response


def _describe_validation(exc: RequestValidationError) -> tuple[str, str | None]:
    """A message naming each bad field (at most five), and the first field as ``param``."""
    parts, param = [], None
    for error in exc.errors()[:5]:
        location = [str(part) for part in error.get("loc", ()) if part != "body"]
        field = ".".join(location) or "body"
        if error.get("type") == "json_invalid":
            field = "body"
            detail = f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'decode error')})"
        else:
            detail = str(error.get("msg", "invalid"))
        param = param or field
        parts.append(f"{field}: {detail}")
    return "Invalid request: " + "; ".join(parts), param


# ------------------------------------------------------------------- info ---

def _add_info_routes(app: FastAPI, engine: BaseEngine, name: str) -> None:
    @app.get("/health")
    async def health() -> Response:
        if not engine.alive:
            return error_response(503, "the engine has stopped; restart the server.")
        return JSONResponse({"status": "ok"})

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": agentgym.__version__}

    @app.get("/v1/models")
    async def models() -> ModelList:
        cards = [ModelCard(id=name, root=engine.model_path, max_model_len=engine.max_model_len)]
        cards += [ModelCard(id=lora, root=path, parent=name) for lora, path in engine.adapters().items()]
        return ModelList(data=cards)

    @app.get("/stats")
    async def stats() -> dict[str, int]:
        return await engine.read_stats()

    @app.post("/tokenize")
    async def tokenize(req: TokenizeRequest) -> TokenizeResponse:
        _adapter(engine, name, req.model)
        return await asyncio.to_thread(_tokenize, engine, req)

    @app.post("/detokenize")
    async def detokenize(req: DetokenizeRequest) -> DetokenizeResponse:
        _adapter(engine, name, req.model)
        engine.check_prompt(req.tokens or [0], param="tokens")
        return DetokenizeResponse(prompt=await asyncio.to_thread(engine.decode, req.tokens))


def _tokenize(engine: BaseEngine, req: TokenizeRequest) -> TokenizeResponse:
    if req.messages is not None:
        ids = engine.apply_chat_template(
            chat_messages(req.messages), add_generation_prompt=req.add_generation_prompt,
            continue_final_message=req.continue_final_message)
    elif req.prompt is not None:
        add = True if req.add_special_tokens is None else req.add_special_tokens
        ids = engine.encode(req.prompt, add_special_tokens=add)
    else:
        raise InvalidRequestError("give either prompt or messages.", param="prompt")
    strs = [engine.token_text(token) for token in ids] if req.return_token_strs else None
    return TokenizeResponse(count=len(ids), max_model_len=engine.max_model_len, tokens=ids,
                            token_strs=strs)


# ------------------------------------------------------------- generation ---

def _answers(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """A generation route's 200 in the schema: the JSON body, or server-sent events when the
    request says `"stream": true` (each `data:` line a chunk, as OpenAI and vLLM send)."""
    # Before Open API 3.2 an event stream's schema describes one event.
    event = {"type": "object", "required": ["data"], "properties": {
        "data": {"type": "string", "description": "A JSON chunk, or [DONE] after the last"},
        "event": {"type": "string"}}}
    events = {"schema": event, "example": 'data: {"choices": [...]}\n\ndata: [DONE]\n\n'}
    return {200: {"model": model, "description": "The answer; server-sent events when streamed",
                  "content": {"text/event-stream": events}}}


def _add_generation_routes(app: FastAPI, engine: BaseEngine, name: str) -> None:
    @app.post("/v1/completions", response_model=None, responses=_answers(CompletionResponse))
    async def completions(req: CompletionRequest, request: Request) -> Response:
        adapter = _adapter(engine, name, req.model)
        params = completion_params(req)
        prompts = await asyncio.to_thread(prompt_ids, engine, req.prompt)  # /health answers meanwhile
        job = Job(model=req.model or name, prompts=prompts, n=req.n,
                  logprobs=params.logprobs, return_token_ids=bool(req.return_token_ids),
                  include_usage=bool(req.stream_options and req.stream_options.include_usage))
        generation = engine.submit(prompts, params, n=req.n, adapter=adapter, stream=bool(req.stream))
        if req.stream:
            return _sse(completion_stream(engine, job, generation))
        if req.prompt_logprobs is not None:
            try:
                scored = await engine.prompt_logprobs(prompts, req.prompt_logprobs, adapter=adapter)
            except BaseException:
                generation.cancel()
                raise
            job = dataclasses.replace(job, prompt_logprobs=scored)
        done = await _result(request, generation)
        return _json(await asyncio.to_thread(completion_response, engine, job, done))

    @app.post("/v1/chat/completions", response_model=None,
               responses=_answers(ChatCompletionResponse))
    async def chat(req: ChatCompletionRequest, request: Request) -> Response:
        adapter = _adapter(engine, name, req.model)
        refuse_chat_extras(req)
        messages = chat_messages(req.messages)
        engine.check_text_length(sum(len(message["content"]) for message in messages), param="messages")
        prompt = await asyncio.to_thread(
            engine.apply_chat_template, messages, add_generation_prompt=req.add_generation_prompt,
            continue_final_message=req.continue_final_message, template_kwargs=req.chat_template_kwargs)
        params = chat_params(engine, req, len(prompt))
        n = 1 if req.n is None else req.n
        job = Job(model=req.model or name, prompts=[prompt], n=n, logprobs=params.logprobs,
                  return_token_ids=bool(req.return_token_ids),
                  include_usage=bool(req.stream_options and req.stream_options.include_usage))
        generation = engine.submit([prompt], params, n=n, adapter=adapter, stream=bool(req.stream))
        if req.stream:
            return _sse(chat_stream(engine, job, generation))
        done = await _result(request, generation)
        return _json(await asyncio.to_thread(chat_response, engine, job, done))


async def _result(request: Request, generation: Generation) -> list[SequenceUpdate]:
    """The finished choices; if the client hangs up first, the engine stops generating them."""
    task = asyncio.ensure_future(generation.result())
    while True:
        done, _ = await asyncio.wait({task}, timeout=_DISCONNECT_POLL_S)
        if done:
            return task.result()
        if await request.is_disconnected():
            generation.cancel()
            task.cancel()
            raise InvalidRequestError("the client closed the connection before the answer was ready.")


def _json(body: BaseModel) -> Response:
    """Serialised by pydantic-core directly: several times faster than FastAPI's encoder."""
    return Response(content=body.model_dump_json(), media_type="application/json")


def _sse(events: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _adapter(engine: BaseEngine, name: str, model: str | None) -> str | None:
    """None for the base model, the adapter's name for a LoRA adapter; 404 otherwise."""
    if model is None or model == name:
        return None
    if model in engine.adapters():
        return model
    known = ", ".join([name, *engine.adapters()])
    raise ModelNotFoundError(f"The model `{model}` does not exist. Valid names: {known}.", param="model")


# ---------------------------------------------------------------- control ---

def _path(value: str, param: str) -> str:
    """A file path the OS can take: JSON may carry lone surrogates, which no file name has, or a
    name over the file system's limit. A path that merely does not exist is the loader's to say."""
    try:
        os.stat(value.encode())
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(f"{param} is not a valid file path ({exc.reason}).", param=param) from exc
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        pass
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidRequestError(f"{param} is not a usable file path ({reason}).", param=param) from exc
    return value


def _add_control_routes(app: FastAPI, engine: BaseEngine) -> None:
    @app.post("/update_weights")
    async def update_weights(req: UpdateWeightsRequest) -> UpdateWeightsResponse:
        done = await engine.update_weights(_path(req.weights_path, "weights_path"), req.version)
        return UpdateWeightsResponse(policy_version=done.policy_version, tensors=done.tensors,
                                     seconds=done.seconds)

    @app.post("/collective_rpc")
    async def collective_rpc(req: CollectiveRPCRequest) -> dict[str, Any]:
        if req.method != "reload_weights":
            raise InvalidRequestError(f"the built-in server runs only 'reload_weights', not "
                                      f"{req.method!r}.", param="method")
        path = req.kwargs.get("weights_path")
        if not isinstance(path, str):
            raise InvalidRequestError("reload_weights needs kwargs.weights_path (a folder).",
                                      param="kwargs.weights_path")
        done = await engine.update_weights(_path(path, "kwargs.weights_path"))
        return {"results": [None], "policy_version": done.policy_version}

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> dict[str, str]:
        await engine.reset_prefix_cache()
        return {"status": "ok"}

    @app.post("/v1/load_lora_adapter")
    async def load_lora(req: LoadLoRAAdapterRequest) -> PlainTextResponse:
        await engine.load_lora(req.lora_name, _path(req.lora_path, "lora_path"))
        return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora(req: UnloadLoRAAdapterRequest) -> PlainTextResponse:
        await engine.unload_lora(req.lora_name)
        return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' removed successfully.")
