"""What spreading requests over several servers costs the manager, and how it holds up when one fails.

Run:  .venv/bin/python benchmarks/bench_servers.py [--episodes 200] [--turns 5] [--concurrency 64]
                                                   [--delay 0.05]

Each row plays the same Sokoban rollout (the tiny model's tokenizer, every
episode ``--turns`` turns) against stub servers (agentgym.serve.stub, each its
own process) that answer after ``--delay`` seconds: one server, two, three,
and three of which one answers every request with a 500. "CPU ms per turn" is
this process's CPU (user + system) over all turns after a warm-up run, the
number the token path must keep under 1 ms; "requests" lists what each server
was sent, failures in brackets. On a shared two-core machine the wall times
move with the neighbours; the CPU per turn and the spread are what to read.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform

from stub_rollout import move_stub, tiny_renderer, warm_then_time

from agentgym.rollout.chat import ChatRenderer
from agentgym.serve.stub import StubServer


def measure(renderer: ChatRenderer, args: argparse.Namespace, good: int, failing: int) -> str:
    """One table row: ``good`` healthy stubs and ``failing`` ones that answer 500."""
    with contextlib.ExitStack() as stack:
        stubs = [stack.enter_context(move_stub(renderer, args.delay)) for _ in range(good)]
        stubs += [stack.enter_context(StubServer(delay=0.0, fail_every=1)) for _ in range(failing)]
        run = warm_then_time([stub.base_url for stub in stubs], renderer, args, seed=1000)
    turns, wall, cpu = run.turns, run.wall, run.cpu
    spread = " / ".join(f"{s.requests}" + (f" ({s.failures})" if s.failures else "")
                        for s in run.policy.server_stats())
    return (f"| {good} | {failing} | {turns} | {wall:.1f} | {turns / wall:,.0f} | "
            f"{cpu / turns * 1000:.2f} | {spread} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.05, help="stub latency in seconds")
    args = parser.parse_args()
    renderer = tiny_renderer()
    rows = [measure(renderer, args, good, failing) for good, failing in ((1, 0), (2, 0), (3, 0), (2, 1))]
    print(f"# bench_servers: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {args.episodes} episodes x {args.turns} turns, "
          f"concurrency {args.concurrency}, stub delay {args.delay * 1000:g} ms\n")
    print("| healthy servers | failing servers | turns | wall s | turns/s | CPU ms per turn | requests (failed) |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
