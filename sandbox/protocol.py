"""The host's side of the runner protocol: requests out, replies back as :class:`ExecResult`.

Every backend speaks to the same runner (``runner.py``, started with
:func:`runner_command`): length-prefixed JSON both ways. This module checks the
caller's arguments (a wrong language or a file path that leaves the work dir is
the caller's mistake: :class:`ConfigError`), frames the messages and reads the
reply. A reply the runner marks as an error is the sandbox's own failure
(:class:`SandboxError`); whatever the code did is in the ``ExecResult``.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import posixpath
import struct
from collections.abc import Mapping
from importlib import resources
from typing import Any

from agentgym.errors import ConfigError, SandboxError
from agentgym.sandbox.base import LANGUAGES, ExecResult, Limits

__all__ = ["CODE_FILES", "FrameReader", "build_request", "encode", "runner_command",
           "runner_source", "sandbox_env", "to_result", "valid_text"]

_HEADER = struct.Struct(">I")
#: The file each language's code is written to, in the work dir.
CODE_FILES = {"python": "main.py", "bash": "main.sh"}


@functools.cache
def runner_source() -> str:
    """The runner's source text, sent to each interpreter that runs it."""
    return resources.files("agentgym.sandbox").joinpath("runner.py").read_text(encoding="utf-8")


def runner_command(python: str, config: Mapping[str, Any]) -> list[str]:
    """argv that starts the runner under ``python`` with ``config`` (work dir, env, wipe list)."""
    return [python, "-I", "-c", runner_source(), json.dumps(dict(config))]


def sandbox_env(workdir: str) -> dict[str, str]:
    """The whole environment the code sees: nothing is inherited from the host."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}


def encode(message: Mapping[str, Any]) -> bytes:
    """One framed message: 4-byte big-endian length, then the JSON."""
    body = json.dumps(message).encode("utf-8")
    return _HEADER.pack(len(body)) + body


class FrameReader:
    """Turns bytes from the runner, in whatever pieces they come, into messages."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Add ``data``; return every message it completed."""
        self._buffer += data
        messages = []
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            if len(self._buffer) < _HEADER.size + size:
                break
            body = bytes(self._buffer[_HEADER.size:_HEADER.size + size])
            del self._buffer[:_HEADER.size + size]
            messages.append(json.loads(body.decode("utf-8")))
        return messages


def valid_text(text: str) -> str:
    """``text`` as valid Unicode: a surrogate pair becomes its character, a lone surrogate U+FFFD.

    Model output can hold lone surrogates (``"\\ud800"``), which no UTF-8
    encoder takes; every backend passes the code, stdin and file names and
    texts through this before they leave the host, so that such text runs
    (a comment with ``\\ud800`` in it is a comment with U+FFFD in it) instead of
    raising. Control characters and NUL are valid and left as they are.
    """
    if text.isascii():
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _check_files(files: Mapping[str, str | bytes] | None, code_file: str) -> list[list[str]]:
    encoded = []
    for name, content in (files or {}).items():
        normal = posixpath.normpath(name) if isinstance(name, str) else ""
        if (not normal or normal.startswith(("/", "../")) or normal in {".", ".."}
                or "\0" in normal or ".." in normal.replace("\\", "/").split("/")):
            raise ConfigError(f"files: {name!r} is not a relative path inside the work dir; "
                              "use names like 'data/input.txt'.")
        if normal == code_file:
            raise ConfigError(f"files: {name!r} would overwrite the code itself; pass it as `code`.")
        normal = valid_text(normal)
        if isinstance(content, str):
            content = valid_text(content).encode("utf-8")
        if not isinstance(content, (bytes, bytearray)):
            raise ConfigError(f"files[{name!r}] must be str or bytes, got {type(content).__name__}.")
        encoded.append([normal, base64.b64encode(content).decode("ascii")])
    return encoded


def build_request(code: str, *, language: str, stdin: str, files: Mapping[str, str | bytes] | None,
                  timeout: float | None, limits: Limits, rlimit_memory: bool = False,
                  nproc: int | None = None) -> dict[str, Any]:
    """The runner request for one run; ConfigError for arguments the caller got wrong.

    ``rlimit_memory`` caps the address space with RLIMIT_AS (backends without a
    memory cgroup); ``nproc`` is the RLIMIT_NPROC to set, if any.
    """
    if language not in LANGUAGES:
        raise ConfigError(f"language must be one of {', '.join(LANGUAGES)}; got {language!r}.")
    if not isinstance(code, str):
        raise ConfigError(f"code must be a str, got {type(code).__name__}.")
    if not isinstance(stdin, str):
        raise ConfigError(f"stdin must be a str, got {type(stdin).__name__}.")
    if timeout is not None and not (isinstance(timeout, (int, float)) and 0 < timeout < math.inf):
        raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}.")
    wall = float(timeout if timeout is not None else limits.timeout)
    request: dict[str, Any] = {
        "code": valid_text(code), "language": language, "stdin": valid_text(stdin),
        "files": _check_files(files, CODE_FILES[language]),
        "timeout": wall, "cpu_seconds": float(limits.cpu_seconds or wall),
        "output_bytes": limits.output_bytes,
    }
    if rlimit_memory:
        request["memory_bytes"] = limits.memory_mb * 1024 * 1024
        request["fsize_bytes"] = limits.memory_mb * 1024 * 1024
    if nproc is not None:
        request["nproc"] = nproc
    return request


def to_result(reply: Mapping[str, Any]) -> ExecResult:
    """The ExecResult of a runner reply; ConfigError when the request's files cannot be
    written, SandboxError when the runner could not run it."""
    if "error" in reply and reply.get("invalid"):
        raise ConfigError(f"files: {reply['error']}; give each file its own path.")
    if "error" in reply:
        raise SandboxError(f"The sandbox runner refused the request: {reply['error']}")
    return ExecResult(stdout=reply["stdout"], stderr=reply["stderr"], exit_code=reply["exit_code"],
                      timed_out=reply["timed_out"], oom=reply["oom"], duration=reply["duration"],
                      truncated=reply["truncated"])
