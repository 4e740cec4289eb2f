"""Latency and throughput of a short program through the sandbox, as a table.

Run:  .venv/bin/python benchmarks/bench_sandbox.py [--calls 300] [--docker-run-calls 48]

Runs ``print(sum(range(1000)))`` at concurrency 1, 4 and 16 through:

- the warm Docker pool (``DockerSandbox``, 16 containers started beforehand);
- the same pool through the sandbox service (``agentgym sandbox serve``'s app,
  in a thread of this process on a loopback port) and its client
  ``RemoteSandbox``: the cost of HTTP and JSON on top of the pool;
- a plain ``docker run --rm --network none IMAGE python3 -c CODE`` per call;
- a bare ``python3 -c CODE`` subprocess per call (the same Debian python3 as the image);
- ``LocalSandbox`` (bubblewrap when it works here), for reference.

Latency is per call, from the caller's side; throughput is calls over the
wall time of the whole batch. Targets: warm-pool p50 under 30 ms, within 2x
of the bare subprocess, and at least 10x faster than ``docker run`` per call.
Needs a Docker engine and the image (``agentgym sandbox build``).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from agentgym.sandbox import DockerSandbox, Limits, LocalSandbox, RemoteSandbox
from agentgym.sandbox.image import DEFAULT_IMAGE
from agentgym.sandbox.service import ServiceThread

CODE = "print(sum(range(1000)))"
EXPECTED = "499500\n"
LEVELS = (1, 4, 16)


def measure(call: Callable[[], str], calls: int, concurrency: int) -> dict[str, float]:
    """p50, p99 (ms) and calls per second of ``calls`` calls, ``concurrency`` at a time."""
    def timed(_: int) -> float:
        start = time.perf_counter()
        output = call()
        if output != EXPECTED:
            raise RuntimeError(f"unexpected output {output!r}")
        return (time.perf_counter() - start) * 1000

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(timed, range(concurrency * 2)))  # warm-up
        start = time.perf_counter()
        latencies = sorted(pool.map(timed, range(calls)))
        wall = time.perf_counter() - start
    return {"p50": statistics.median(latencies),
            "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "rate": calls / wall}


def bare_python() -> Callable[[], str]:
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    return lambda: subprocess.run([python, "-c", CODE], capture_output=True, text=True,
                                  check=False).stdout


def docker_run(image: str) -> Callable[[], str]:
    docker = shutil.which("docker") or "docker"
    command = [docker, "run", "--rm", "--network", "none", image, "python3", "-c", CODE]
    return lambda: subprocess.run(command, capture_output=True, text=True,
                                  check=False).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per level (pool, bare, local)")
    parser.add_argument("--docker-run-calls", type=int, default=48, help="calls per level (docker run)")
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    args = parser.parse_args()

    rows: list[tuple[str, int, int, dict[str, float]]] = []
    limits = Limits(timeout=30)
    with DockerSandbox(limits, image=args.image, pool_size=16, max_containers=16) as pool:
        time.sleep(5)  # let the pool finish starting its 16 containers
        for level in LEVELS:
            rows.append(("docker warm pool", level, args.calls,
                         measure(lambda: pool.run(CODE).stdout, args.calls, level)))
        with ServiceThread(pool, pool_size=16) as service, \
                RemoteSandbox(service.url, limits) as remote:
            for level in LEVELS:
                rows.append(("service (loopback)", level, args.calls,
                             measure(lambda: remote.run(CODE).stdout, args.calls, level)))
    local = LocalSandbox(limits)
    cases = [("bare python3 -c", bare_python(), args.calls),
             (f"local ({local.name})", lambda: local.run(CODE).stdout, args.calls),
             ("docker run --rm", docker_run(args.image), args.docker_run_calls)]
    for name, call, calls in cases:
        for level in LEVELS:
            rows.append((name, level, calls, measure(call, calls, level)))

    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}\n")
    print(f"{'backend':<22} {'conc':>4} {'calls':>5} {'p50 ms':>8} {'p99 ms':>8} {'calls/s':>8}")
    for name, level, calls, stats in rows:
        print(f"{name:<22} {level:>4} {calls:>5} {stats['p50']:>8.1f} {stats['p99']:>8.1f} "
              f"{stats['rate']:>8.1f}")
    p50 = {(name, level): stats["p50"] for name, level, _, stats in rows}
    warm, bare, cold = p50[("docker warm pool", 1)], p50[("bare python3 -c", 1)], p50[("docker run --rm", 1)]
    print(f"\nwarm pool p50 at concurrency 1: {warm:.1f} ms (target < 30); "
          f"{warm / bare:.2f}x bare python3 (target <= 2); "
          f"docker run is {cold / warm:.1f}x slower (target >= 10)")


if __name__ == "__main__":
    main()
