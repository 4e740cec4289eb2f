"""Cost per step of an env played through OpenEnv, against the same env in process.

Run:  .venv/bin/python benchmarks/bench_interop.py [--env Sokoban-LLM-v0] [--steps 2000] [--sessions 8]

Starts ``agentgym env serve ENV`` (a child process, as a user would run it) on a loopback
port and plays random well-formed moves (the env's ``random_action`` in process, the same
texts sent to the server), resetting when an episode ends (reset time not counted).
Rows: the env in process (``gym.make``); through OpenEnv with agentgym's ``openenv:`` env
(its own synchronous WebSocket client); with OpenEnv's own client class
(``AgentGymEnvClient(...).sync()``, an event loop thread per client); and ``--sessions``
``openenv:`` envs stepping at once from threads, as the rollout manager's pool does
(steps per second over all of them). Columns: wall time per step (median and 90th
percentile, µs) and the client process's CPU per step (µs); the server's CPU is its own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import agentgym
from agentgym.serve.launch import free_port


def _moves(env_id: str, count: int) -> list[str]:
    """Random well-formed moves of ``env_id`` (played in process to keep them legal-looking)."""
    env, rng = agentgym.make(env_id), np.random.default_rng(0)
    env.reset(seed=0)
    moves = []
    for _ in range(count):
        moves.append(env.unwrapped.random_action(rng))
        if any(env.step(moves[-1])[2:4]):
            env.reset(seed=len(moves))
    return moves


def _play(step: Callable[[str], bool], reset: Callable[[int], None], moves: list[str]) -> tuple[list[float], float]:
    """Per-step wall times (s) and the process CPU seconds the steps took."""
    times, cpu, episode = [], 0.0, 0
    reset(episode)
    for move in moves:
        start_cpu, start = time.process_time(), time.perf_counter()
        over = step(move)
        times.append(time.perf_counter() - start)
        cpu += time.process_time() - start_cpu
        if over:
            episode += 1
            reset(episode)
    return times, cpu


def _gym_steps(env: object) -> tuple[Callable[[str], bool], Callable[[int], None]]:
    return (lambda move: any(env.step(move)[2:4])), (lambda seed: env.reset(seed=seed))  # type: ignore[attr-defined]


def _openenv_client_steps(url: str) -> tuple[Callable[[str], bool], Callable[[int], None], Callable[[], None]]:
    from agentgym.interop.openenv_server import AgentGymEnvClient

    client = AgentGymEnvClient(base_url=url).sync()
    client.connect()
    return (lambda move: client.step(move).done), (lambda seed: client.reset(seed=seed)), client.close


def _row(name: str, times: list[float], cpu: float) -> str:
    ordered = sorted(times)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    return (f"| {name:<40} | {statistics.median(times) * 1e6:>10,.0f} | {p90 * 1e6:>8,.0f} | "
            f"{cpu / len(times) * 1e6:>10,.0f} |")


def _sessions(url: str, moves: list[str], sessions: int) -> tuple[float, float]:
    """Steps per second over ``sessions`` openenv: envs stepping at once, and CPU µs per step."""
    envs = [agentgym.make(f"openenv:{url}") for _ in range(sessions)]
    share = moves[: len(moves) // sessions * sessions]

    def run(index: int) -> None:
        env = envs[index]
        env.reset(seed=index)
        for move in share[index::sessions]:
            if any(env.step(move)[2:4]):
                env.reset(seed=index)

    start_cpu, start = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(sessions) as pool:
        list(pool.map(run, range(sessions)))
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    for env in envs:
        env.close()
    return len(share) / wall, cpu / len(share) * 1e6


def _serve(env_id: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "agentgym", "env", "serve", env_id, "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(f"{url}/health", timeout=1).read()
            return process, url
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("the server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="Sokoban-LLM-v0")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=8)
    args = parser.parse_args()
    moves = _moves(args.env, args.steps)
    process, url = _serve(args.env)
    try:
        print(f"{args.env}, {args.steps} steps; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print("| how it is played                         | median µs |  p90 µs | client CPU µs |")
        print("|------------------------------------------|----------:|--------:|--------------:|")
        print(_row("in process (gym.make)", *_play(*_gym_steps(agentgym.make(args.env)), moves)))
        remote = agentgym.make(f"openenv:{url}")
        print(_row("OpenEnv server, agentgym openenv: env", *_play(*_gym_steps(remote), moves)))
        remote.close()
        step, reset, close = _openenv_client_steps(url)
        print(_row("OpenEnv server, OpenEnv's client (sync)", *_play(step, reset, moves)))
        close()
        rate, cpu = _sessions(url, moves, args.sessions)
        print(f"\n{args.sessions} openenv: sessions at once from threads: {rate:,.0f} steps/s in all, "
              f"{cpu:,.0f} client CPU µs per step")
    finally:
        process.terminate()
        process.wait(30)


if __name__ == "__main__":
    main()
