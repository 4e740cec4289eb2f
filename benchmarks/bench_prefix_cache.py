"""What the built-in server's prefix cache saves on multi-turn episodes: ``agentgym rollout``
against it with the cache off and on.

    python benchmarks/bench_prefix_cache.py                       # 64 episodes of 12 and 30 turns
    python benchmarks/bench_prefix_cache.py --model tiny-128x4 --episodes 64 --turns 12
    python benchmarks/bench_prefix_cache.py --turns 12 --allocators system auto   # glibc against tcmalloc

Each row runs the real command a user runs (``agentgym rollout --env
Sokoban-LLM-v0 --base-url ...``, its own process) against a built-in server
(``BuiltinServer``, its own process, default threads) started for that row,
with ``--prefix-cache-mib 0`` (off) or the default (on). The model is a
from-scratch tiny model with random weights: its answers are unreadable, so
the env answers each with an error and every episode plays all its turns,
each prompt the whole conversation so far, as a failing episode does in an
eval. Answers are capped at ``--max-tokens`` (8: a trained model's Sokoban
turn is about 8 tokens). "wall s" is the rollout command's whole run, start-up
included; "prompt tokens" and "from the cache" are the server's counters
(``GET /stats``). ``--allocators`` sets ``AGENTGYM_ALLOCATOR`` for a row's server and
command (``auto``: tcmalloc where installed, ``system``: glibc's malloc; see
``agentgym.allocator``); "server CPU s" is the server process's user + system time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agentgym.allocator import ALLOCATOR_ENV, preloaded_allocator
from agentgym.models import resolve_model
from agentgym.serve.launch import BuiltinServer

console = Console(highlight=False)
AGENTGYM = str(Path(sys.executable).with_name("agentgym"))


def _stats(server: BuiltinServer) -> dict[str, int]:
    request = urllib.request.Request(f"{server.url}/stats",
                                     headers={"Authorization": f"Bearer {server.api_key}"})
    with urllib.request.urlopen(request, timeout=10) as response:  # loopback only
        return dict(json.load(response))


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """A process's user and system CPU seconds so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def measure(model: str, cache_mib: int, turns: int, allocator: str, args: argparse.Namespace) -> list[str]:
    """One row: a rollout of ``args.episodes`` episodes of ``turns`` turns."""
    os.environ[ALLOCATOR_ENV] = allocator  # the server's child and the rollout command inherit it
    with BuiltinServer(model, prefix_cache_mib=cache_mib) as server:
        assert server.process is not None
        malloc = preloaded_allocator(server.process.pid)
        user_before, system_before = _cpu_seconds(server.process.pid)
        command = [AGENTGYM, "rollout", "--env", "Sokoban-LLM-v0", "-k", "brief=true",
                   "-k", "show_positions=true", "--base-url", server.base_url,
                   "--api-key", server.api_key, "--model", model,
                   "--episodes", str(args.episodes), "--max-turns", str(turns),
                   "--max-tokens", str(args.max_tokens), "--temperature", "1", "--seed", "0",
                   "--concurrency", str(args.concurrency)]
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        stats = _stats(server)
        user, system = _cpu_seconds(server.process.pid)
    prompt, cached = stats["prompt_tokens"], stats["cached_prompt_tokens"]
    cpu = f"{user - user_before:.1f} + {system - system_before:.1f}"
    return [str(turns), "on" if cache_mib else "off", malloc, str(stats["requests"]), f"{wall:.1f}", cpu,
            f"{stats['requests'] / wall:.1f}", f"{prompt:,}", f"{cached:,} ({cached / prompt:.0%})"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-128x4", help="model folder, hub id or tiny name")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--turns", type=int, nargs="+", default=[12, 30])
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=32, help="episodes played at once (a GRPO step: 64)")
    parser.add_argument("--allocators", nargs="+", default=["auto"], choices=["auto", "system"],
                        help="AGENTGYM_ALLOCATOR of each row's processes")
    parser.add_argument("--caches", nargs="+", type=int, default=[0, 1024],
                        help="--prefix-cache-mib of each row's server (0: off)")
    args = parser.parse_args()
    model = resolve_model(args.model)
    table = Table(title=f"bench_prefix_cache: {platform.machine()}, {os.cpu_count()} cores, "
                        f"{args.model}, {args.episodes} episodes, {args.concurrency} at once")
    for name in ("turns", "prefix cache", "server's malloc", "requests", "wall s", "server CPU s (user + system)",
                 "turns/s", "prompt tokens", "from the cache"):
        table.add_column(name, justify="right")
    for turns in args.turns:
        for cache_mib in args.caches:
            for allocator in args.allocators:
                table.add_row(*measure(model, cache_mib, turns, allocator, args))
                console.print(f"  done: {turns} turns, cache {'on' if cache_mib else 'off'}, {allocator}")
    console.print(table)


if __name__ == "__main__":
    main()
