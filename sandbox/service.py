"""The sandbox service: a sandbox (a Docker pool by default) behind HTTP, for other hosts to use.

    agentgym sandbox serve                            # http://127.0.0.1:8100, the Docker pool
    agentgym sandbox serve --host 0.0.0.0 --token T   # reachable by others: a token is required

Routes:

* ``POST /run``: a :class:`RunRequest` (``code``, ``language``, ``stdin``,
  ``files``, ``timeout``) -> a :class:`RunReply` (the fields of
  :class:`~agentgym.sandbox.ExecResult`). Whatever the code does is in the
  reply with status 200. A request the service will not run gets a 4xx whose
  message names the field (422: a field invalid or over its cap; 413: a body
  over :data:`MAX_BODY_BYTES`); the sandbox's own failure (a lost engine) a
  503; anything unexpected a logged 500. The server keeps serving after each.
* ``GET /health``: ``{"status": "ok", "backend", "isolation", "pool_size",
  "busy", "waiting", "runs", "limits"}``: ``pool_size`` runs go at once,
  ``busy`` are running now, ``waiting`` are queued for a slot, ``runs`` have
  ended; ``limits`` are the sandbox's :class:`~agentgym.sandbox.Limits`.

With a token every route wants ``Authorization: Bearer TOKEN`` (compared in
constant time), ``/health`` included, so that a client learns at connect time
that its token is wrong. Runs go to ``pool_size`` threads of the service,
never on the event loop, so ``pool_size`` of them run at once (size the
Docker pool to match) and the rest wait their turn.

What the service does not do: TLS (put it behind a proxy, or keep it on a
private network) and per-client quotas. The sandbox's limits (memory, CPUs,
output) are the server's; a request only chooses its timeout, up to
:data:`MAX_TIMEOUT`. :class:`~agentgym.sandbox.remote.RemoteSandbox` is the
client.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import hmac
import logging
import signal
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from agentgym.asgi import CatchAll, ServerThread
from agentgym.core import check_number
from agentgym.errors import ConfigError, MissingDependencyError, SandboxError
from agentgym.sandbox.base import LANGUAGES, Sandbox
from agentgym.sandbox.protocol import valid_text

__all__ = ["DEFAULT_PORT", "MAX_BODY_BYTES", "MAX_CODE_CHARS", "MAX_FILES", "MAX_STDIN_CHARS",
           "MAX_TIMEOUT", "Base64File", "ErrorDetail", "ErrorReply", "HealthReply", "RunReply",
           "RunRequest", "ServiceThread", "create_app",
           "serve_sandbox"]

_log = logging.getLogger("agentgym.sandbox")

DEFAULT_PORT = 8100
#: Caps on one request: generous for honest programs, small enough that no request eats the host.
MAX_CODE_CHARS = 1_000_000
MAX_STDIN_CHARS = 16_000_000
MAX_FILES = 256
MAX_TIMEOUT = 600.0
MAX_BODY_BYTES = 32 * 1024 * 1024


def _valid_text(value: Any) -> Any:
    """A str with lone surrogates (JSON escapes allow them) made valid; anything else as it came."""
    return valid_text(value) if isinstance(value, str) else value


#: Text the service takes: a JSON string, lone surrogates turned into U+FFFD (see
#: :func:`~agentgym.sandbox.protocol.valid_text`); nothing else is made into a string.
_Text = Annotated[str, BeforeValidator(_valid_text), Field(strict=True)]


# A relative path whose parts are 1 to 60 characters, none "." or ".." and no backslash
# (which the runner reads as a separator too), so that it stays in the
# work dir and fits any file system's name length); written without look-arounds, which the
# schema's readers may not support. ``main.py`` and ``main.sh`` (the code) are refused later.
_PART = (r"(?:[^/\\\x00.][^/\\\x00]{0,59}|\.[^/\\\x00.][^/\\\x00]{0,58}"
         r"|\.\.[^/\\\x00]{1,58})")
_NAME = rf"^(?:{_PART}/+)*{_PART}/*$"
_FileName = Annotated[_Text, Field(pattern=_NAME, max_length=1000)]


def _name_pattern(schema: dict[str, Any]) -> None:
    """Put the file names' pattern in ``propertyNames``, where pydantic leaves it out."""
    schema["propertyNames"] = {"pattern": _NAME, "maxLength": 1000}
    if "patternProperties" in schema:
        schema["additionalProperties"] = schema.pop("patternProperties").popitem()[1]


class Base64File(BaseModel):
    """A file with bytes that are not UTF-8 text, base64-encoded (a text file is a plain string)."""

    model_config = ConfigDict(extra="forbid")
    # The schema says exactly what b64decode(validate=True) takes (padding included).
    base64: str = Field(pattern=r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
                        strict=True)


class RunRequest(BaseModel):
    """One run; the fields and their meaning are those of :meth:`Sandbox.run`."""

    # Types are strict: ``true`` is not 1 second and ``"2"`` is not a number.
    model_config = ConfigDict(extra="forbid")
    code: Annotated[_Text, Field(max_length=MAX_CODE_CHARS)]
    language: Literal[LANGUAGES] = "python"  # type: ignore[valid-type]
    stdin: Annotated[_Text, Field(max_length=MAX_STDIN_CHARS)] = ""
    files: dict[_FileName, _Text | Base64File] = Field(default_factory=dict, max_length=MAX_FILES,
                                                     json_schema_extra=_name_pattern)
    timeout: Annotated[float, Field(gt=0, le=MAX_TIMEOUT, strict=True)] | None = None
    """Wall-clock seconds; None: the server's ``Limits.timeout``."""

    def file_contents(self) -> dict[str, str | bytes]:
        """``files`` as :meth:`Sandbox.run` takes them (base64 entries decoded)."""
        return {name: base64.b64decode(value.base64) if isinstance(value, Base64File) else value
                for name, value in self.files.items()}


class RunReply(BaseModel):
    """What the run did: the fields of :class:`~agentgym.sandbox.ExecResult`."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    oom: bool
    duration: float
    truncated: bool


class ErrorDetail(BaseModel):
    """Why the service did not run a request."""

    message: str
    """What was expected, what came, and what to do."""
    type: str
    """``InvalidRequest``, ``AuthenticationError``, ``LengthRequired``, ``RequestTooLarge``,
    ``SandboxError`` or ``InternalServerError``."""
    param: str | None
    """The request field at fault (``files.a.txt``), if one is."""


class ErrorReply(BaseModel):
    """Every answer that is not a run's result: ``{"error": {"message", "type", "param"}}``."""

    error: ErrorDetail


#: The answers other than 200 that a route can give, for the OpenAPI schema.
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorReply, "description": "The service has a token the request lacked."},
    500: {"model": ErrorReply, "description": "A bug in the service (logged); it goes on."},
}
_RUN_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    411: {"model": ErrorReply, "description": "The body came without a Content-Length."},
    413: {"model": ErrorReply, "description": f"The body is over {MAX_BODY_BYTES} bytes."},
    422: {"model": ErrorReply, "description": "The body is not JSON, or a field is invalid or "
                                              "over its cap; ``param`` names it."},
    503: {"model": ErrorReply, "description": "The sandbox itself failed (a lost engine)."},
}


class HealthReply(BaseModel):
    """The service's state: ``pool_size`` runs go at once, ``busy`` run now, ``waiting`` wait."""

    status: Literal["ok"]
    backend: str
    isolation: str
    pool_size: int
    busy: int
    waiting: int
    runs: int
    limits: dict[str, float | int | None]
    """The sandbox's :class:`~agentgym.sandbox.Limits`."""


def _require_packages() -> None:
    """MissingDependencyError naming the extra when FastAPI or uvicorn is not installed."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("The sandbox service needs FastAPI and uvicorn: "
                                     f"{MissingDependencyError.install_hint('sandbox-service')}.") from exc


def _error(status: int, message: str, *, param: str | None = None, kind: str = "") -> Any:
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": kind or f"HTTP{status}",
                                   "param": param}}, status_code=status)


class _Guard:
    """ASGI middleware, outermost: the token and the body size cap, checked before the app
    reads anything (an unexpected error inside is :class:`~agentgym.asgi.CatchAll`'s)."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if self.expected is not None and not hmac.compare_digest(
                headers.get(b"authorization", b""), self.expected):
            response = _error(401, "Incorrect or missing token: send 'Authorization: Bearer "
                                   "<token>' with the service's --token (AGENTGYM_SANDBOX_TOKEN).",
                              kind="AuthenticationError")
            await response(scope, receive, send)
            return
        length = headers.get(b"content-length", b"" if scope["method"] == "POST" else b"0")
        if not length:  # a chunked body could be endless: the client must say its size
            await _error(411, "Send the request body with a Content-Length header.",
                         kind="LengthRequired")(scope, receive, send)
            return
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            await _error(413, f"The request body must be under {MAX_BODY_BYTES} bytes "
                              f"(Content-Length {length.decode(errors='replace')}).",
                         kind="RequestTooLarge")(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _Slots:
    """At most ``size`` runs at once; counts the running and the waiting for ``/health``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.busy = 0
        self.waiting = 0
        self.done = 0
        self._semaphore = asyncio.Semaphore(size)

    async def __aenter__(self) -> Self:
        self.waiting += 1
        try:
            await self._semaphore.acquire()
        finally:
            self.waiting -= 1
        self.busy += 1
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.busy -= 1
        self.done += 1
        self._semaphore.release()


def create_app(sandbox: Sandbox, *, token: str | None = None, pool_size: int = 4) -> Any:
    """The FastAPI app serving ``sandbox``; ``pool_size`` runs at once (the rest wait).

    The caller owns ``sandbox`` and closes it after the server stops.
    """
    _require_packages()
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    import agentgym

    check_number("pool_size", pool_size, minimum=1)
    app = FastAPI(title="agentgym sandbox service", version=agentgym.__version__)
    slots = _Slots(pool_size)
    # One thread per slot: the runs block (on the Docker API, on a subprocess), the loop never.
    app.state.runs = ThreadPoolExecutor(max_workers=pool_size,
                                        thread_name_prefix="agentgym-sandbox-service")

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> Any:
        return _invalid(exc.errors())

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Any:
        if exc.status_code == 400:  # FastAPI's answer to a body it cannot decode (not UTF-8)
            return _invalid([{"type": "json_invalid", "msg": str(exc.detail)}])
        response = _error(exc.status_code, str(exc.detail), kind=f"HTTP{exc.status_code}")
        response.headers.update(exc.headers or {})  # a 405's Allow
        return response

    @app.get("/health", response_model=HealthReply, responses=_ERRORS)
    async def health() -> dict[str, Any]:
        return {"status": "ok", "backend": sandbox.name, "isolation": sandbox.isolation,
                "pool_size": slots.size, "busy": slots.busy, "waiting": slots.waiting,
                "runs": slots.done, "limits": dataclasses.asdict(sandbox.limits)}

    @app.post("/run", response_model=RunReply, responses=_RUN_ERRORS)
    async def run(body: RunRequest) -> Any:
        call = functools.partial(sandbox.run, body.code, language=body.language, stdin=body.stdin,
                                 files=body.file_contents(), timeout=body.timeout)
        async with slots:
            try:
                result = await asyncio.get_running_loop().run_in_executor(app.state.runs, call)
            except ConfigError as exc:  # e.g. a file path that leaves the work dir
                return _error(422, str(exc), param="files", kind="InvalidRequest")
            except SandboxError as exc:
                _log.error("The sandbox failed a run: %s", exc)
                return _error(503, f"The sandbox failed: {exc}", kind="SandboxError")
        return dataclasses.asdict(result)

    app.add_middleware(CatchAll, log=_log,
                       answer=functools.partial(_error, 500, kind="InternalServerError"))
    return _Guard(app, token)


def _invalid(errors: Sequence[Any]) -> Any:
    """The 422 for a body FastAPI could not parse or validate, in the service's error shape."""
    problems, params = [], []
    example = 'send a JSON object such as {"code": "print(1)"}'
    for error in errors:
        if error.get("type") == "json_invalid":  # loc is ("body", offset): no field to name
            detail = (error.get("ctx") or {}).get("error", "")
            problems.append(f"the body is not valid JSON ({detail or error.get('msg')}); {example}")
            params.append(None)
            continue
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        if where:
            problems.append(f"{where}: {error.get('msg', 'invalid')}")
        else:  # the body as a whole: empty, null, a list
            problems.append(f"the body is not a JSON object ({error.get('msg', 'invalid')}); "
                            f"{example}")
        params.append(where or None)
    return _error(422, "Invalid request: " + "; ".join(problems),
                  param=params[0] if params else None, kind="InvalidRequest")


def _shutdown(app: Any) -> None:
    """Let the run threads of an app made by :func:`create_app` end."""
    app.app.state.runs.shutdown(wait=False, cancel_futures=True)


def serve_sandbox(sandbox: Sandbox, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                  token: str | None = None, pool_size: int = 4, log_level: str = "info") -> None:
    """Serve ``sandbox`` over HTTP until SIGINT or SIGTERM (blocks; call it from the main
    thread); it then returns, and the caller closes the sandbox."""
    _require_packages()
    import uvicorn

    app = create_app(sandbox, token=token, pool_size=pool_size)
    # uvicorn shuts down gracefully on SIGINT / SIGTERM, then sends the signal again to the
    # handler it found: make that one a no-op, so that this returns and the caller can close
    # the sandbox (remove its containers) rather than die by the signal's default action.
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, _ignore) for sig in stops}
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False,
                    timeout_graceful_shutdown=5)
    finally:
        _shutdown(app)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _ignore(signum: int, frame: object) -> None:
    """A signal handler that does nothing (see :func:`serve_sandbox`)."""


class ServiceThread(ServerThread):
    """The service in a thread of this process, on a loopback port; a context manager.

    For tests, benchmarks and notebooks; ``agentgym sandbox serve`` is the
    way to run one for real. ``stop()`` ends the server (the sandbox stays open:
    its owner closes it).

        with LocalSandbox() as sb, ServiceThread(sb) as service:
            RemoteSandbox(service.url).run("print(1)")
    """

    def __init__(self, sandbox: Sandbox, *, port: int | None = None, token: str | None = None,
                 pool_size: int = 4, host: str = "127.0.0.1") -> None:
        _require_packages()
        import uvicorn

        from agentgym.serve.launch import free_port

        self.port = port or free_port(host)
        self._app = create_app(sandbox, token=token, pool_size=pool_size)
        config = uvicorn.Config(self._app, host=host, port=self.port, log_level="warning",
                                access_log=False, lifespan="off", timeout_graceful_shutdown=2)
        super().__init__(config, name="agentgym-sandbox-service", what="The sandbox service",
                         url=f"http://{host}:{self.port}")

    def stop(self) -> None:
        """Stop serving and wait for the server thread; then shut the app's pool. Safe to call twice."""
        running = self._thread is not None
        super().stop()
        if running:
            _shutdown(self._app)
