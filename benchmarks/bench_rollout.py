"""How close the env manager gets to the ideal rollout rate, and its CPU cost per turn.

Run:  .venv/bin/python benchmarks/bench_rollout.py [--episodes 1000] [--turns 10] [--concurrency 256]
                                                   [--delay 0.05 0.5]

A stub OpenAI server (its own process) answers every completion after a fixed
delay with canned token ids; nothing else limits the rate, so the ideal is
concurrency / delay turns per second. The manager plays Sokoban through its
real token path (``OpenAIPolicy.complete_ids``: aiohttp, orjson) with the tiny
model's tokenizer (the env replies are rendered into ids as in a real run), every episode exactly ``--turns`` turns
(the canned move is one the env rejects, so no episode ends early).
"CPU per turn" is this process's CPU time (user + system) over all turns,
after a short warm-up run (imports, template compilation) that is not counted.
"1-core ceiling" is 1 / (CPU per turn): the most turns/s one event loop can
drive at that cost. Where the ideal is above it (50 ms at concurrency 256 asks
for 5,120 turns/s, five cores' worth at 1 ms a turn), the manager is CPU-bound
and only more processes (Ray actors, issue 7) get closer; the slower delays
show how near the ideal it comes when the CPU is not the limit.
Targets (issue 3): at least 90% of ideal, under 1 ms CPU per turn.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform

from stub_rollout import move_stub, tiny_renderer, warm_then_time

from agentgym.rollout.chat import ChatRenderer


def measure(renderer: ChatRenderer, args: argparse.Namespace, delay: float) -> str:
    """One table row: the manager against a stub that answers after ``delay`` seconds."""
    with move_stub(renderer, delay) as stub:
        turns, _, wall, cpu = warm_then_time([stub.base_url], renderer, args,
                                             before=gc.freeze if args.freeze_gc else None)
    ideal = args.concurrency / delay
    cpu_ms = cpu / turns * 1000
    return (f"| {delay * 1000:g} | {args.episodes} | {turns} | {wall:.1f} | {turns / wall:,.0f} | "
            f"{ideal:,.0f} | {turns / wall / ideal:.0%} | {cpu_ms:.2f} | {1000 / cpu_ms:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--delay", type=float, nargs="+", default=[0.05, 0.5],
                        help="stub latencies in seconds, one table row each")
    parser.add_argument("--freeze-gc", action="store_true", help="gc.freeze() the objects of the imports")
    args = parser.parse_args()
    renderer = tiny_renderer()
    rows = [measure(renderer, args, delay) for delay in args.delay]
    print(f"# bench_rollout: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, concurrency {args.concurrency}\n")
    print("| stub delay ms | episodes | turns | wall s | turns/s | ideal turns/s | % of ideal "
          "| CPU ms per turn | 1-core ceiling turns/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
