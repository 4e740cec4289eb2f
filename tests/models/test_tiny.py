from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.models import TinySpec, build_tiny_model, check_model_name, resolve_model, tiny_spec


@pytest.mark.parametrize(
    ("name", "spec"),
    [("tiny", TinySpec()), ("tiny-256x4", TinySpec(hidden_size=256, num_layers=4)),
     ("Qwen/Qwen3-0.6B", None), ("/models/mine", None), ("tinyllama", None)],
)
def test_tiny_names(name: str, spec: TinySpec | None) -> None:
    assert tiny_spec(name) == spec


@pytest.mark.parametrize("name", ["tiny-100x2", "tiny-128x0", "tiny-8192x2"])
def test_bad_tiny_sizes_are_explained(name: str) -> None:
    with pytest.raises(ConfigError, match="multiple of 64"):
        tiny_spec(name)


def test_other_names_pass_through_unchanged() -> None:
    assert resolve_model("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"


def test_tiny_model_is_a_llama_with_64_wide_heads(tiny_model: str) -> None:
    config = json.loads((Path(tiny_model) / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["head_dim"] == 64 and config["hidden_size"] == 128
    assert config["num_hidden_layers"] == 2 and config["vocab_size"] == 1024


def test_the_cache_is_reused(tiny_model: str) -> None:
    weights = Path(tiny_model) / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert resolve_model("tiny") == tiny_model
    assert weights.stat().st_mtime_ns == before


def test_tokenizer_round_trips_game_text_and_renders_chatml(tiny_model: str) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    text = "Level:\n######\n#P_X_O#\n<answer>Up || Left</answer> 中文 😀"
    assert tokenizer.decode(tokenizer.encode(text)) == text
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Play."}, {"role": "user", "content": "Go"}],
        add_generation_prompt=True, tokenize=False,
    )
    assert rendered == "<|im_start|>system\nPlay.<|im_end|>\n<|im_start|>user\nGo<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token == "<|im_end|>"
    assert len(tokenizer.encode("<answer>Up</answer>")) <= 8  # 19 bytes: BPE learned game text


def test_the_model_generates_and_stops_on_im_end(tiny_model: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert model.generation_config.eos_token_id == model.config.eos_token_id
    output = model.generate(torch.tensor([[1, 85, 91]]), max_new_tokens=5, do_sample=False)
    assert output.shape == (1, 8)


def test_a_different_seed_gives_different_weights(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                  request: pytest.FixtureRequest) -> None:
    from safetensors.torch import load_file
    from transformers.utils import logging

    # `agentgym train` turns transformers' bars off for its process: on here, as in a fresh `agentgym rollout`.
    was_on = logging.is_progress_bar_enabled()
    logging.enable_progress_bar()
    request.addfinalizer(logging.enable_progress_bar if was_on else logging.disable_progress_bar)
    first = build_tiny_model(tmp_path / "a", TinySpec(hidden_size=64, num_layers=1, seed=0))
    second = build_tiny_model(tmp_path / "b", TinySpec(hidden_size=64, num_layers=1, seed=1))
    name = "model.embed_tokens.weight"
    assert not load_file(first / "model.safetensors")[name].equal(load_file(second / "model.safetensors")[name])
    assert not list(tmp_path.glob(".building-*"))
    # Built silently (no "Writing model shards" bar inside a command's output), the bars left on.
    assert capfd.readouterr() == ("", "") and logging.is_progress_bar_enabled()


def test_a_model_name_is_checked_without_building_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    check_model_name("tiny-128x2")
    check_model_name("Qwen/Qwen2.5-0.5B-Instruct")  # a hub id: left to transformers
    with pytest.raises(ConfigError, match=r"^-s teacher '\./gone' does not exist\."):
        check_model_name("./gone", option="-s teacher")
    with pytest.raises(ConfigError, match="multiple of 64"):
        check_model_name("tiny-100x2")
    assert list(tmp_path.iterdir()) == []  # nothing built


def test_an_empty_cache_variable_means_the_default_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from agentgym.models.tiny import cache_root

    monkeypatch.setenv("AGENTGYM_CACHE", "")
    assert cache_root() == Path.home() / ".cache" / "agentgym"
    monkeypatch.setenv("AGENTGYM_CACHE", "/tmp/somewhere")
    assert cache_root() == Path("/tmp/somewhere")


def test_a_grid_row_is_one_token_per_cell(tiny_model: str) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    row = "#_PX√O#"
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode(row))[:3] == ["#", "_", "P"]
    assert len(tokenizer.encode(row)) == len(row)  # √ is two bytes, one token
    assert len(tokenizer.encode("##########")) == 10
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode(" Left"))[0] == "ĠLeft"  # words still merge


def test_a_model_path_that_holds_no_model_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--model '/nonexistent/model' does not exist\. Give a folder"):
        resolve_model("/nonexistent/model")
    with pytest.raises(ConfigError, match=r"does not exist"):
        resolve_model(str(tmp_path / "missing" / "final"))
    assert resolve_model("org/name") == "org/name"  # a hub id: left to transformers
