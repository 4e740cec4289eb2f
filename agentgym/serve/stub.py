"""A stub OpenAI-compatible server: fixed latency, canned tokens, injected faults.

For tests and benchmarks where the point is the client side (the env manager)
rather than a model: it answers ``POST /v1/completions`` after ``delay``
seconds with ``completion_ids`` as ``token_ids`` (vLLM's extension) and
logprobs (``POST /v1/chat/completions`` with ``completion_text`` as the
message), and can fail every n-th request with a 500, hang it past any
client timeout, or drop its connection without a reply. Plain asyncio HTTP,
so it costs far less CPU per request than the code it is used to measure.

    python -m agentgym.serve.stub --port 8123 --delay 0.05

or, in a test or benchmark, ``with StubServer(delay=0.05) as stub: stub.base_url``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentgym.errors import ServerStartError
from agentgym.serve.launch import free_port, wait_for_health

__all__ = ["main", "serve_stub", "StubConfig", "StubServer"]


@dataclass
class StubConfig:
    """How the stub answers."""

    delay: float = 0.05
    #: token ids of every completion; by default a well-formed Sokoban move
    completion_text: str = "<answer>Up</answer>"
    completion_ids: Sequence[int] = (10, 11, 12, 2)
    fail_every: int = 0   # every n-th request gets a 500 (0 = never)
    hang_every: int = 0   # every n-th request never answers
    drop_every: int = 0   # every n-th request has its connection closed with no reply
    #: ids the stub claims to have put before every prompt (a server that alters prompts)
    prompt_prefix: Sequence[int] = ()
    model: str = "stub"
    requests: int = field(default=0, init=False)


def _completion_body(config: StubConfig, request: dict) -> bytes:
    limit = request.get("max_tokens") or len(config.completion_ids)
    ids = list(config.completion_ids)[:limit]
    finish = "stop" if len(ids) == len(config.completion_ids) else "length"
    prompt = request.get("prompt")
    prompt_ids = list(config.prompt_prefix) + (prompt if isinstance(prompt, list) else [])
    choice = {
        "index": 0, "text": config.completion_text, "finish_reason": finish,
        "token_ids": ids, "prompt_token_ids": prompt_ids,
        "logprobs": {"tokens": [str(i) for i in ids], "token_logprobs": [-0.5] * len(ids),
                     "top_logprobs": None, "text_offset": [0] * len(ids)},
    }
    body = {
        "id": f"cmpl-{config.requests}", "object": "text_completion", "created": int(time.time()),
        "model": config.model, "choices": [choice],
        "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids),
                  "total_tokens": len(prompt_ids) + len(ids)},
    }
    return json.dumps(body).encode()


def _chat_body(config: StubConfig) -> bytes:
    """A chat completion whose message is ``completion_text`` (for chat clients, e.g. a judge)."""
    choice = {"index": 0, "finish_reason": "stop",
              "message": {"role": "assistant", "content": config.completion_text}}
    body = {"id": f"chatcmpl-{config.requests}", "object": "chat.completion",
            "created": int(time.time()), "model": config.model, "choices": [choice],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
    return json.dumps(body).encode()


def _response(status: int, body: bytes) -> bytes:
    reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}.get(status, "Error")
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, dict] | None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    path = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else "/"
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return path, (json.loads(body) if body else {})


async def _handle(config: StubConfig, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                path, request = await _read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            config.requests += 1
            number = config.requests
            if path.endswith("/models"):
                writer.write(_response(200, json.dumps({"object": "list", "data": [
                    {"id": config.model, "object": "model"}]}).encode()))
                await writer.drain()
                continue
            if config.drop_every and number % config.drop_every == 0:
                return
            if config.hang_every and number % config.hang_every == 0:
                await asyncio.sleep(3600)
            await asyncio.sleep(config.delay)
            if config.fail_every and number % config.fail_every == 0:
                body = json.dumps({"error": {"message": "injected failure", "type": "server_error"}})
                writer.write(_response(500, body.encode()))
            elif path.endswith("/chat/completions"):
                writer.write(_response(200, _chat_body(config)))
            else:
                writer.write(_response(200, _completion_body(config, request)))
            await writer.drain()
    finally:
        writer.close()


async def serve_stub(config: StubConfig, port: int) -> None:
    server = await asyncio.start_server(lambda r, w: _handle(config, r, w), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()



class StubServer:
    """Run the stub in a subprocess (its own core) for the duration of a ``with``."""

    def __init__(self, *, port: int | None = None, **config: object) -> None:
        self.port = port or free_port()
        self.config = config
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> StubServer:
        args = [sys.executable, "-m", "agentgym.serve.stub", "--port", str(self.port)]
        for key, value in self.config.items():
            flag = "--" + key.replace("_", "-")
            args += [flag, ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)]
        self.process = subprocess.Popen(args)
        try:
            wait_for_health(f"{self.base_url}/models", 30.0, self.process)
        except ServerStartError:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--completion-text", default=StubConfig.completion_text)
    parser.add_argument("--completion-ids", default="10,11,12,2")
    parser.add_argument("--prompt-prefix", default="", help="ids reported before every prompt, e.g. 99")
    for name in ("fail-every", "hang-every", "drop-every"):
        parser.add_argument(f"--{name}", type=int, default=0)
    args = parser.parse_args(argv)
    config = StubConfig(
        delay=args.delay, completion_text=args.completion_text,
        completion_ids=[int(i) for i in args.completion_ids.split(",")],
        fail_every=args.fail_every, hang_every=args.hang_every, drop_every=args.drop_every,
        prompt_prefix=[int(i) for i in args.prompt_prefix.split(",") if i],
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_stub(config, args.port))


if __name__ == "__main__":
    main()
