"""The server hands freed memory back (issue 38 item 7): ``release_free_memory``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentgym.allocator import find_tcmalloc
from agentgym.serve.memory import release_free_memory

_PROBE = """
import gc
from pathlib import Path
from agentgym.serve.memory import release_free_memory

def rss_mib():
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS:"))
    return int(line.split()[1]) // 1024

chunks = [bytearray(1 << 20) for _ in range(300)]  # 300 MiB in 1 MiB blocks, touched
del chunks
gc.collect()
kept = rss_mib()
print(release_free_memory(), kept, rss_mib())
"""


def test_release_names_the_allocator_it_asked() -> None:
    assert release_free_memory() in ("glibc", "tcmalloc")


def test_tcmalloc_gives_freed_memory_back_when_asked() -> None:
    library = find_tcmalloc()
    if library is None:
        pytest.skip("no tcmalloc on this machine (apt-get install libtcmalloc-minimal4)")
    env = {**os.environ, "LD_PRELOAD": library}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    allocator, kept, released = out[0], int(out[1]), int(out[2])
    assert allocator == "tcmalloc"
    assert kept - released >= 200, (kept, released)  # most of the 300 MiB went back
