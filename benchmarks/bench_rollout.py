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
"Bare request" is the CPU of the least a turn can cost: one aiohttp POST of the same
kind of body (a prompt of token ids, orjson) to the same stub, its JSON read, as many
requests as the manager made turns, at the same concurrency, in the same run; "x bare"
is the manager's CPU per turn over it.
Targets (issue 3): at least 90% of ideal, under 1 ms CPU per turn; (issue 40) within 2x
of a bare request.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import time

import aiohttp
import orjson

from stub_rollout import move_stub, tiny_renderer, warm_then_time

from agentgym.rollout.chat import ChatRenderer


async def bare_requests(base_url: str, requests: int, concurrency: int, prompt_tokens: int = 200) -> None:
    """``requests`` plain completion requests, ``concurrency`` at a time: what any client pays."""
    body = orjson.dumps({"model": "stub", "prompt": list(range(prompt_tokens)), "max_tokens": 16,
                         "return_token_ids": True, "logprobs": 1})
    limit = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def one() -> None:
            async with limit, session.post(f"{base_url}/completions", data=body,
                                           headers={"Content-Type": "application/json"}) as reply:
                orjson.loads(await reply.read())
        await asyncio.gather(*(one() for _ in range(requests)))


def bare_cpu_per_request(base_url: str, requests: int, concurrency: int) -> float:
    """This process's CPU seconds per bare request (after a short untimed warm-up)."""
    asyncio.run(bare_requests(base_url, 8, 4))
    cpu = time.process_time()
    asyncio.run(bare_requests(base_url, requests, concurrency))
    return (time.process_time() - cpu) / requests


def measure(renderer: ChatRenderer, args: argparse.Namespace, delay: float) -> str:
    """One table row: the manager against a stub that answers after ``delay`` seconds."""
    with move_stub(renderer, delay) as stub:
        turns, _, wall, cpu = warm_then_time([stub.base_url], renderer, args,
                                             before=gc.freeze if args.freeze_gc else None)
        bare_ms = bare_cpu_per_request(stub.base_url, turns, args.concurrency) * 1000
    ideal = args.concurrency / delay
    cpu_ms = cpu / turns * 1000
    return (f"| {delay * 1000:g} | {args.episodes} | {turns} | {wall:.1f} | {turns / wall:,.0f} | "
            f"{ideal:,.0f} | {turns / wall / ideal:.0%} | {cpu_ms:.2f} | {1000 / cpu_ms:,.0f} | "
            f"{bare_ms:.3f} | {cpu_ms / bare_ms:.1f} |")


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
          "| CPU ms per turn | 1-core ceiling turns/s | bare request CPU ms | x bare |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
