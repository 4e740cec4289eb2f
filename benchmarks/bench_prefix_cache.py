"""What the built-in server's prefix cache saves on multi-turn episodes: ``agentgym rollout``
against it with the cache off and on.

    python benchmarks/bench_prefix_cache.py                       # 64 episodes of 12 and 30 turns
    python benchmarks/bench_prefix_cache.py --model tiny-128x4 --episodes 64 --turns 12

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
(``GET /stats``).
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

from agentgym.models import resolve_model
from agentgym.serve.launch import BuiltinServer

console = Console(highlight=False)
AGENTGYM = str(Path(sys.executable).with_name("agentgym"))


def _stats(server: BuiltinServer) -> dict[str, int]:
    with urllib.request.urlopen(f"{server.url}/stats", timeout=10) as response:  # loopback only
        return dict(json.load(response))


def measure(model: str, cache_mib: int, turns: int, args: argparse.Namespace) -> list[str]:
    """One row: a rollout of ``args.episodes`` episodes of ``turns`` turns."""
    with BuiltinServer(model, prefix_cache_mib=cache_mib) as server:
        command = [AGENTGYM, "rollout", "--env", "Sokoban-LLM-v0", "-k", "brief=true",
                   "-k", "show_positions=true", "--base-url", server.base_url, "--model", model,
                   "--episodes", str(args.episodes), "--max-turns", str(turns),
                   "--max-tokens", str(args.max_tokens), "--temperature", "1", "--seed", "0"]
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        stats = _stats(server)
    prompt, cached = stats["prompt_tokens"], stats["cached_prompt_tokens"]
    return [str(turns), "on" if cache_mib else "off", str(stats["requests"]), f"{wall:.1f}",
            f"{stats['requests'] / wall:.1f}", f"{prompt:,}", f"{cached:,} ({cached / prompt:.0%})"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-128x4", help="model folder, hub id or tiny name")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--turns", type=int, nargs="+", default=[12, 30])
    parser.add_argument("--max-tokens", type=int, default=8)
    args = parser.parse_args()
    model = resolve_model(args.model)
    table = Table(title=f"bench_prefix_cache: {platform.machine()}, {os.cpu_count()} cores, "
                        f"{args.model}, {args.episodes} episodes")
    for name in ("turns", "prefix cache", "requests", "wall s", "turns/s", "prompt tokens",
                 "from the cache"):
        table.add_column(name, justify="right")
    for turns in args.turns:
        for cache_mib in (0, 1024):
            table.add_row(*measure(model, cache_mib, turns, args))
            console.print(f"  done: {turns} turns, cache {'on' if cache_mib else 'off'}")
    console.print(table)


if __name__ == "__main__":
    main()
