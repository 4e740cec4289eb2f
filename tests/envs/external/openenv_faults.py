"""A stub OpenEnv server whose routes misbehave, one way per path prefix; not a test module.

``/ok`` answers as OpenEnv does; the others fail in one way each, on the first step
(or on ``/schema``): the point of a stub is the fault.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI, Response, WebSocket

from agentgym.serve.launch import free_port

TEXT_ACTION = {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}
OBSERVATION = {"type": "object", "properties": {"echo": {"type": "string"}}}
SCHEMAS = {
    "ok": {"action": TEXT_ACTION, "observation": OBSERVATION, "state": {}},
    "numbers": {"action": {"type": "object", "properties": {"move_id": {"type": "integer"}},
                           "required": ["move_id"]}, "observation": OBSERVATION, "state": {}},
    "listobs": {"action": TEXT_ACTION, "observation": {"type": "array"}, "state": {}},
}


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/{mode}/schema")
    async def schema(mode: str) -> Response:
        if mode == "notutf8":
            return Response(content=b'{"action": "\xff\xfe"}', media_type="application/json")
        return Response(content=json.dumps(SCHEMAS.get(mode, SCHEMAS["ok"])), media_type="application/json")

    @app.websocket("/{mode}/ws")
    async def session(websocket: WebSocket, mode: str) -> None:
        await websocket.accept()
        while True:
            message = json.loads(await websocket.receive_text())
            if message["type"] == "close":
                await websocket.close()
                return
            if message["type"] == "reset":
                await websocket.send_text(_observation("start"))
                continue
            if mode == "drop":
                raise RuntimeError("the stub drops the connection")  # uvicorn closes it (1011)
            if mode == "slow":
                await asyncio.sleep(30)
            if mode == "binary":
                await websocket.send_bytes(b'{"type": "observation", "data": {"observation": {"echo": "\xff"}}}')
                continue
            if mode == "badreward":
                await websocket.send_text(_observation("x", reward="lots"))
                continue
            await websocket.send_text(_observation(message["data"].get("message", ""), reward=1.0, done=True))

    return app


def _observation(echo: str, *, reward: object = None, done: bool = False) -> str:
    return json.dumps({"type": "observation", "data": {"observation": {"echo": echo}, "reward": reward,
                                                       "done": done}})


@contextmanager
def fault_server() -> Iterator[str]:
    """The stub on a loopback port; yields its base URL (append a mode: ``URL/drop``)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(_app(), host="127.0.0.1", port=port, log_level="critical",
                                           lifespan="off", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
