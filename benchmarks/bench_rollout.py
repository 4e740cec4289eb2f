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
requests as the manager made turns, at the same concurrency, in the same run, each
prompt as long as the manager's prompts were on average ("prompt tokens": a turn sends
its episode's whole context, and the stub echoes it back, as vLLM does); "x bare" is
the manager's CPU per turn over it. Both swing with the machine's other load, so each
is measured ``--repeats`` times, in turn: the table gives the medians and each repeat's
ratio. "Env alone" is the env's own CPU per turn (making, resetting and stepping it,
Sokoban's level generation included) when the same episodes are played with no manager;
"env apart" leaves it out of the manager's CPU, leaving what the manager itself costs.
Targets (issue 3): at least 90% of ideal, under 1 ms CPU per turn; (issue 40) within 2x
of a bare request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time

import aiohttp
import orjson

from stub_rollout import MOVE, move_stub, sokoban, tiny_renderer, warm_then_time

import agentgym
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


def bare_cpu_per_request(base_url: str, requests: int, concurrency: int, prompt_tokens: int) -> float:
    """This process's CPU seconds per bare request (after a short untimed warm-up)."""
    asyncio.run(bare_requests(base_url, 8, 4, prompt_tokens))
    cpu = time.process_time()
    asyncio.run(bare_requests(base_url, requests, concurrency, prompt_tokens))
    return (time.process_time() - cpu) / requests


def env_cpu_per_turn(args: argparse.Namespace) -> float:
    """CPU seconds per turn of the env alone: the benchmark's episodes played with no manager
    (make, reset to the episode's seed, the stub's move each turn, close), one after another."""
    config = sokoban(args.episodes, args.concurrency, args.turns)
    kwargs = config.make_env_kwargs()
    turns = 0
    cpu = time.process_time()
    for group, _ in config.episode_keys():
        env = agentgym.make(config.env_id, **kwargs)
        env.reset(seed=config.group_seed(group))
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(MOVE)
            turns, done = turns + 1, terminated or truncated
        env.close()
    return (time.process_time() - cpu) / turns


def measure(renderer: ChatRenderer, args: argparse.Namespace, delay: float) -> str:
    """One table row: the manager against a stub that answers after ``delay`` seconds, then the
    bare requests, ``args.repeats`` times in turn; the medians, and each repeat's ratio."""
    runs, bare_ms = [], []
    with move_stub(renderer, delay) as stub:
        for _ in range(args.repeats):
            run = warm_then_time([stub.base_url], renderer, args)
            runs.append(run)
            bare = bare_cpu_per_request(stub.base_url, run.turns, args.concurrency, round(run.mean_prompt_tokens))
            bare_ms.append(bare * 1000)
    cpu_ms = [run.cpu / run.turns * 1000 for run in runs]
    env_ms = env_cpu_per_turn(args) * 1000
    each = ", ".join(f"{manager / bare:.1f}" for manager, bare in zip(cpu_ms, bare_ms))
    apart = ", ".join(f"{(manager - env_ms) / bare:.1f}" for manager, bare in zip(cpu_ms, bare_ms))
    first = runs[0]  # every repeat plays the same episodes
    wall, manager, bare = (statistics.median(values) for values in
                           ([each_run.wall for each_run in runs], cpu_ms, bare_ms))
    ideal = args.concurrency / delay
    turns = first.turns
    return (f"| {delay * 1000:g} | {args.episodes} | {turns} | {round(first.mean_prompt_tokens)} | {wall:.1f} | "
            f"{turns / wall:,.0f} | {ideal:,.0f} | {turns / wall / ideal:.0%} | {manager:.2f} | "
            f"{1000 / manager:,.0f} | {bare:.3f} | {manager / bare:.1f} ({each}) | {env_ms:.3f} | "
            f"{(manager - env_ms) / bare:.1f} ({apart}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--delay", type=float, nargs="+", default=[0.05, 0.5],
                        help="stub latencies in seconds, one table row each")
    parser.add_argument("--repeats", type=int, default=3,
                        help="manager and bare runs, in turn, per latency (the table has their medians)")
    args = parser.parse_args()
    renderer = tiny_renderer()
    rows = [measure(renderer, args, delay) for delay in args.delay]
    print(f"# bench_rollout: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, concurrency {args.concurrency}\n")
    print("| stub delay ms | episodes | turns | prompt tokens | wall s | turns/s | ideal turns/s "
          "| % of ideal | CPU ms per turn | 1-core ceiling turns/s | bare request CPU ms | x bare (each repeat) "
          "| env alone CPU ms per turn | x bare, env apart (each repeat) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
