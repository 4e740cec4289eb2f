"""agentgym.serve.vllm: the launcher without vLLM, then real vLLM (CPU build) on the tiny model.

The real-vLLM tests (marked ``vllm``) skip when no interpreter can import vllm; run
scripts/setup_vllm.sh (or set AGENTGYM_VLLM_PYTHON) to make them run. They pin what the
built-in server mirrors: where ``token_ids`` / ``prompt_token_ids`` sit in the JSON, what
``logprobs`` mean, and that a weight reload makes vLLM compute what transformers computes.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from process_helpers import assert_group_gone, has_proc, live_group_members

from agentgym.errors import ConfigError, ServerStartError, WeightSyncError
from agentgym.serve import vllm as vllm_mod
from agentgym.serve.vllm import (
    VLLMServer,
    reload_weights,
    serve_vllm,
    vllm_command,
    vllm_env,
    vllm_python,
)

# -- helpers -------------------------------------------------------------------------------

FAKE_VLLM = """
import http.server, os, signal, subprocess, sys, time
mode = os.environ["FAKE_VLLM_MODE"]
if mode == "crash":
    print("fake vllm: CUDA out of memory", flush=True)
    sys.exit(3)
port = int(sys.argv[sys.argv.index("--port") + 1])
engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "hang":
    time.sleep(600)

class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"object": "list", "data": []}')

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Models).serve_forever()
"""


def _script(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fake "python" that acts as vLLM's server; FAKE_VLLM_MODE picks how it behaves."""
    server = tmp_path / "fake_vllm.py"
    server.write_text(FAKE_VLLM)
    monkeypatch.setenv("FAKE_VLLM_MODE", "serve")
    return _script(tmp_path / "python", f'exec "{sys.executable}" "{server}" "$@"')


needs_proc = pytest.mark.skipif(not has_proc(), reason="needs Linux /proc")


# -- the command and its environment -------------------------------------------------------


def test_command_has_the_flags_rl_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_mod, "_cuda_available", lambda: False)
    command = vllm_command("/models/m", python="/venv/bin/python", port=8123,
                           served_model_name="policy", max_model_len=512)
    assert command == [
        "/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server",
        "--model", "/models/m", "--served-model-name", "policy",
        "--host", "127.0.0.1", "--port", "8123", "--dtype", "float32",
        "--logprobs-mode", "processed_logprobs", "--max-model-len", "512",
    ]


def test_command_leaves_dtype_to_vllm_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_mod, "_cuda_available", lambda: True)
    command = vllm_command("m", python="py", port=1, served_model_name="m")
    assert command[command.index("--dtype") + 1] == "auto"
    assert "--max-model-len" not in command


def test_command_keeps_an_explicit_dtype_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_mod, "_cuda_available", lambda: False)
    command = vllm_command("m", python="py", port=1, served_model_name="m", dtype="bfloat16")
    assert command[command.index("--dtype") + 1] == "bfloat16"


def test_command_lora_key_and_extra_args_go_last() -> None:
    command = vllm_command("m", python="py", port=1, served_model_name="m", enable_lora=True,
                           max_lora_rank=32, api_key="sk-test", extra_args=["--seed", "3"])
    assert command[-7:] == ["--enable-lora", "--max-lora-rank", "32",
                            "--api-key", "sk-test", "--seed", "3"]


def test_command_rejects_a_lora_rank_vllm_does_not_accept() -> None:
    with pytest.raises(ConfigError, match=r"max_lora_rank must be one of .* got 12"):
        vllm_command("m", python="py", port=1, served_model_name="m", enable_lora=True,
                     max_lora_rank=12)


def test_env_enables_weight_reloads_and_runtime_lora(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "0")  # RL needs it: overridden
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    env = vllm_env(cpu=True)
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["PATH"] == os.environ["PATH"]


def test_env_keeps_a_kv_cache_size_already_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    assert vllm_env(cpu=True)["VLLM_CPU_KVCACHE_SPACE"] == "4"
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE")
    assert "VLLM_CPU_KVCACHE_SPACE" not in vllm_env(cpu=False)


# -- finding vLLM --------------------------------------------------------------------------


def test_env_var_names_the_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _script(tmp_path / "python", "exit 0")  # "imports vllm"
    monkeypatch.setenv("AGENTGYM_VLLM_PYTHON", fake)
    assert vllm_python() == fake


def test_env_var_that_cannot_import_vllm_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _script(tmp_path / "python",
                   "echo \"ModuleNotFoundError: No module named 'vllm'\" >&2; exit 1")
    monkeypatch.setenv("AGENTGYM_VLLM_PYTHON", fake)
    with pytest.raises(ConfigError, match=r"AGENTGYM_VLLM_PYTHON=.* cannot import vllm "
                                          r"\(ModuleNotFoundError: No module named 'vllm'\)"):
        vllm_python()


def test_env_var_pointing_nowhere_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTGYM_VLLM_PYTHON", str(tmp_path / "missing" / "python"))
    with pytest.raises(ConfigError, match=r"cannot import vllm \(FileNotFoundError.*setup_vllm"):
        vllm_python()


def test_falls_back_to_a_venv_in_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTGYM_VLLM_PYTHON", raising=False)
    monkeypatch.setattr(vllm_mod, "_importable_here", lambda: False)
    monkeypatch.setattr(vllm_mod, "_REPO_ROOT", tmp_path / "checkout")  # holds no venv
    monkeypatch.chdir(tmp_path)
    assert vllm_python() is None
    (tmp_path / ".venv-vllm" / "bin").mkdir(parents=True)
    fake = _script(tmp_path / ".venv-vllm" / "bin" / "python", "exit 0")
    assert vllm_python() == fake


def test_not_installed_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_mod, "vllm_python", lambda: None)
    expected = (r"scripts/setup_vllm\.sh .* `pip install vllm` .* "
                r"AGENTGYM_VLLM_PYTHON=/path/to/python")
    with pytest.raises(ConfigError, match=expected):
        serve_vllm(model="m", host="127.0.0.1", port=1, served_model_name="m",
                   max_model_len=None, api_key=None)
    with pytest.raises(ConfigError, match=expected):
        VLLMServer("m").start()


def test_serve_vllm_returns_the_exit_status(
    fake_vllm: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(vllm_mod, "vllm_python", lambda: fake_vllm)
    monkeypatch.setenv("FAKE_VLLM_MODE", "crash")
    status = serve_vllm(model="m", host="127.0.0.1", port=1, served_model_name="m",
                        max_model_len=None, api_key=None)
    assert status == 3
    assert "CUDA out of memory" in capfd.readouterr().out


# -- VLLMServer's life cycle, against a fake server ----------------------------------------


@needs_proc
def test_server_starts_answers_and_leaves_nothing_behind(fake_vllm: str, tmp_path: Path) -> None:
    with VLLMServer(str(tmp_path), python=fake_vllm, served_model_name="policy") as server:
        assert server.base_url == f"{server.url}/v1"
        assert server.url.startswith("http://127.0.0.1:")
        assert server.model_name == "policy"
        assert server.log_path is not None and server.log_path.exists()
        assert server.process is not None
        pgid = server.process.pid
        assert len(live_group_members(pgid)) == 2  # the server and its "engine"
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=5) as response:
            assert response.status == 200
    assert server.process is None
    assert_group_gone(pgid)


def test_server_that_exits_fails_fast_with_its_log(
    fake_vllm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "crash")
    started = time.monotonic()
    with pytest.raises(ServerStartError, match=r"(?s)exited with status 3.*CUDA out of memory"):
        VLLMServer(str(tmp_path), python=fake_vllm, startup_timeout=60).start()
    assert time.monotonic() - started < 30


@needs_proc
def test_server_that_never_answers_times_out_and_is_stopped(
    fake_vllm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "hang")
    stopped: list[int] = []
    stop_group = vllm_mod._stop_group
    monkeypatch.setattr(vllm_mod, "_stop_group", lambda process, grace: (
        stopped.append(process.pid), stop_group(process, grace)))
    server = VLLMServer(str(tmp_path), python=fake_vllm, startup_timeout=1.5)
    with pytest.raises(ServerStartError, match=r"did not answer on .* within 1\.5 s"):
        server.start()
    assert server.process is None
    assert_group_gone(stopped[0])


@needs_proc
def test_stop_kills_a_server_that_ignores_sigterm(
    fake_vllm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "stubborn")
    monkeypatch.setattr(vllm_mod, "_STOP_GRACE_S", 0.5)
    server = VLLMServer(str(tmp_path), python=fake_vllm)
    server.start()
    assert server.process is not None
    pgid = server.process.pid
    server.stop()
    server.stop()  # twice is fine
    assert_group_gone(pgid)


# -- reload_weights without a server -------------------------------------------------------


def test_reload_needs_a_safetensors_folder(tmp_path: Path) -> None:
    with pytest.raises(WeightSyncError, match=r"holds no \*\.safetensors file"):
        reload_weights("http://127.0.0.1:1", tmp_path)


def test_reload_against_no_server_is_a_weight_sync_error(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        with pytest.raises(WeightSyncError, match=r"POST http://127\.0\.0\.1:\d+/collective_rpc"):
            reload_weights(f"http://127.0.0.1:{port}/v1", tmp_path, timeout=5)


def test_public_names() -> None:
    assert set(vllm_mod.__all__) == {
        "ENV_VAR", "INSTALL_HINT", "VLLMServer", "reload_weights", "request_json", "serve_vllm",
        "vllm_command", "vllm_env", "vllm_python",
    }
    assert all(hasattr(vllm_mod, name) for name in vllm_mod.__all__)


# -- real vLLM -----------------------------------------------------------------------------

PROMPTS = [[1, 5, 6, 7], [1, 40, 41, 42, 43, 44], [1, 300, 200, 100, 9], [1, 77]]
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def vllm_server(real_vllm: VLLMServer) -> VLLMServer:
    """Real vLLM serving the tiny model (the session's, see tests/conftest.py)."""
    return real_vllm


@pytest.fixture(scope="module")
def client(vllm_server: VLLMServer) -> Iterator[Any]:
    import openai

    with openai.OpenAI(base_url=vllm_server.base_url, api_key="unused", max_retries=0,
                       timeout=60.0) as client:
        yield client


def _complete(client: Any, model: str, prompt: list[int] | list[list[int]],
              **kwargs: Any) -> dict[str, Any]:
    response = client.completions.create(
        model=model, prompt=prompt, max_tokens=MAX_TOKENS,
        extra_body={"return_token_ids": True}, **kwargs,
    )
    return dict(response.model_dump())


@pytest.mark.vllm
@pytest.mark.slow
def test_token_ids_and_logprobs_sit_on_each_choice(vllm_server: VLLMServer, client: Any) -> None:
    body = _complete(client, vllm_server.model_name, PROMPTS[0], logprobs=1, temperature=1.0,
                     seed=0)
    choice = body["choices"][0]
    # vLLM 0.32: both lists on the choice, none on the response (the built-in server mirrors it)
    assert body.get("prompt_token_ids") is None and body.get("token_ids") is None
    assert choice["prompt_token_ids"] == PROMPTS[0]
    token_ids = choice["token_ids"]
    assert len(token_ids) == body["usage"]["completion_tokens"] == MAX_TOKENS
    assert all(isinstance(token, int) for token in token_ids)
    logprobs = choice["logprobs"]["token_logprobs"]
    assert len(logprobs) == len(token_ids) == len(choice["logprobs"]["tokens"])
    assert all(math.isfinite(value) and value <= 0 for value in logprobs)


@pytest.mark.vllm
@pytest.mark.slow
def test_a_batch_of_token_prompts_gets_one_choice_each(
    vllm_server: VLLMServer, client: Any
) -> None:
    body = _complete(client, vllm_server.model_name, PROMPTS[:2], temperature=0)
    assert [choice["index"] for choice in body["choices"]] == [0, 1]
    assert [choice["prompt_token_ids"] for choice in body["choices"]] == PROMPTS[:2]
    assert all(len(choice["token_ids"]) == MAX_TOKENS for choice in body["choices"])


@pytest.mark.vllm
@pytest.mark.slow
def test_logprobs_are_processed_logprobs(
    vllm_server: VLLMServer, client: Any, tiny_model: str
) -> None:
    """At temperature T, each logprob is log_softmax(logits / T) of the model: what was sampled."""
    import torch

    temperature = 0.7
    choice = _complete(client, vllm_server.model_name, PROMPTS[1], logprobs=1,
                       temperature=temperature, seed=1)["choices"][0]
    ids = PROMPTS[1] + choice["token_ids"]
    logits = _hf_model(tiny_model)(torch.tensor([ids])).logits[0]
    expected = torch.log_softmax(logits / temperature, dim=-1)
    start = len(PROMPTS[1]) - 1
    reference = [expected[start + i, token].item() for i, token in enumerate(choice["token_ids"])]
    assert choice["logprobs"]["token_logprobs"] == pytest.approx(reference, abs=1e-4)


@pytest.mark.vllm
@pytest.mark.slow
def test_reloaded_weights_make_vllm_generate_what_transformers_does(
    vllm_server: VLLMServer, client: Any, tiny_model: str, tmp_path: Path
) -> None:
    """The weight-sync proof: save changed weights, reload them, vLLM's greedy output follows."""
    import torch

    model = _hf_model(tiny_model)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(5.0)
    model.save_pretrained(tmp_path)
    expected = [_hf_greedy(model, prompt) for prompt in PROMPTS]
    before = [_vllm_greedy(client, vllm_server.model_name, prompt) for prompt in PROMPTS]
    assert before != expected, "the change to the weights must change the greedy output"
    try:
        reload_weights(vllm_server.url, tmp_path)
        after = [_vllm_greedy(client, vllm_server.model_name, prompt) for prompt in PROMPTS]
    finally:
        reload_weights(vllm_server.url, tiny_model)  # other tests see the original weights
    assert after == expected
    assert [_vllm_greedy(client, vllm_server.model_name, p) for p in PROMPTS] == before


def _hf_model(folder: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.eval().requires_grad_(False)


def _hf_greedy(model: Any, prompt: list[int]) -> list[int]:
    import torch

    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=MAX_TOKENS,
                         do_sample=False)
    return [int(token) for token in out[0, len(prompt):]]


def _vllm_greedy(client: Any, model: str, prompt: list[int]) -> list[int]:
    choice = _complete(client, model, prompt, temperature=0)["choices"][0]
    return [int(token) for token in choice["token_ids"]]

