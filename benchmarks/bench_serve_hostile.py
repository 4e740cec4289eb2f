"""Hostile-input probes against the built-in server (issue 38): one big request, many stop strings.

Run: ``python benchmarks/bench_serve_hostile.py [--model tiny] [--mib 10]``

Prints, for one body of ``--mib`` MiB of text prompt (then 4 MiB, and 1 MiB to
``/tokenize``, which tokenizes whatever fits the body cap): the seconds until the
server answered it, and the slowest ``/health`` answer while it did (the
target is under 0.1 s: a big request must not stall the others). Then the
seconds for a 64-token completion with many long stop strings, and the cost of
the per-token stop scan itself (``TextTracker``) for 32 and 10,000 strings.
Everything goes to a ``BuiltinServer`` on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import threading
import time

import httpx2

from agentgym.serve.launch import BuiltinServer
from agentgym.serve.text import TextTracker


def big_request(server: BuiltinServer, mib: float, path: str = "/v1/completions"
                ) -> tuple[int, float, float, int]:
    """(status, seconds to answer, slowest /health in s, /health polls) for one big text prompt."""
    headers = {"Authorization": f"Bearer {server.api_key}"}
    prompt = "hello " * int(mib * 2**20 / 6)
    slowest, polls, done = 0.0, 0, threading.Event()

    def poll() -> None:
        nonlocal slowest, polls
        with httpx2.Client(timeout=120) as http:
            while not done.is_set():
                start = time.perf_counter()
                http.get(f"{server.url}/health")
                slowest = max(slowest, time.perf_counter() - start)
                polls += 1
                time.sleep(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    start = time.perf_counter()
    with httpx2.Client(timeout=300) as http:
        answer = http.post(f"{server.url}{path}", headers=headers,
                           json={"model": server.model_name, "prompt": prompt, "max_tokens": 4})
    took = time.perf_counter() - start
    done.set()
    poller.join(130)
    return answer.status_code, took, slowest, polls


def many_stops(server: BuiltinServer, count: int, length: int) -> tuple[int, float]:
    """(status, seconds) for 64 tokens with ``count`` stop strings of ``length`` characters."""
    stops = [f"{index:06d}" + "x" * (length - 6) for index in range(count)]
    start = time.perf_counter()
    with httpx2.Client(timeout=300) as http:
        answer = http.post(f"{server.base_url}/completions",
                           headers={"Authorization": f"Bearer {server.api_key}"},
                           json={"model": server.model_name, "prompt": [1, 2, 3], "max_tokens": 64,
                                 "ignore_eos": True, "stop": stops})
    return answer.status_code, time.perf_counter() - start


def scan_cost(count: int, length: int, tokens: int = 256) -> float:
    """Microseconds per fed token of TextTracker with ``count`` stop strings."""
    stops = [f"{index:06d}" + "x" * (length - 6) for index in range(count)]
    tracker = TextTracker(lambda ids: "".join(chr(97 + i % 26) for i in ids), stop=stops)
    ids: list[int] = []
    start = time.perf_counter()
    for token in range(tokens):
        ids.append(token)
        tracker.feed(ids)
    return (time.perf_counter() - start) / tokens * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--mib", type=float, default=10.0, help="size of the big prompt")
    args = parser.parse_args()
    for count, length in ((32, 256), (10_000, 100)):
        print(f"stop scan, {count} strings of {length}: {scan_cost(count, length):.0f} us/token")
    with BuiltinServer(args.model, max_model_len=512) as server:
        for mib, path in ((args.mib, "/v1/completions"), (4.0, "/v1/completions"), (1.0, "/tokenize")):
            status, took, slowest, polls = big_request(server, mib, path)
            print(f"{mib:g} MiB prompt to {path}: HTTP {status} after {took:.2f} s; slowest /health "
                  f"{slowest * 1000:.0f} ms over {polls} polls")
        for count, length in ((32, 256), (10_000, 100)):
            status, took = many_stops(server, count, length)
            print(f"{count} stop strings of {length}: HTTP {status} after {took:.2f} s")


if __name__ == "__main__":
    main()
