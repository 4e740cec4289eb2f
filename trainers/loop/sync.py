"""Weight sync: make a running server sample from the trainer's current weights.

After each optimiser step the trainer pushes its weights to the server the
rollouts talk to. One protocol, :class:`WeightSync`, four ways:

==================  ==========================================================  ===============
class               how                                                         server
==================  ==========================================================  ===============
``BuiltinSync``     safetensors to a folder, ``POST /update_weights``            ``agentgym serve``
``VLLMSync``        safetensors to a folder, ``POST /collective_rpc``            vLLM (dev mode)
                    ``reload_weights``, ``/reset_prefix_cache``,
                    ``/update_weight_version``
``LoRASync``        the adapter to a folder, ``POST /v1/load_lora_adapter``      both
                    under a new name per version; older ones unloaded
``VLLMNCCLSync``    NCCL broadcast through vLLM's weight-transfer endpoints      vLLM on GPUs
                    (``/init_weight_transfer_engine``, ``/update_weights``...)   (untested here)
==================  ==========================================================  ===============

The folder ways need the server to read the trainer's disk (same machine or a
shared file system); NCCL needs neither, only GPUs on both sides.

Every push bumps the version: the built-in server reports it as
``policy_version`` on each response, vLLM at ``GET /weight_info``, and a LoRA
sync serves each version under its own name, which requests must then use::

    sync = BuiltinSync(server.url)
    result = sync.push(model)                 # after an optimiser step
    policy.model = result.model_name          # changes only with LoRASync

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
from typing import Any, Protocol, runtime_checkable

import torch

from agentgym.errors import ConfigError, MissingDependencyError
from agentgym.serve.vllm import _request_json, reload_weights

__all__ = [
    "BuiltinSync",
    "LoRASync",
    "SYNC_METHODS",
    "SyncResult",
    "VLLMNCCLSync",
    "VLLMSync",
    "WeightSync",
    "Weights",
    "make_weight_sync",
    "save_weights",
    "served_weight_version",
]

#: The ``method`` names :func:`make_weight_sync` understands.
SYNC_METHODS = ("builtin", "vllm", "lora", "nccl")
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
                "This model carries a LoRA adapter: sync it with LoRASync (method 'lora'), or "
                "merge it first (model.merge_and_unload()) to push full weights.")
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
        answer = _request_json(
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
        _request_json(f"{self.url}/update_weight_version", {"new_version": str(wanted)},
                      timeout=self.timeout, api_key=self.api_key,
                      hint=" vLLM 0.32 or newer in dev mode (VLLM_SERVER_DEV_MODE=1) has this route.")
        self._version = wanted
        return SyncResult(wanted, self._model_name, time.perf_counter() - started, size)


def served_weight_version(url: str, *, api_key: str | None = None, timeout: float = 30.0) -> str | None:
    """The weight version a vLLM server reports (``GET /weight_info``)."""
    answer = _request_json(f"{_root(url)}/weight_info", method="GET", timeout=timeout, api_key=api_key,
                           hint=" vLLM 0.32 or newer in dev mode has this route.")
    return answer.get("weight_version") if isinstance(answer, dict) else None


# -- LoRA adapters -----------------------------------------------------------------------------


class LoRASync(_FolderSync):
    """A peft adapter, served under a new name per version (``<base>-lora-v<N>``).

    Works with vLLM (``--enable-lora``, ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``) and
    with the built-in server. After a push, requests must name
    :attr:`model_name` (``policy.model = result.model_name``); the oldest
    adapters beyond ``keep`` are unloaded and their folders removed, so the
    server holds at most ``keep`` of them.
    """

    _prefix = "agentgym-lora-"

    def __init__(self, url: str, *, model_name: str, folder: str | Path | None = None,
                 api_key: str | None = None, timeout: float = 300.0, keep: int = 1) -> None:
        if not model_name:
            raise ConfigError("LoRASync needs model_name, the served base model's name.")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ConfigError(f"keep must be a whole number >= 1 (adapters left loaded), got {keep!r}.")
        super().__init__(url, model_name=model_name, folder=folder, api_key=api_key, timeout=timeout)
        self.base_name = model_name
        self.keep = keep
        self._loaded: list[tuple[str, Path]] = []

    @property
    def model_name(self) -> str:
        return self._loaded[-1][0] if self._loaded else self.base_name

    def adapter_name(self, version: int) -> str:
        """The name version ``version`` is served under."""
        return f"{self.base_name}-lora-v{version}"

    def push(self, weights: Weights, *, version: int | None = None) -> SyncResult:
        if not hasattr(weights, "peft_config") or not hasattr(weights, "save_pretrained"):
            raise ConfigError("LoRASync pushes a peft model (get_peft_model(...)); for full weights "
                              "use BuiltinSync or VLLMSync.")
        started = time.perf_counter()
        wanted = _check_version(version, self._version)
        name = self.adapter_name(wanted)
        if any(loaded == name for loaded, _ in self._loaded):
            raise ConfigError(f"version {wanted} was pushed already (as {name!r}); versions must be new.")
        folder = self._scratch.path / f"v{wanted}"
        weights.save_pretrained(str(folder))
        size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
        _request_json(f"{self.url}/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(folder)},
                      timeout=self.timeout, api_key=self.api_key,
                      hint=" vLLM needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True.")
        self._loaded.append((name, folder))
        self._version = wanted
        self._unload_old()
        return SyncResult(wanted, name, time.perf_counter() - started, size)

    def _unload_old(self) -> None:
        while len(self._loaded) > self.keep:
            name, folder = self._loaded.pop(0)
            _request_json(f"{self.url}/v1/unload_lora_adapter", {"lora_name": name},
                          timeout=self.timeout, api_key=self.api_key, hint="")
            shutil.rmtree(folder, ignore_errors=True)


# -- vLLM on GPUs: NCCL weight transfer (untested here) ----------------------------------------


class VLLMNCCLSync(_Sync):
    """Full weights broadcast over NCCL through vLLM's weight-transfer endpoints.

    UNTESTED: written against vLLM 0.32's trainer-side API
    (``vllm.distributed.weight_transfer``: ``NCCLTrainerWeightTransferEngine``,
    ``HTTPVLLMWeightSyncClient``, ``ModuleSource``), which needs CUDA on both
    sides; the CI machines have none. vLLM must be started with
    ``--weight-transfer-config '{"backend": "nccl"}'`` in dev mode, and vLLM
    must be importable in the trainer's interpreter. ``world_size`` is 1 (the
    trainer) plus vLLM's workers (tensor x data parallel). The first push opens
    the NCCL group (``/init_weight_transfer_engine``); each push then runs
    ``/start_weight_update``, ``/update_weights`` with the broadcast, and
    ``/finish_weight_update`` carrying the version.
    """

    def __init__(self, url: str, *, model_name: str = "", master_address: str = "127.0.0.1",
                 master_port: int = 29600, world_size: int = 2, rank: int = 0,
                 timeout: float = 300.0) -> None:
        super().__init__(url, model_name=model_name, timeout=timeout)
        self.master_address = master_address
        self.master_port = master_port
        self.world_size = world_size
        self.rank = rank
        self._engine: Any = None
        self._module: torch.nn.Module | None = None

    def push(self, weights: Weights, *, version: int | None = None) -> SyncResult:
        if not isinstance(weights, torch.nn.Module):
            raise ConfigError("VLLMNCCLSync pushes a module (its parameters are broadcast), "
                              "not a state dict.")
        started = time.perf_counter()
        wanted = _check_version(version, self._version)
        if self._engine is None or self._module is not weights:
            self._engine = self._open(weights)
            self._module = weights
        self._engine.send_weights()
        if self.rank == 0:
            _request_json(f"{self.url}/update_weight_version", {"new_version": str(wanted)},
                          timeout=self.timeout, api_key=None, hint="")
        self._version = wanted
        size = sum(p.numel() * p.element_size() for p in weights.parameters())
        return SyncResult(wanted, self._model_name, time.perf_counter() - started, size)

    def _open(self, module: torch.nn.Module) -> Any:
        if not torch.cuda.is_available():
            raise ConfigError("NCCL weight transfer needs CUDA GPUs; on a CPU use VLLMSync "
                              "(method 'vllm'), which reloads weights from a folder.")
        try:
            from vllm.distributed.weight_transfer import HTTPVLLMWeightSyncClient, ModuleSource
            from vllm.distributed.weight_transfer.nccl_engine import (
                NCCLTrainerInitInfo,
                NCCLTrainerWeightTransferEngine,
            )
        except ImportError as exc:
            raise MissingDependencyError(
                f"NCCL weight transfer needs vLLM (0.32 or newer) importable in the trainer's "
                f"interpreter: {MissingDependencyError.install_hint('vllm')} ({exc}).") from exc
        info = NCCLTrainerInitInfo(master_address=self.master_address, master_port=self.master_port,
                                   world_size=self.world_size, rank=self.rank)
        client = HTTPVLLMWeightSyncClient(self.url, timeout=self.timeout)
        return NCCLTrainerWeightTransferEngine.trainer_init(info, client=client,
                                                            source=ModuleSource(module))

    def close(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None


# -- choosing one ------------------------------------------------------------------------------


def make_weight_sync(method: str, url: str, *, model_name: str = "", api_key: str | None = None,
                     folder: str | Path | None = None, timeout: float = 300.0) -> WeightSync:
    """The sync for ``method`` (one of :data:`SYNC_METHODS`) to the server at ``url``.

    ``builtin``: agentgym's server; ``vllm``: vLLM, full weights from a folder;
    ``lora``: a peft adapter (either server); ``nccl``: vLLM on GPUs (see
    :class:`VLLMNCCLSync` for its extra options).
    """
    if method == "builtin":
        return BuiltinSync(url, model_name=model_name, folder=folder, api_key=api_key, timeout=timeout)
    if method == "vllm":
        return VLLMSync(url, model_name=model_name, folder=folder, api_key=api_key, timeout=timeout)
    if method == "lora":
        return LoRASync(url, model_name=model_name, folder=folder, api_key=api_key, timeout=timeout)
    if method == "nccl":
        return VLLMNCCLSync(url, model_name=model_name, timeout=timeout)
    raise ConfigError(f"Unknown weight sync method {method!r}; use one of {', '.join(SYNC_METHODS)}.")
