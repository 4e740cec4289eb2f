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
import asyncio
import gc
import os
import platform
import time

from transformers import AutoTokenizer

from agentgym.models import resolve_model
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policy import OpenAIPolicy
from agentgym.serve.stub import StubServer

_MOVE = "<answer>Wait</answer>"


async def play(base_url: str, renderer: ChatRenderer, args: argparse.Namespace) -> int:
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=args.episodes, concurrency=args.concurrency,
                           max_turns=args.turns, max_context_tokens=32_768)
    async with OpenAIPolicy(base_url, "stub", max_connections=args.concurrency) as policy:
        rows = await EnvManager(config, policy, renderer=renderer).run()
    failed = [row.error for row in rows if row.error]
    if failed:
        raise SystemExit(f"{len(failed)} episodes failed, e.g. {failed[0]}")
    return sum(row.num_turns for row in rows)


def measure(renderer: ChatRenderer, args: argparse.Namespace, delay: float) -> str:
    """One table row: the manager against a stub that answers after ``delay`` seconds."""
    ids = renderer.tokenizer.encode(_MOVE, add_special_tokens=False) + [renderer.eos_id]
    with StubServer(delay=delay, completion_text=_MOVE, completion_ids=ids) as stub:
        # Warm up (imports, template compilation, the thread pool) outside the measurement.
        warm = argparse.Namespace(**{**vars(args), "episodes": 4, "concurrency": 4, "turns": 2})
        asyncio.run(play(stub.base_url, renderer, warm))
        if args.freeze_gc:
            gc.freeze()
        wall, cpu = time.perf_counter(), time.process_time()
        turns = asyncio.run(play(stub.base_url, renderer, args))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
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
    renderer = ChatRenderer(AutoTokenizer.from_pretrained(resolve_model("tiny")))
    rows = [measure(renderer, args, delay) for delay in args.delay]
    print(f"# bench_rollout: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, concurrency {args.concurrency}\n")
    print("| stub delay ms | episodes | turns | wall s | turns/s | ideal turns/s | % of ideal "
          "| CPU ms per turn | 1-core ceiling turns/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
