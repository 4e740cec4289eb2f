"""Weight sync: make a running server sample from the trainer's current weights.

After each training step that changed the weights the run loop pushes them to the server the
rollouts talk to. One protocol, :class:`WeightSync`, two ways (``server.engine`` chooses):

==================  ==========================================================  ===============
class               how                                                         server
==================  ==========================================================  ===============
``BuiltinSync``     safetensors to a folder, ``POST /update_weights``            ``agentgym serve``
``VLLMSync``        safetensors to a folder, ``POST /collective_rpc``            vLLM (dev mode)
                    ``reload_weights``, ``/reset_prefix_cache``,
                    ``/update_weight_version``
==================  ==========================================================  ===============

Both need the server to read the trainer's disk (same machine or a shared file system): the
folder is the run's ``sync/``. A LoRA run pushes its merged full weights the same way. (Runtime
LoRA loading and vLLM's NCCL weight transfer were written once and never reached by a run; they
went, to come back with a test that runs them.)

Every push sets the version: the built-in server reports it as ``policy_version`` on each
response, vLLM at ``GET /weight_info``::

    sync = BuiltinSync(server.url)
    result = sync.push(model, version=3)      # after a training step

``push`` takes a module or a state dict (an FSDP trainer passes the full,
gathered one) and writes every tensor under its name, tied ones included
(see :func:`save_weights` for why vLLM needs that).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from agentgym.errors import ConfigError
from agentgym.serve.vllm import request_json, reload_weights

__all__ = [
    "BuiltinSync",
    "SYNC_METHODS",
    "SyncResult",
    "VLLMSync",
    "WeightSync",
    "Weights",
    "make_weight_sync",
    "save_weights",
    "served_weight_version",
]

#: The ``method`` names :func:`make_weight_sync` understands.
SYNC_METHODS = ("builtin", "vllm")
_WEIGHTS_FILE = "model.safetensors"

Weights = torch.nn.Module | Mapping[str, torch.Tensor]
"""What ``push`` takes: a module, or a (full) state dict."""


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What one push did."""

    version: int
    """The policy version the server now serves."""
    model_name: str
    """The name requests must use from now on (a new one per version with LoRA)."""
    seconds: float
    """Wall time of the whole push: writing, sending, loading."""
    bytes: int
    """Size of what was written or sent."""


@runtime_checkable
class WeightSync(Protocol):
    """Pushes a trainer's weights to a running server."""

    @property
    def version(self) -> int:
        """The version of the last push (0 before the first)."""
        ...

    @property
    def model_name(self) -> str:
        """The name requests must use now."""
        ...

    def push(self, weights: Weights, *, version: int | None = None) -> SyncResult:
        """Make the server serve ``weights``, as ``version`` (default: the last + 1)."""
        ...

    def close(self) -> None:
        """Free what the sync holds (scratch folders, communicators)."""
        ...


# -- writing weights ---------------------------------------------------------------------


def _full_state(weights: Weights) -> dict[str, torch.Tensor]:
    if isinstance(weights, torch.nn.Module):
        if hasattr(weights, "peft_config"):
            raise ConfigError(
                "This model carries a LoRA adapter: merge it first (model.merge_and_unload(), or the "
                "engine's full_weights()) to push full weights.")
        return dict(weights.state_dict())
    if not isinstance(weights, Mapping):
        raise ConfigError(f"push() takes a torch module or a state dict, got {type(weights).__name__}.")
    return dict(weights)


def save_weights(weights: Weights, folder: str | Path) -> int:
    """Write ``weights`` as ``folder/model.safetensors``; returns its size in bytes.

    Every name is written, tied ones too (``lm_head.weight`` beside the
    embeddings, as a copy): vLLM 0.32's in-place reload re-creates the
    embedding's storage and leaves a tied LM head on the old values unless the
    file names it. The file is written beside and renamed, so a reader never
    sees half of it.
    """
    from safetensors.torch import save_file

    seen: set[tuple[int, int]] = set()
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in _full_state(weights).items():
        if not isinstance(tensor, torch.Tensor):
            raise ConfigError(f"state dict entry {name!r} is a {type(tensor).__name__}, not a tensor.")
        tensor = tensor.detach().to("cpu").contiguous()
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        # safetensors refuses two names on one storage: the second gets a copy.
        tensors[name] = tensor.clone() if key in seen else tensor
        seen.add(key)
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    staging = target / f".{_WEIGHTS_FILE}.partial"
    save_file(tensors, str(staging), metadata={"format": "pt"})
    staging.replace(target / _WEIGHTS_FILE)
    return (target / _WEIGHTS_FILE).stat().st_size


class _Scratch:
    """A folder for weights: the caller's, or a temporary one removed by close()."""

    def __init__(self, folder: str | Path | None, prefix: str) -> None:
        self.owned = folder is None
        self.path = Path(tempfile.mkdtemp(prefix=prefix)) if folder is None else Path(folder).resolve()
        self.path.mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        if self.owned:
            shutil.rmtree(self.path, ignore_errors=True)


# -- HTTP ----------------------------------------------------------------------------------


def _root(url: str) -> str:
    """The server's root URL (a trailing ``/v1`` or ``/`` dropped)."""
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"the server URL must start with http:// or https://, got {url!r}.")
    return url.rstrip("/").removesuffix("/v1")


def _check_version(version: int | None, last: int) -> int:
    if version is None:
        return last + 1
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ConfigError(f"version must be a whole number >= 0, got {version!r}.")
    return version


class _Sync:
    """What every sync shares: the server, the name requests use, and the version pushed last."""

    def __init__(self, url: str, *, model_name: str, timeout: float) -> None:
        self.url = _root(url)
        self._model_name = model_name
        self.timeout = timeout
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    @property
    def model_name(self) -> str:
        return self._model_name


class _FolderSync(_Sync):
    """A sync that hands the server a folder: where it writes, and the key it sends."""

    _prefix = "agentgym-sync-"

    def __init__(self, url: str, *, model_name: str = "", folder: str | Path | None = None,
                 api_key: str | None = None, timeout: float = 300.0) -> None:
        super().__init__(url, model_name=model_name, timeout=timeout)
        self._scratch = _Scratch(folder, self._prefix)
        self.api_key = api_key

    def close(self) -> None:
        self._scratch.close()


# -- the built-in server ---------------------------------------------------------------------


class BuiltinSync(_FolderSync):
    """Full weights to ``agentgym serve`` through ``POST /update_weights``.

    Responses generated after the push report ``policy_version`` = the new version.
    """

    def push(self, weights: Weights, *, version: int | None = None) -> SyncResult:
        started = time.perf_counter()
        wanted = _check_version(version, self._version)
        size = save_weights(weights, self._scratch.path)
        answer = request_json(
            f"{self.url}/update_weights",
            {"weights_path": str(self._scratch.path / _WEIGHTS_FILE), "version": wanted},
            timeout=self.timeout, api_key=self.api_key,
            hint=" Is this agentgym's built-in server, with the trainer's architecture?")
        self._version = int(answer["policy_version"]) if isinstance(answer, dict) else wanted
        return SyncResult(self._version, self._model_name, time.perf_counter() - started, size)


# -- vLLM: full weights from a folder ----------------------------------------------------------


class VLLMSync(_FolderSync):
    """Full weights to vLLM: ``reload_weights`` from a safetensors folder, then the version.

    vLLM must run in dev mode (``VLLMServer`` and ``agentgym serve --engine vllm``
    start it so) on a machine that can read ``folder``. After the reload the
    prefix cache is reset and ``/update_weight_version`` records the version,
    which ``GET /weight_info`` reports.
    """

    def push(self, weights: Weights, *, version: int | None = None) -> SyncResult:
        started = time.perf_counter()
        wanted = _check_version(version, self._version)
        size = save_weights(weights, self._scratch.path)
        reload_weights(self.url, self._scratch.path, timeout=self.timeout, api_key=self.api_key)
        request_json(f"{self.url}/update_weight_version", {"new_version": str(wanted)},
                      timeout=self.timeout, api_key=self.api_key,
                      hint=" vLLM 0.32 or newer in dev mode (VLLM_SERVER_DEV_MODE=1) has this route.")
        self._version = wanted
        return SyncResult(wanted, self._model_name, time.perf_counter() - started, size)


def served_weight_version(url: str, *, api_key: str | None = None, timeout: float = 30.0) -> str | None:
    """The weight version a vLLM server reports (``GET /weight_info``)."""
    answer = request_json(f"{_root(url)}/weight_info", method="GET", timeout=timeout, api_key=api_key,
                           hint=" vLLM 0.32 or newer in dev mode has this route.")
    return answer.get("weight_version") if isinstance(answer, dict) else None


# -- choosing one ------------------------------------------------------------------------------


def make_weight_sync(method: str, url: str, *, model_name: str = "", api_key: str | None = None,
                     folder: str | Path | None = None, timeout: float = 300.0) -> WeightSync:
    """The sync for ``method`` (one of :data:`SYNC_METHODS`) to the server at ``url``.

    ``builtin``: agentgym's server; ``vllm``: vLLM, full weights from a folder.
    """
    if method == "builtin":
        return BuiltinSync(url, model_name=model_name, folder=folder, api_key=api_key, timeout=timeout)
    if method == "vllm":
        return VLLMSync(url, model_name=model_name, folder=folder, api_key=api_key, timeout=timeout)
    raise ConfigError(f"Unknown weight sync method {method!r}; use one of {', '.join(SYNC_METHODS)}.")
