"""What the serving tests share: how to reach a running server, and an in-thread server."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Self

import openai

from agentgym.serve.launch import free_port, wait_for_health

MODEL_NAME = "tiny"
MAX_MODEL_LEN = 512
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RunningServer:
    """What a test needs to talk to a server."""

    kind: str  # "builtin" or "vllm"
    url: str  # the root: /health, /tokenize, /update_weights
    model_name: str
    max_model_len: int
    api_key: str = "unused"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def client(self, **kwargs: Any) -> openai.OpenAI:
        """A synchronous OpenAI client (no retries, explicit timeout)."""
        options: dict[str, Any] = {"api_key": self.api_key, "max_retries": 0, "timeout": TIMEOUT_S}
        return openai.OpenAI(base_url=self.base_url, **{**options, **kwargs})

    def async_client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        """An asynchronous OpenAI client (no retries, explicit timeout)."""
        options: dict[str, Any] = {"api_key": self.api_key, "max_retries": 0, "timeout": TIMEOUT_S}
        return openai.AsyncOpenAI(base_url=self.base_url, **{**options, **kwargs})


class ThreadedServer:
    """An app served by uvicorn in a thread of this process (for tests that patch the engine)."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error",
                                lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        wait_for_health(f"{self.url}/health", timeout=30.0)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.should_exit = True
        self._thread.join(10.0)
