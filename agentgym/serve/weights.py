"""Loading new weights into a served model, and LoRA adapters merged into copies of it.

Full weights come as safetensors: a folder written by ``save_pretrained``
(one file or shards) or a single ``.safetensors`` file. Every tensor must
name a parameter or buffer of the served model with the same shape; a
parameter may be absent only when it is tied to one that is present (e.g.
``lm_head.weight`` tied to the embeddings, which ``save_pretrained`` omits).
Tensors are copied in place, so tied parameters stay tied.

LoRA adapters (``peft``) are merged into a deep copy of the base model: the
copy costs the model's memory once per adapter, which is fine for the small
models this server is for (use vLLM for large ones), and keeps decoding as
fast as for the base model.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import torch

from agentgym.errors import MissingDependencyError, UnsupportedError, WeightLoadError

__all__ = ["check_weights", "load_weights", "merged_lora_model", "peft_available", "read_safetensors"]

_SHOWN = 5  # names listed in an error message before "..."


def read_safetensors(path: str | Path, *, param: str = "weights_path") -> dict[str, torch.Tensor]:
    """All tensors of a ``.safetensors`` file or of every such file in a folder."""
    from safetensors.torch import load_file

    location = Path(path)
    if location.is_dir():
        files = sorted(location.glob("*.safetensors"))
    elif location.is_file() and location.suffix == ".safetensors":
        files = [location]
    else:
        raise WeightLoadError(
            f"{param} must be a folder of .safetensors files or one .safetensors file; "
            f"{str(location)!r} is neither.", param=param)
    if not files:
        raise WeightLoadError(f"{param}: no .safetensors file in {str(location)!r}.", param=param)
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            tensors.update(load_file(str(file)))
        except (OSError, ValueError) as exc:  # safetensors raises these for unreadable files
            raise WeightLoadError(f"{param}: could not read {str(file)!r}: {exc}", param=param) from exc
    return tensors


def _listed(names: list[str]) -> str:
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def check_weights(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Raise ``WeightLoadError`` unless ``tensors`` can replace ``model``'s weights."""
    state = model.state_dict()
    unknown = sorted(name for name in tensors if name not in state)
    if unknown:
        raise WeightLoadError(
            f"weights_path has tensors the served model lacks: {_listed(unknown)}. "
            "Save the weights of the same architecture (save_pretrained or a full state dict).",
            param="weights_path")
    wrong = sorted(name for name, tensor in tensors.items() if tensor.shape != state[name].shape)
    if wrong:
        detail = ", ".join(f"{n} {tuple(tensors[n].shape)} vs {tuple(state[n].shape)}"
                           for n in wrong[:_SHOWN])
        raise WeightLoadError(f"weights_path has tensors of the wrong shape: {detail}.",
                              param="weights_path")
    given = {state[name].data_ptr() for name in tensors}
    missing = sorted(name for name in state
                     if name not in tensors and state[name].data_ptr() not in given)
    if missing:
        raise WeightLoadError(f"weights_path lacks tensors of the served model: {_listed(missing)}.",
                              param="weights_path")


def load_weights(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> int:
    """Copy ``tensors`` into ``model`` in place; returns how many were copied.

    Checks everything before copying anything, so a bad folder leaves the
    served weights untouched.
    """
    check_weights(model, tensors)
    state = model.state_dict()
    with torch.no_grad():
        for name, tensor in tensors.items():
            state[name].copy_(tensor.to(dtype=state[name].dtype))
    return len(tensors)


def peft_available() -> bool:
    """Whether ``peft`` can be imported (LoRA adapters need it)."""
    return importlib.util.find_spec("peft") is not None


def merged_lora_model(base: torch.nn.Module, lora_path: str) -> torch.nn.Module:
    """A copy of ``base`` with the adapter at ``lora_path`` merged in."""
    if not peft_available():
        raise UnsupportedError(
            "LoRA adapters need the peft package, which is not installed: "
            f"{MissingDependencyError.install_hint('train', 'peft')}.", param="lora_path")
    if not Path(lora_path).is_dir():
        raise WeightLoadError(f"lora_path {lora_path!r} is not a folder.", param="lora_path")
    from peft import PeftModel

    try:
        merged = PeftModel.from_pretrained(copy.deepcopy(base), lora_path).merge_and_unload()
    except (OSError, ValueError, KeyError, RuntimeError) as exc:  # peft's errors for a bad adapter
        raise WeightLoadError(f"could not load the LoRA adapter at {lora_path!r}: {exc}",
                              param="lora_path") from exc
    return merged.eval()
