"""What only the built-in server does: API keys, batching, weight updates, its own limits.

One built-in server (with an API key) serves this module; its weights change
in ``test_update_weights_*``, which put the original weights back at the end.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import time
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from serve_helpers import TIMEOUT_S, RunningServer, ThreadedServer

from agentgym.serve.app import CONTROL_PATHS, create_app
from agentgym.serve.engine import Engine, EngineConfig
from agentgym.serve.launch import BuiltinServer

PROMPT = [1, 5, 6, 7]


def _http(server: RunningServer, method: str, path: str, key: str | None = "default",
          **kwargs: Any) -> httpx2.Response:
    headers = {}
    token = server.api_key if key == "default" else key
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    with httpx2.Client(timeout=TIMEOUT_S) as http:
        return http.request(method, f"{server.url}{path}", headers=headers, **kwargs)


def _greedy(server: RunningServer, max_tokens: int = 8) -> Any:
    return server.client().completions.create(
        model=server.model_name, prompt=PROMPT, max_tokens=max_tokens, temperature=0,
        extra_body={"return_token_ids": True}).choices[0]


# ------------------------------------------------------------------ API key ---

def test_without_the_api_key_every_route_but_health_is_401(keyed_server: RunningServer) -> None:
    for key in (None, "wrong"):
        response = _http(keyed_server, "POST", "/v1/completions", key=key,
                         json={"model": keyed_server.model_name, "prompt": "Hi", "max_tokens": 2})
        assert response.status_code == 401
        assert response.json()["error"]["code"] == 401
        assert "Authorization: Bearer" in response.json()["error"]["message"]
    for path in CONTROL_PATHS:
        assert _http(keyed_server, "POST", path, key=None, json={}).status_code == 401, path
        assert _http(keyed_server, "POST", path, key="wrong", json={}).status_code == 401, path
    assert _http(keyed_server, "GET", "/health", key=None).status_code == 200
    with pytest.raises(openai.AuthenticationError):
        keyed_server.client(api_key="wrong").models.list()
    assert keyed_server.client().models.list().data[0].id == keyed_server.model_name


# ----------------------------------------------------------------- batching ---

def test_concurrent_requests_are_all_answered_in_shared_batches(keyed_server: RunningServer) -> None:
    async def ask_all() -> list[Any]:
        async with keyed_server.async_client() as client:
            return await asyncio.gather(*[
                client.completions.create(model=keyed_server.model_name, prompt=PROMPT + [index],
                                          max_tokens=32, temperature=1.0, seed=index)
                for index in range(16)])

    before = _http(keyed_server, "GET", "/stats").json()
    answers = asyncio.run(ask_all())
    after = _http(keyed_server, "GET", "/stats").json()
    assert all(answer.choices[0].finish_reason in ("stop", "length") for answer in answers)
    assert after["requests"] - before["requests"] == 16
    assert after["max_batch_size"] >= 8, after  # they were decoded together, not one by one
    assert after["running"] == after["waiting"] == 0


def test_the_next_turn_reports_its_cached_prompt_tokens_until_the_cache_is_reset(
        keyed_server: RunningServer) -> None:
    """OpenAI's ``usage.prompt_tokens_details.cached_tokens``: the turn before, less its last token."""
    client = keyed_server.client()
    first = list(range(40, 90))

    def ask(prompt: list[int]) -> Any:
        return client.completions.create(model=keyed_server.model_name, prompt=prompt, max_tokens=6,
                                         temperature=0, extra_body={"return_token_ids": True})

    turn = ask(first)
    assert turn.usage.prompt_tokens_details.cached_tokens == 0
    answer = turn.choices[0].token_ids
    follow_up = first + answer + [7, 8, 9]
    assert ask(follow_up).usage.prompt_tokens_details.cached_tokens == len(first) + len(answer) - 1
    assert _http(keyed_server, "POST", "/reset_prefix_cache").status_code == 200
    assert ask(follow_up).usage.prompt_tokens_details.cached_tokens == 0


def test_prompt_plus_max_tokens_beyond_the_context_is_a_400_naming_max_tokens(
        keyed_server: RunningServer) -> None:
    with pytest.raises(openai.BadRequestError, match="max_tokens") as raised:
        keyed_server.client().completions.create(
            model=keyed_server.model_name, prompt=[5] * 500, max_tokens=20)
    assert raised.value.body["param"] == "max_tokens"  # type: ignore[index]


def test_tokenize_and_detokenize_round_trip(keyed_server: RunningServer, tokenizer: Any) -> None:
    tokens = _http(keyed_server, "POST", "/tokenize", json={"prompt": "Push the box"}).json()
    assert tokens["tokens"] == tokenizer.encode("Push the box")
    assert tokens["count"] == len(tokens["tokens"]) and tokens["max_model_len"] == 512
    text = _http(keyed_server, "POST", "/detokenize", json={"tokens": tokens["tokens"]}).json()
    assert text == {"prompt": "Push the box"}


# ---------------------------------------------------------- weight updates ---

@pytest.fixture(scope="module")
def sharper_weights(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """The tiny model with its embeddings scaled up, saved; and its own greedy continuation."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(8.0)
    folder = tmp_path_factory.mktemp("sharper")
    model.save_pretrained(folder)
    with torch.inference_mode():
        out = model.generate(torch.tensor([PROMPT]), max_new_tokens=8, do_sample=False,
                             attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long))
    return folder, out[0, len(PROMPT):].tolist()


def test_update_weights_changes_the_model_and_the_reported_version(
        keyed_server: RunningServer, sharper_weights: tuple[Path, list[int]], tiny_model: str) -> None:
    folder, expected = sharper_weights
    before = _greedy(keyed_server)
    assert getattr(before, "token_ids", None) != expected
    done = _http(keyed_server, "POST", "/update_weights", json={"weights_path": str(folder), "version": 7})
    assert done.status_code == 200, done.text
    assert done.json()["policy_version"] == 7 and done.json()["tensors"] > 0

    client = keyed_server.client()
    completion = client.completions.create(model=keyed_server.model_name, prompt=PROMPT, max_tokens=8,
                                           temperature=0, extra_body={"return_token_ids": True})
    assert getattr(completion.choices[0], "token_ids", None) == expected  # the new model's own greedy
    assert getattr(completion, "policy_version", None) == 7
    chat = client.chat.completions.create(model=keyed_server.model_name, max_tokens=2,
                                          messages=[{"role": "user", "content": "Hi"}])
    assert getattr(chat, "policy_version", None) == 7
    chunks = list(client.chat.completions.create(model=keyed_server.model_name, max_tokens=2, stream=True,
                                                 messages=[{"role": "user", "content": "Hi"}]))
    assert {getattr(chunk, "policy_version", None) for chunk in chunks} == {7}

    original = Path(tiny_model)  # vLLM's route, without a version: the version goes up by one
    rpc = _http(keyed_server, "POST", "/collective_rpc",
                json={"method": "reload_weights", "kwargs": {"weights_path": str(original)}})
    assert rpc.status_code == 200 and rpc.json()["policy_version"] == 8
    assert getattr(_greedy(keyed_server), "token_ids", None) == getattr(before, "token_ids", None)


@pytest.mark.parametrize("body, named", [
    ({"weights_path": "/no/such/folder"}, "weights_path"),
    ({"weights_path": "."}, "weights_path"),  # a folder without .safetensors files
    ({}, "weights_path"),
    ({"weights_path": ".", "version": -1}, "version"),
])
def test_bad_weight_updates_are_400s_and_change_nothing(keyed_server: RunningServer, body: dict[str, Any],
                                                        named: str) -> None:
    version = _http(keyed_server, "GET", "/stats").json()["policy_version"]
    response = _http(keyed_server, "POST", "/update_weights", json=body)
    assert response.status_code == 400, response.text
    assert named in f"{response.json()['error']['param']} {response.json()['error']['message']}"
    assert _http(keyed_server, "GET", "/stats").json()["policy_version"] == version
    assert _greedy(keyed_server, max_tokens=2).finish_reason in ("stop", "length")


def test_weights_of_another_shape_are_refused(keyed_server: RunningServer, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    save_file({"model.embed_tokens.weight": torch.zeros(3, 3)}, str(tmp_path / "model.safetensors"))
    response = _http(keyed_server, "POST", "/update_weights", json={"weights_path": str(tmp_path)})
    assert response.status_code == 400
    assert "wrong shape" in response.json()["error"]["message"]


# -------------------------------------------------------------------- LoRA ---

@pytest.mark.skipif(importlib.util.find_spec("peft") is not None, reason="peft is installed here")
def test_lora_without_peft_is_a_clear_501(keyed_server: RunningServer, tmp_path: Path) -> None:
    response = _http(keyed_server, "POST", "/v1/load_lora_adapter",
                     json={"lora_name": "adapter", "lora_path": str(tmp_path)})
    assert response.status_code == 501
    assert "pip install peft" in response.json()["error"]["message"]


@pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="needs peft")
def test_a_lora_adapter_is_served_under_its_name(keyed_server: RunningServer, tiny_model: str,
                                                 tmp_path: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    adapted = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                              init_lora_weights=False))
    adapted.save_pretrained(tmp_path)
    response = _http(keyed_server, "POST", "/v1/load_lora_adapter",
                     json={"lora_name": "adapter", "lora_path": str(tmp_path)})
    assert response.status_code == 200, response.text
    assert "adapter" in [model.id for model in keyed_server.client().models.list().data]
    choice = keyed_server.client().completions.create(model="adapter", prompt=PROMPT, max_tokens=4,
                                                      temperature=0)
    assert choice.choices[0].finish_reason in ("stop", "length")
    unloaded = _http(keyed_server, "POST", "/v1/unload_lora_adapter", json={"lora_name": "adapter"})
    assert unloaded.status_code == 200


# ----------------------------------------------------------- internal errors ---

def test_an_internal_error_is_a_500_in_the_error_shape_and_the_server_goes_on(
        tiny_model: str, caplog: pytest.LogCaptureFixture) -> None:
    engine = Engine(EngineConfig(tiny_model, max_model_len=128))
    real_submit = engine.submit
    failures = iter([RuntimeError("boom")])

    def flaky_submit(*args: Any, **kwargs: Any) -> Any:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return real_submit(*args, **kwargs)

    engine.submit = flaky_submit  # type: ignore[method-assign]
    app = create_app(engine, served_model_name="tiny")
    caplog.set_level(logging.ERROR, logger="agentgym.serve")
    try:
        with ThreadedServer(app) as threaded, httpx2.Client(timeout=TIMEOUT_S) as http:
            body = {"model": "tiny", "prompt": "Hi", "max_tokens": 2}
            failed = http.post(f"{threaded.url}/v1/completions", json=body)
            assert failed.status_code == 500
            assert failed.json()["error"]["message"] == "internal error: RuntimeError: boom"
            assert http.post(f"{threaded.url}/v1/completions", json=body).status_code == 200
    finally:
        engine.close()
    assert any("boom" in str(record.exc_info) for record in caplog.records)


def test_a_client_that_hangs_up_stops_its_generation(tiny_model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import agentgym.serve.app as app_module

    monkeypatch.setattr(app_module, "_DISCONNECT_POLL_S", 0.05)
    engine = Engine(EngineConfig(tiny_model, max_model_len=4096))
    try:
        with ThreadedServer(create_app(engine, served_model_name="tiny")) as threaded:
            client = openai.OpenAI(base_url=f"{threaded.url}/v1", api_key="none", max_retries=0, timeout=0.3)
            with pytest.raises(openai.APITimeoutError):
                client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4000,
                                          extra_body={"ignore_eos": True})
            deadline = time.monotonic() + 10
            while engine.stats()["running"] and time.monotonic() < deadline:
                time.sleep(0.02)
            stats = engine.stats()
    finally:
        engine.close()
    assert stats["running"] == 0 and stats["generated_tokens"] < 4000  # cut short, not finished


def test_the_serve_command_checks_its_port() -> None:
    from typer.testing import CliRunner

    from agentgym.cli import app

    result = CliRunner().invoke(app, ["serve", "--model", "tiny", "--port", "0"])
    assert result.exit_code == 2
    assert "--port must be between 1 and 65535, got 0." in result.output
    result = CliRunner().invoke(app, ["serve", "--model", "tiny", "--prefix-cache-mib", "-1"])
    assert result.exit_code == 2
    assert "--prefix-cache-mib must be 0 (off) or more, got -1." in result.output


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie nobody reaped has stopped running)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_the_built_in_server_stops_when_its_parent_is_killed(tiny_model: str) -> None:
    """A trainer killed with SIGKILL runs no cleanup; its server must not live on."""
    import subprocess
    import sys

    with subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from agentgym.serve.launch import BuiltinServer\n"
         f"server = BuiltinServer({tiny_model!r}).start()\n"
         "print(server.process.pid, flush=True)\n"
         "time.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True) as parent:
        try:
            server_pid = int(parent.stdout.readline())
            assert _running(server_pid)
            parent.kill()
            parent.wait(TIMEOUT_S)
            deadline = time.monotonic() + TIMEOUT_S
            while _running(server_pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not _running(server_pid)
        finally:
            parent.kill()


def test_the_builtin_server_passes_device_and_dtype_only_when_given() -> None:
    plain = BuiltinServer("tiny", port=1).command()
    assert "--device" not in plain and "--dtype" not in plain  # the server's defaults: auto, float32
    chosen = BuiltinServer("tiny", port=1, device="cpu", dtype="bfloat16").command()
    assert chosen[chosen.index("--device") + 1] == "cpu"
    assert chosen[chosen.index("--dtype") + 1] == "bfloat16"


def test_the_builtin_server_runs_on_tcmalloc_unless_told_otherwise(tiny_model: str, tcmalloc: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym.allocator import ALLOCATOR_ENV, preloaded_allocator

    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv(ALLOCATOR_ENV, raising=False)
    with BuiltinServer(tiny_model) as server:
        assert server.process is not None
        assert preloaded_allocator(server.process.pid).startswith(tcmalloc)
        answer = httpx2.post(f"{server.base_url}/completions",
                             json={"model": tiny_model, "prompt": [1, 2, 3], "max_tokens": 4},
                             headers={"Authorization": f"Bearer {server.api_key}"}, timeout=60)
        assert answer.status_code == 200
    monkeypatch.setenv(ALLOCATOR_ENV, "system")
    with BuiltinServer(tiny_model) as server:
        assert server.process is not None
        assert preloaded_allocator(server.process.pid) == "system"
