"""The memory allocator of agentgym's long-running processes: tcmalloc where this machine has it.

On the CPU, glibc's ``malloc`` hands every large block (the engine's KV buffers are
tens of MiB, and a row joining or leaving the batch makes new ones) fresh ``mmap``
pages and gives them back to the kernel on ``free``, so the kernel zero-fills the
same memory again at every change of the batch. Measured on one CPU core (64 Sokoban
episodes of 12 turns, tiny-128x4, 64 at once, ``benchmarks/bench_prefix_cache.py
--allocators system auto --concurrency 64``): 11.0 of the server's 28.6 CPU seconds
were the kernel's; with tcmalloc, which keeps freed memory for reuse, 1.1 of 19.2, and
the rollout took 26.5 s instead of 36.2 (32 at once: 27.7 s instead of 32.5). PyTorch's own CPU
launcher (``torch.backends.xeon.run_cpu``) preloads it for the same reason. Training
gains less (15 SFT steps of tiny-128x4 on one core: 191 s against 229 s). jemalloc,
with its default settings, was no faster than glibc there, so it is not picked.

A library can only be preloaded into a process before it starts: ``BuiltinServer``
starts its child with it, and the ``agentgym`` command's long-running subcommands
(``train``, ``serve``, ``rollout``, ``eval``) start again under it
(:func:`restart_with_allocator`, the same process id, arguments and environment).

``AGENTGYM_ALLOCATOR`` chooses: ``auto`` (the default: tcmalloc when the dynamic
linker can find it, glibc otherwise), ``system`` (glibc), or the path of a malloc
library to preload. Debian and Ubuntu ship tcmalloc as ``libtcmalloc-minimal4``.
A ``LD_PRELOAD`` that already names a malloc library is left as it is.
"""

from __future__ import annotations

import ctypes.util
import functools
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from agentgym.errors import ConfigError

__all__ = ["ALLOCATOR_ENV", "LONG_COMMANDS", "allocator_env", "find_tcmalloc", "preloaded_allocator",
           "restart_with_allocator"]

#: The environment variable that chooses the allocator of the server and of the long commands.
ALLOCATOR_ENV = "AGENTGYM_ALLOCATOR"
_LIBRARIES = ("tcmalloc_minimal", "tcmalloc")  # the minimal one first: no heap profiler in it
_MALLOC_NAMES = ("tcmalloc", "jemalloc", "mimalloc")
#: The ``agentgym`` subcommands worth a restart under a faster allocator (the rest end in a second).
LONG_COMMANDS = frozenset({"train", "serve", "rollout", "eval"})


@functools.cache  # find_library runs ldconfig
def find_tcmalloc() -> str | None:
    """The file name of tcmalloc as the dynamic linker finds it (``libtcmalloc_minimal.so.4``), or None."""
    if not sys.platform.startswith("linux"):
        return None
    for name in _LIBRARIES:
        found = ctypes.util.find_library(name)
        if found:
            return found
    return None


def allocator_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for a new process (a server, a restarted command), with the allocator that
    ``AGENTGYM_ALLOCATOR`` asks for preloaded."""
    env = dict(environ)
    choice = env.get(ALLOCATOR_ENV, "auto").strip() or "auto"
    preload = env.get("LD_PRELOAD", "")
    if choice == "system" or any(name in preload for name in _MALLOC_NAMES):
        return env
    if choice == "auto":
        library = find_tcmalloc()
        if library is None:
            return env
    elif Path(choice).is_file():
        library = choice
    else:
        raise ConfigError(f"{ALLOCATOR_ENV}={choice!r} is not auto, system or an existing library file. "
                          "Unset it (auto: tcmalloc where installed), set it to system for glibc's malloc, "
                          "or give the path of a malloc library such as libtcmalloc_minimal.so.4.")
    env["LD_PRELOAD"] = f"{library} {preload}".strip()
    return env


def preloaded_allocator(pid: int | None = None) -> str:
    """Which malloc library process ``pid`` (this one by default) has mapped: its file name, or ``system``."""
    maps = Path(f"/proc/{pid or os.getpid()}/maps")
    try:
        text = maps.read_text()
    except OSError:
        return "system"
    for line in text.splitlines():
        path = line.rsplit(" ", 1)[-1]
        if any(name in Path(path).name for name in _MALLOC_NAMES):
            return Path(path).name
    return "system"


def restart_with_allocator(argv: list[str]) -> None:
    """Replace this process with itself under the allocator ``allocator_env`` picks, when that
    adds one (returns otherwise): for the ``agentgym`` command, before it imports anything heavy.

    ``os.execve`` keeps the process id, so a launcher (``torchrun``, a shell's job control)
    sees nothing. The restarted process finds the library in ``LD_PRELOAD`` and goes on.
    """
    if len(argv) < 2 or argv[1] not in LONG_COMMANDS:
        return
    env = allocator_env(os.environ)
    if env.get("LD_PRELOAD", "") == os.environ.get("LD_PRELOAD", ""):
        return  # nothing to add: system chosen, one already preloaded, or none installed
    program = Path(argv[0])
    if program.suffix != ".py" and os.access(program, os.X_OK):
        os.execve(program, argv, env)  # the installed ``agentgym`` script
    os.execve(sys.executable, [sys.executable, "-m", "agentgym", *argv[1:]], env)  # python -m agentgym
