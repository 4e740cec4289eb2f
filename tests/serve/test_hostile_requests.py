"""Hostile input to the built-in server (issue 38): keys on the control routes, big bodies,
many stop strings, inputs the schema forbids.

Code a model wrote runs in a sandbox on the same host and reaches loopback, so
these are attacks from inside, not only from the network.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx2
import pytest
from serve_helpers import MODEL_NAME, TIMEOUT_S, RunningServer, ThreadedServer
from typer.testing import CliRunner

from agentgym.serve.app import CONTROL_PATHS, create_app
from agentgym.serve.engine import Engine, EngineConfig

CONTROL_KEY = "control-only"
MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def open_server(tiny_model: str) -> Iterator[str]:
    """An in-process app without an API key (inference open) whose control routes want CONTROL_KEY."""
    engine = Engine(EngineConfig(tiny_model, max_model_len=512))
    try:
        with ThreadedServer(create_app(engine, control_key=CONTROL_KEY, served_model_name=MODEL_NAME,
                                              max_body_bytes=MAX_BODY)) as threaded:
            yield threaded.url
    finally:
        engine.close()


def _post(url: str, key: str | None, json: object = None) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    with httpx2.Client(timeout=TIMEOUT_S) as http:
        return http.post(url, json=json if json is not None else {}, headers=headers)


# --------------------------------------------------------------------- keys ---

@pytest.mark.parametrize("path", sorted(CONTROL_PATHS))
def test_control_routes_want_the_key_even_when_inference_is_open(open_server: str, path: str) -> None:
    for key in (None, "wrong"):
        refused = _post(f"{open_server}{path}", key)
        assert refused.status_code == 401
        assert "Authorization: Bearer" in refused.json()["error"]["message"]
    # With the key the request reaches the route (an empty body is then a bad request, not a 401).
    assert _post(f"{open_server}{path}", CONTROL_KEY).status_code != 401


def test_without_an_api_key_inference_stays_open(open_server: str) -> None:
    answer = _post(f"{open_server}/v1/completions", None,
                   {"model": MODEL_NAME, "prompt": [1, 2, 3], "max_tokens": 2})
    assert answer.status_code == 200
    assert _post(f"{open_server}/reset_prefix_cache", CONTROL_KEY).status_code == 200


def test_an_app_without_keys_still_guards_its_control_routes(tiny_model: str) -> None:
    engine = Engine(EngineConfig(tiny_model, max_model_len=512))
    app = create_app(engine)
    generated = app.state.control_key
    assert isinstance(generated, str) and len(generated) >= 24
    assert create_app(engine).state.control_key != generated  # random, not a constant
    engine.close()


def test_the_builtin_server_generates_a_key_and_wants_it(server: RunningServer) -> None:
    if server.kind != "builtin":
        pytest.skip("BuiltinServer's key")
    assert server.api_key not in ("", "unused")
    with httpx2.Client(timeout=TIMEOUT_S) as http:
        assert http.get(f"{server.url}/v1/models").status_code == 401
        assert http.post(f"{server.url}/update_weights", json={}).status_code == 401
        keyed = http.get(f"{server.url}/v1/models", headers={"Authorization": f"Bearer {server.api_key}"})
        assert keyed.status_code == 200


def test_the_builtin_server_passes_its_key_to_the_child() -> None:
    from agentgym.serve.launch import BuiltinServer

    generated = BuiltinServer("tiny", port=1)
    command = generated.command()
    assert command[command.index("--api-key") + 1] == generated.api_key
    assert BuiltinServer("tiny", port=1).api_key != generated.api_key
    assert BuiltinServer("tiny", port=1, api_key="given").api_key == "given"


def test_serve_refuses_to_bind_off_loopback_without_a_key() -> None:
    from agentgym.cli import app

    result = CliRunner().invoke(app, ["serve", "--model", "tiny", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "Refusing to bind 0.0.0.0 without --api-key" in result.output
    result = CliRunner().invoke(app, ["serve", "--model", "tiny", "--api-key", " "])
    assert result.exit_code == 2
    assert "--api-key is empty" in result.output


# ------------------------------------------------------------ big requests ---

def _assert_too_large(response: httpx2.Response) -> None:
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == 413 and error["type"] == "RequestTooLargeError"
    assert f"limit of {MAX_BODY} bytes" in error["message"]


def test_a_body_over_the_cap_is_413_by_its_content_length(open_server: str) -> None:
    body = b'{"model": "tiny", "prompt": "' + b"a" * MAX_BODY + b'"}'
    with httpx2.Client(timeout=TIMEOUT_S) as http:
        _assert_too_large(http.post(f"{open_server}/v1/completions", content=body,
                                    headers={"Content-Type": "application/json"}))


def test_a_body_over_the_cap_is_413_while_it_streams_in(open_server: str) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: sent chunked
        yield b'{"model": "tiny", "prompt": "'
        for _ in range(MAX_BODY // 4096 + 1):
            yield b"a" * 4096
        yield b'"}'

    with httpx2.Client(timeout=TIMEOUT_S) as http:
        _assert_too_large(http.post(f"{open_server}/v1/completions", content=chunks(),
                                    headers={"Content-Type": "application/json"}))
        # Under the cap, a chunked body is read as usual.
        small = http.post(f"{open_server}/v1/completions", content=iter([b'{"model": "tiny", ',
                                                                            b'"prompt": [1, 2], "max_tokens": 1}']),
                          headers={"Content-Type": "application/json"})
        assert small.status_code == 200


def test_text_far_too_long_to_fit_is_refused_before_tokenizing(open_server: str, tiny_model: str) -> None:
    with httpx2.Client(timeout=TIMEOUT_S) as http:
        answer = http.post(f"{open_server}/v1/completions",
                           json={"model": MODEL_NAME, "prompt": "a" * (MAX_BODY - 100), "max_tokens": 1})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "prompt"
    assert "characters, more than 512 tokens can hold" in answer.json()["error"]["message"]


def test_health_answers_while_a_big_text_is_tokenized(server: RunningServer) -> None:
    """Tokenizing a MiB of text takes seconds on a CPU; it must not hold up the event loop."""
    if server.kind != "builtin":
        pytest.skip("the built-in server's event loop")
    headers = {"Authorization": f"Bearer {server.api_key}"}
    answered_before: list[int] = []
    health: list[int] = []
    done = threading.Event()

    def poll() -> None:
        with httpx2.Client(timeout=TIMEOUT_S) as http:
            while not done.is_set():
                health.append(http.get(f"{server.url}/health").status_code)
                threading.Event().wait(0.05)

    with httpx2.Client(timeout=TIMEOUT_S) as http:
        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        answer = http.post(f"{server.url}/tokenize", headers=headers,
                           json={"model": server.model_name, "prompt": "hello " * 200_000})
        answered_before.append(len(health))
        done.set()
        poller.join(TIMEOUT_S)
    assert answer.status_code == 200 and answer.json()["count"] >= 200_000
    assert set(health) == {200}
    # Answers came in while the tokenizer worked, not only after (a blocked loop answers none).
    assert answered_before[0] >= 3


# ------------------------------------------------------------ stop strings ---

@pytest.mark.parametrize(("stop", "message"), [
    ([f"s{index}" for index in range(33)], "stop may hold at most 32 strings, got 33."),
    (["x" * 257], "each stop string may have at most 256 characters; one has 257."),
])
def test_too_many_or_too_long_stop_strings_are_400(open_server: str, stop: list[str], message: str) -> None:
    for path, body in (("/v1/completions", {"prompt": [1, 2, 3]}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})):
        answer = _post(f"{open_server}{path}", None, {"model": MODEL_NAME, "max_tokens": 2, "stop": stop, **body})
        assert answer.status_code == 400
        assert answer.json()["error"]["param"] == "stop"
        assert answer.json()["error"]["message"] == message


def test_stop_strings_up_to_the_limits_are_served(open_server: str) -> None:
    stop = [f"{index:03d}" + "y" * 253 for index in range(32)]
    answer = _post(f"{open_server}/v1/completions", None,
                   {"model": MODEL_NAME, "prompt": [1, 2, 3], "max_tokens": 4, "stop": stop})
    assert answer.status_code == 200


# ------------------------------------------------- what the schema promises ---

def test_health_and_cache_reset_answer_json(open_server: str) -> None:
    with httpx2.Client(timeout=TIMEOUT_S) as http:
        health = http.get(f"{open_server}/health")
    reset = _post(f"{open_server}/reset_prefix_cache", CONTROL_KEY)
    for answer in (health, reset):
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/json"
        assert answer.json() == {"status": "ok"}


def test_a_wrong_method_is_405_with_allow(open_server: str) -> None:
    with httpx2.Client(timeout=TIMEOUT_S) as http:
        answer = http.delete(f"{open_server}/v1/completions")
    assert answer.status_code == 405
    assert answer.headers["allow"] == "POST"
    assert answer.json()["error"]["code"] == 405


@pytest.mark.parametrize("prompt", [[[False]], [True, 2], [1.5, 2], ["1", 2]])
def test_token_ids_must_be_integers(open_server: str, prompt: list[object]) -> None:
    answer = _post(f"{open_server}/v1/completions", None, {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 1})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"].startswith("prompt")


def test_an_integral_float_is_a_token_id_as_json_schema_says(open_server: str) -> None:
    answer = _post(f"{open_server}/v1/completions", None, {"model": MODEL_NAME, "prompt": [1.0, 2], "max_tokens": 1,
                                                          "return_token_ids": True})
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["prompt_token_ids"] == [1, 2]


def test_stop_token_ids_outside_the_vocabulary_are_400(open_server: str) -> None:
    for stop_token_ids in ([10**9], [True]):
        answer = _post(f"{open_server}/v1/completions", None,
                       {"model": MODEL_NAME, "prompt": [1, 2], "max_tokens": 1, "stop_token_ids": stop_token_ids})
        assert answer.status_code == 400
        assert answer.json()["error"]["param"].startswith("stop_token_ids")


def test_the_schema_declares_the_errors_the_routes_send(open_server: str) -> None:
    with httpx2.Client(timeout=TIMEOUT_S) as http:
        schema = http.get(f"{open_server}/openapi.json").json()
    completions = schema["paths"]["/v1/completions"]["post"]["responses"]
    assert {"200", "400", "401", "413"} <= set(completions) and "422" not in completions
    assert completions["400"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorResponse"}
    assert "ErrorInfo" in schema["components"]["schemas"]


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_schema_violation(server: RunningServer, tmp_path: object) -> None:
    """Every check schemathesis has, bounded in examples and time, but one: it wants a 2xx for any
    schema-valid body, and some bodies are refused for what a schema cannot say (a
    weights folder that does not exist, an adapter that is not loaded)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    if server.kind != "builtin":
        pytest.skip("the built-in server's schema")
    st = shutil.which("st", path=str(Path(sys.executable).parent))
    if st is None:
        pytest.skip("schemathesis is not installed (pip install -e '.[test]')")
    run = subprocess.run(
        [st, "run", f"{server.url}/openapi.json", "--checks", "all",
         "--exclude-checks", "positive_data_acceptance", "--max-examples", "15", "--max-time", "55",
         "--workers", "1", "--seed", "38", "-H", f"Authorization: Bearer {server.api_key}"],
        capture_output=True, text=True, timeout=400, check=False)
    assert run.returncode == 0, run.stdout[-6000:]
    assert "13/13" in run.stdout  # every operation was tested


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/update_weights", b'{"weights_path": "/tmp/\\ud800"}', "weights_path"),
    ("/v1/load_lora_adapter", b'{"lora_name": "x", "lora_path": "/tmp/\\udfff"}', "lora_path"),
    ("/update_weights", b'{"weights_path": "/tmp/' + b"w" * 300 + b'"}', "weights_path"),
    ("/collective_rpc", b'{"method": "reload_weights", "kwargs": {"weights_path": "/tmp/' + b"w" * 300 + b'"}}',
     "kwargs.weights_path"),
    ("/v1/load_lora_adapter", b'{"lora_name": "x", "lora_path": "/tmp/a\\u0000b"}', "lora_path"),
])
def test_a_path_no_file_system_can_hold_is_a_400_naming_it(open_server: str, path: str, body: bytes,
                                                            param: str) -> None:
    """JSON can carry lone surrogates (as escapes), which no file name has, a name over the file
    system's 255 bytes, or a NUL: schemathesis found the 500s."""
    headers = {"Authorization": f"Bearer {CONTROL_KEY}", "Content-Type": "application/json"}
    with httpx2.Client(timeout=TIMEOUT_S) as http:
        answer = http.post(f"{open_server}{path}", content=body, headers=headers)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
