"""Rollout throughput as env workers grow from 1 to 4 Ray actors on this machine.

Run:  .venv/bin/python benchmarks/bench_scale.py [--actors 1 2 3 4] [--episodes-per-actor 128]
                                                 [--turns 10] [--concurrency-per-actor 64]
                                                 [--delay 0.02] [--stubs 2]
                                                 [--out benchmarks/results/scale.png]

Weak scaling: each actor plays ``--episodes-per-actor`` Sokoban episodes of
exactly ``--turns`` turns (the canned move is one the env rejects, so none
ends early), ``--concurrency-per-actor`` at once, against ``--stubs`` stub
OpenAI servers (each its own process) that answer after ``--delay`` seconds.
The ideal is actors x concurrency / delay turns per second; one actor is
CPU-bound well below it (the manager costs ~1 ms of CPU a turn,
``bench_rollout.py``), so the curve shows what more processes buy: close to
linear while there are free cores, flat once the cores are spent (the stubs
and the driver share them too). Each actor count gets fresh actors and a
warm-up run (process start, imports, tokenizer) that is not timed.
The table is printed as Markdown; the curve goes to ``--out`` (a PNG).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import platform
import time
from pathlib import Path

from stub_rollout import move_stub, sokoban, tiny_renderer

from agentgym.models import resolve_model
from agentgym.rollout.manager import RolloutConfig
from agentgym.rollout.ray_rollout import (
    PolicySpec,
    RayOptions,
    RolloutActors,
    ray_session,
    run_on_ray,
)
from agentgym.rollout.rows import TrajectoryRow


def _config(args: argparse.Namespace, actors: int, episodes_per_actor: int) -> RolloutConfig:
    return sokoban(actors * episodes_per_actor, actors * args.concurrency_per_actor, args.turns)


async def _play(config: RolloutConfig, spec: PolicySpec, options: RayOptions, actors: RolloutActors) -> int:
    """Turns played; every episode must have ended without error."""
    turns, errors = 0, []

    def count(rows: list[TrajectoryRow]) -> None:
        nonlocal turns
        turns += rows[0].num_turns
        errors.extend(row.error for row in rows if row.error)

    await run_on_ray(config, spec, options, on_episode=count, actors=actors)
    if errors:
        raise SystemExit(f"{len(errors)} episodes failed, e.g. {errors[0]}")
    return turns


def measure(args: argparse.Namespace, spec: PolicySpec, options: RayOptions, count: int) -> dict[str, float]:
    """One point of the curve: ``count`` fresh actors, warmed up, then timed."""
    with RolloutActors(count, this_node=True) as actors:
        asyncio.run(_play(_config(args, count, 2), spec, options, actors))  # warm-up, not timed
        config = _config(args, count, args.episodes_per_actor)
        wall = time.perf_counter()
        turns = asyncio.run(_play(config, spec, options, actors))
        wall = time.perf_counter() - wall
    return {"actors": count, "episodes": config.episodes, "turns": turns, "wall": wall,
            "turns_s": turns / wall, "episodes_s": config.episodes / wall,
            "ideal": count * args.concurrency_per_actor / args.delay}


def table(points: list[dict[str, float]], args: argparse.Namespace) -> str:
    base = points[0]["turns_s"] / points[0]["actors"]
    title = (f"# bench_scale: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
             f"stub delay {args.delay * 1000:g} ms x {args.stubs} stubs, {args.turns} turns/episode, "
             f"concurrency {args.concurrency_per_actor}/actor\n")
    header = ("| actors | episodes | turns | wall s | turns/s | episodes/s | ideal turns/s | % of ideal "
              "| speed-up vs 1 actor |")
    lines = [title, header, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for point in points:
        lines.append(
            f"| {point['actors']:.0f} | {point['episodes']:.0f} | {point['turns']:.0f} | {point['wall']:.1f} "
            f"| {point['turns_s']:,.0f} | {point['episodes_s']:,.1f} | {point['ideal']:,.0f} "
            f"| {point['turns_s'] / point['ideal']:.0%} | {point['turns_s'] / base:.2f} |")
    return "\n".join(lines)


def plot(points: list[dict[str, float]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    actors = [point["actors"] for point in points]
    measured = [point["turns_s"] for point in points]
    linear = [measured[0] / actors[0] * count for count in actors]
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot(actors, measured, "o-", label="measured")
    axes.plot(actors, linear, "--", color="grey", label="linear in actors")
    axes.set(xlabel="Ray actors", ylabel="turns / s", title=title, xticks=actors)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--episodes-per-actor", type=int, default=128)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--concurrency-per-actor", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.02, help="stub latency in seconds")
    parser.add_argument("--stubs", type=int, default=2, help="stub server processes")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "scale.png")
    args = parser.parse_args()
    # Said before minutes of measuring, not after: without matplotlib there is a table, no curve.
    can_plot = importlib.util.find_spec("matplotlib") is not None
    if not can_plot:
        print("matplotlib is not installed: the table only, no curve "
              "(scripts/setup.sh bench, or pip install matplotlib).")

    renderer = tiny_renderer()
    # Ray's CPUs are bookkeeping: ask for one per actor even where there are fewer cores.
    options = RayOptions(address="local", local_cpus=max(args.actors))
    with contextlib.ExitStack() as stack:
        stubs = [stack.enter_context(move_stub(renderer, args.delay)) for _ in range(args.stubs)]
        stack.enter_context(ray_session(options))
        spec = PolicySpec(base_urls=tuple(stub.base_url for stub in stubs), model="stub",
                          tokenizer=resolve_model("tiny"))
        points = [measure(args, spec, options, count) for count in args.actors]
    print(table(points, args))
    if can_plot:
        plot(points, args.out, f"Rollout throughput, {os.cpu_count()} cores, stub {args.delay * 1000:g} ms")
        print(f"\ncurve written to {args.out}")


if __name__ == "__main__":
    main()
