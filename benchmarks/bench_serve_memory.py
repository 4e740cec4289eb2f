"""Does the built-in server hand memory back? RSS after 100 and 2,000 requests and after a cache reset.

Run: ``python benchmarks/bench_serve_memory.py [--model tiny] [--requests 2000] [--prefix-cache-mib 1024]``

Sends distinct token-id prompts of 50 to 450 tokens (16 completion tokens,
8 at a time, a few with n=4) to a ``BuiltinServer`` on 127.0.0.1, so the
prefix cache fills and batches of every shape pass through; prints the
server's RSS after the first 100 requests, after all of them, and after
``POST /reset_prefix_cache``. The goal (issue 38): the last within 1.5x of
the first. The allocator is the server's default (tcmalloc when installed;
``AGENTGYM_ALLOCATOR=system`` for glibc).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from pathlib import Path

import httpx2
import openai

from agentgym.allocator import preloaded_allocator
from agentgym.serve.launch import BuiltinServer


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def send(server: BuiltinServer, first: int, count: int, concurrency: int = 8) -> None:
    rng = random.Random(first)
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0,
                                  timeout=300) as client:
        queue = list(range(first, first + count))

        async def worker() -> None:
            while queue:
                index = queue.pop()
                prompt = [rng.randrange(3, 1000) for _ in range(rng.randrange(50, 450))]
                await client.completions.create(model=server.model_name, prompt=prompt, max_tokens=16,
                                                n=4 if index % 10 == 0 else 1, temperature=1.0,
                                                extra_body={"ignore_eos": True})

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--prefix-cache-mib", type=int, default=None, help="default: the server's")
    args = parser.parse_args()
    with BuiltinServer(args.model, max_model_len=512, prefix_cache_mib=args.prefix_cache_mib) as server:
        assert server.process is not None
        pid = server.process.pid
        start = time.perf_counter()
        asyncio.run(send(server, 0, 100))
        after_100 = rss_mib(pid)
        asyncio.run(send(server, 100, args.requests - 100))
        after_all = rss_mib(pid)
        httpx2.post(f"{server.url}/reset_prefix_cache", timeout=60,
                    headers={"Authorization": f"Bearer {server.api_key}"}).raise_for_status()
        time.sleep(1.0)
        after_reset = rss_mib(pid)
        allocator = preloaded_allocator(pid)
    print(f"allocator: {allocator}; {args.requests} requests in {time.perf_counter() - start:.0f} s")
    print(f"{'RSS after 100':>16} {f'after {args.requests}':>16} {'after reset':>16} {'reset / 100':>12}")
    print(f"{after_100:>12.0f} MiB {after_all:>12.0f} MiB {after_reset:>12.0f} MiB "
          f"{after_reset / after_100:>11.2f}x")


if __name__ == "__main__":
    main()
