from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentgym.errors import ServerRequestError
from agentgym.rollout.policy import OpenAIPolicy
from agentgym.serve.stub import StubServer


class _Fixed(BaseHTTPRequestHandler):
    """Answers every POST with one fixed status and body, and counts them."""

    status, body, calls = 200, {}, 0

    def do_POST(self) -> None:  # noqa: N802
        type(self).calls += 1
        self.rfile.read(int(self.headers["content-length"]))
        payload = json.dumps(self.body).encode()
        self.send_response(self.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fixed_server() -> Iterator[tuple[str, type[_Fixed]]]:
    handler = type("Handler", (_Fixed,), {"calls": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    server.shutdown()
    server.server_close()


def complete(base_url: str, **policy: object):  # noqa: ANN201
    async def main():  # noqa: ANN202
        async with OpenAIPolicy(base_url, "m", backoff=0.01, timeout=5, **policy) as client:
            return await client.complete_ids([1, 2, 3])
    return asyncio.run(main())


def test_a_bad_request_is_not_retried(fixed_server: tuple[str, type[_Fixed]]) -> None:
    url, handler = fixed_server
    handler.status, handler.body = 400, {"error": {"message": "max_tokens must be positive"}}
    with pytest.raises(ServerRequestError, match=r"refused the request \(400\).*max_tokens"):
        complete(url)
    assert handler.calls == 1


def test_server_errors_are_retried_then_reported(fixed_server: tuple[str, type[_Fixed]]) -> None:
    url, handler = fixed_server
    handler.status, handler.body = 503, {"error": {"message": "busy"}}
    with pytest.raises(ServerRequestError, match=r"server error 503: busy \(after 3 attempts\)"):
        complete(url, retries=2)
    assert handler.calls == 3


def test_a_server_without_token_ids_is_explained(fixed_server: tuple[str, type[_Fixed]]) -> None:
    url, handler = fixed_server
    handler.body = {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                    "choices": [{"index": 0, "text": "hi", "finish_reason": "stop", "logprobs": None}]}
    with pytest.raises(ServerRequestError, match="no token ids.*--chat-mode"):
        complete(url)


def test_a_completion_carries_ids_logprobs_and_the_prompt_seen() -> None:
    with StubServer(delay=0.0, completion_ids=[7, 8, 9]) as stub:
        generation = complete(stub.base_url)
    assert generation.token_ids == [7, 8, 9] and generation.logprobs == [-0.5] * 3
    assert generation.prompt_ids == [1, 2, 3] and generation.finish_reason == "stop"


def test_a_server_that_reports_no_version_gets_the_version_its_weights_were_pushed_as() -> None:
    """vLLM's answers carry no policy version; the trainer knows what it pushed and when, so a turn
    takes the version of the weights the server had when its request went out (issue 47, defect 4)."""
    pushed = [3]

    async def sample() -> tuple[int | None, int | None]:
        async with OpenAIPolicy(stub.base_url, "m", max_connections=1, weights_version=lambda: pushed[0]) as policy:
            first = await policy.complete_ids([1, 2, 3], max_tokens=4)
            pushed[0] = 4
            second = await policy.complete_ids([1, 2, 3], max_tokens=4)
        return first.policy_version, second.policy_version

    with StubServer(delay=0.0, completion_ids=[7, 8, 9]) as stub:
        assert asyncio.run(sample()) == (3, 4)
        unknown = complete(stub.base_url)
    assert unknown.policy_version is None  # nobody said: unknown, kept by the staleness filter
