"""Weight sync: after a push, the server decodes greedily exactly what the trainer's model does.

The proof runs against the built-in server and against real vLLM (CPU build, marked
``vllm``): the trainer's model is first trained a few steps, so the server's output
before the push differs from the model's and the test can fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from trainer_helpers import (
    API_KEY,
    PROMPTS,
    all_greedy,
    hf_greedy,
    load_model,
    server_greedy,
    train_a_little,
)

from agentgym.errors import ConfigError, WeightSyncError
from agentgym.serve.launch import BuiltinServer, free_port
from agentgym.trainers.loop.sync import (
    SYNC_METHODS,
    BuiltinSync,
    SyncResult,
    VLLMSync,
    WeightSync,
    make_weight_sync,
    save_weights,
    served_weight_version,
)

NAME = "tiny"


def _lora(model: Any, seed: int = 0) -> Any:
    """A LoRA adapter with random (non-zero) weights on the attention projections."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    config = LoraConfig(r=8, lora_alpha=32, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return get_peft_model(model, config).eval()


# -- without a server --------------------------------------------------------------------------


def test_save_weights_writes_every_name_tied_ones_too(tiny_model: str, tmp_path: Path) -> None:
    model = load_model(tiny_model)
    size = save_weights(model, tmp_path)
    saved = load_file(str(tmp_path / "model.safetensors"))
    assert size == (tmp_path / "model.safetensors").stat().st_size
    state = model.state_dict()
    # lm_head is tied to the embeddings; vLLM's reload leaves it stale unless it is named
    assert state["lm_head.weight"].data_ptr() == state["model.embed_tokens.weight"].data_ptr()
    assert set(saved) == set(state)
    assert all(torch.equal(saved[name], state[name]) for name in saved)
    assert not list(tmp_path.glob(".*partial"))


def test_save_weights_takes_a_state_dict(tmp_path: Path) -> None:
    save_weights({"a": torch.ones(2, 3).t(), "b": torch.zeros(1)}, tmp_path)  # non-contiguous is fine
    saved = load_file(str(tmp_path / "model.safetensors"))
    assert torch.equal(saved["a"], torch.ones(3, 2))


def test_full_sync_refuses_a_lora_model(tiny_model: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="carries a LoRA adapter: merge it first"):
        save_weights(_lora(load_model(tiny_model)), tmp_path)


def test_save_weights_refuses_what_is_not_weights(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="module or a state dict, got list"):
        save_weights([1, 2], tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'x' is a str, not a tensor"):
        save_weights({"x": "nope"}, tmp_path)  # type: ignore[dict-item]


def test_make_weight_sync_names_the_methods(tmp_path: Path) -> None:
    assert SYNC_METHODS == ("builtin", "vllm")
    kinds = {method: type(make_weight_sync(method, "http://127.0.0.1:1", model_name="m", folder=tmp_path))
             for method in SYNC_METHODS}
    assert kinds == {"builtin": BuiltinSync, "vllm": VLLMSync}
    assert all(isinstance(make_weight_sync(m, "http://127.0.0.1:1", model_name="m", folder=tmp_path),
                          WeightSync) for m in SYNC_METHODS)
    with pytest.raises(ConfigError, match="Unknown weight sync method 'nfs'; use one of builtin, vllm"):
        make_weight_sync("nfs", "http://127.0.0.1:1")


def test_bad_arguments_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must start with http:// or https://"):
        BuiltinSync("127.0.0.1:8000")
    with pytest.raises(ConfigError, match="version must be a whole number >= 0, got -1"):
        BuiltinSync("http://127.0.0.1:1", folder=tmp_path).push(torch.nn.Linear(2, 2), version=-1)


def test_no_server_is_a_weight_sync_error(tmp_path: Path) -> None:
    sync = BuiltinSync(f"http://127.0.0.1:{free_port()}/v1", folder=tmp_path, timeout=5)
    with pytest.raises(WeightSyncError, match="update_weights failed: .* Is the server running"):
        sync.push({"w": torch.ones(1)})
    assert sync.version == 0


def test_a_temporary_folder_is_removed_on_close() -> None:
    sync = BuiltinSync("http://127.0.0.1:1")
    folder = sync._scratch.path
    assert folder.is_dir()
    sync.close()
    assert not folder.exists()


# -- the built-in server -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def builtin(tiny_model: str) -> Iterator[BuiltinServer]:
    """A built-in server of this module's own: its weights change here."""
    with BuiltinServer(tiny_model, served_model_name=NAME, max_model_len=512, api_key=API_KEY) as server:
        yield server


@pytest.mark.slow
def test_builtin_server_generates_what_the_trainer_model_does_after_a_sync(
    builtin: BuiltinServer, tiny_model: str, tmp_path: Path
) -> None:
    model = train_a_little(load_model(tiny_model))
    expected = [hf_greedy(model, prompt) for prompt in PROMPTS]
    assert all_greedy(builtin.base_url, NAME) != expected, "training must change the greedy output"

    sync = BuiltinSync(builtin.url, model_name=NAME, folder=tmp_path, api_key=API_KEY)
    try:
        first = sync.push(model)
        assert isinstance(first, SyncResult) and first.model_name == NAME and first.bytes > 0
        assert all_greedy(builtin.base_url, NAME) == expected
        _, reported = server_greedy(builtin.base_url, NAME, PROMPTS[0])
        assert reported == first.version == sync.version

        train_a_little(model, seed=1)  # the next optimiser steps, the next sync
        second = sync.push(model)
        assert second.version == first.version + 1
        assert all_greedy(builtin.base_url, NAME) == [hf_greedy(model, prompt) for prompt in PROMPTS]
        assert server_greedy(builtin.base_url, NAME, PROMPTS[1])[1] == second.version
        assert sync.push(model, version=40).version == 40
        assert server_greedy(builtin.base_url, NAME, PROMPTS[1])[1] == 40
    finally:
        sync.push(load_model(tiny_model), version=0)  # later tests want the original weights
    assert all_greedy(builtin.base_url, NAME) != expected


# -- real vLLM (CPU build) ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_server(tiny_model: str) -> Iterator[Any]:
    """Real vLLM, for this module (its weights change here)."""
    from agentgym.serve.vllm import INSTALL_HINT, VLLMServer, vllm_python

    python = vllm_python()
    if python is None:
        pytest.skip(f"no Python that can import vllm: {INSTALL_HINT}")
    with VLLMServer(tiny_model, python=python, served_model_name=NAME, max_model_len=512) as server:
        yield server


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_generates_what_the_trainer_model_does_after_a_sync(
    vllm_server: Any, tiny_model: str, tmp_path: Path
) -> None:
    model = train_a_little(load_model(tiny_model))
    expected = [hf_greedy(model, prompt) for prompt in PROMPTS]
    before = all_greedy(vllm_server.base_url, NAME)
    assert before != expected, "training must change the greedy output"

    sync = VLLMSync(vllm_server.url, model_name=NAME, folder=tmp_path)
    try:
        result = sync.push(model)
        assert result.version == 1 and result.model_name == NAME
        assert all_greedy(vllm_server.base_url, NAME) == expected
        assert served_weight_version(vllm_server.url) == "1"
    finally:
        sync.push(load_model(tiny_model), version=0)  # later tests want the original weights
    assert served_weight_version(vllm_server.url) == "0"
    assert all_greedy(vllm_server.base_url, NAME) == before


