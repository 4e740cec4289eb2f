"""Handing freed memory back to the operating system.

Neither allocator a server runs on returns freed memory by itself soon:
tcmalloc keeps it in its page heap for reuse, and glibc keeps what it freed
below the top of each arena (and raises its mmap threshold after a large
free, so later large tensors land in arenas too). After the engine drops a
lot at once (a prefix-cache reset, new weights) the RSS would stay at its
high-water mark; ``release_free_memory`` asks the allocator in this process to
give the free pages back.
"""

from __future__ import annotations

import ctypes
import gc

__all__ = ["release_free_memory"]


def release_free_memory() -> str:
    """Collect garbage, then ask the allocator to return free pages: which allocator did it."""
    gc.collect()
    process = ctypes.CDLL(None)  # the symbols of this process, preloaded libraries included
    release = getattr(process, "MallocExtension_ReleaseFreeMemory", None)  # tcmalloc's C API
    if release is not None:
        release.restype = None
        release()
        return "tcmalloc"
    trim = getattr(process, "malloc_trim", None)  # glibc
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim(0)
        return "glibc"
    return "none"
