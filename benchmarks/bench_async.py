"""Seconds per training step, synchronous against asynchronous (``-s asynchronous=true``).

Run:  .venv/bin/python benchmarks/bench_async.py [--steps 6] [--delay 0.5] [--train-seconds 1.0 2.0 4.0]
      .venv/bin/python benchmarks/bench_async.py --builtin [--steps 6] [--model tiny-128x4]

(a) The real run skeleton (``agentgym.trainers.loop.run.train``) against a stub OpenAI server
that answers every completion after ``--delay`` seconds (it stands in for GPU
inference), with a learner of known cost: it sleeps ``--train-seconds`` a step
(it stands in for the optimiser's work, and leaves the cores free, as a GPU
trainer would). Sokoban episodes of ``--turns`` turns (the stub's canned move is
one the env rejects, so no episode ends early), all at once. A synchronous step
costs about rollout + training; an asynchronous one about the larger of the two
once the overlap has begun (step 0 has nothing to overlap with, so it is left
out of the mean). No weight push (the stub has no weights).

(b) ``--builtin``: the real thing on this machine: GRPO (fsdp backend) with the built-in
server on Bandit-LLM-v0 and Sokoban-LLM-v0 after the format warm-up, weight pushes included. Server and learner
share the CPU cores here, so the overlap can only hide what one leaves idle; on a GPU
machine they sit on different devices.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from agentgym.rollout.rows import TrajectoryRow
from agentgym.serve.stub import StubServer
from agentgym.trainers.learners.base import Learner
from agentgym.trainers.registry import register_trainer
from agentgym.trainers.loop.run import train
from agentgym.trainers.settings import TrainConfig

_TRAIN_SECONDS = [1.0]


class SleepingLearner(Learner):
    """A learner that costs a known wall time and changes nothing."""

    sections = frozenset({"rollout", "server", "warmup", "grpo", "experimental"})

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        time.sleep(_TRAIN_SECONDS[0])
        return {"updates": 1.0, "train_rows": float(len(rows))}


def run(args: argparse.Namespace, stub_url: str, train_seconds: float, asynchronous: bool) -> tuple[float, float]:
    """Mean seconds per step after the first, and mean rollout seconds (the episodes' own time)."""
    _TRAIN_SECONDS[0] = train_seconds
    out = Path(tempfile.mkdtemp(prefix="bench-async-")) / "run"
    config = TrainConfig.from_dict({
        "trainer": "sleeping", "env_id": "Sokoban-LLM-v0", "model": "tiny", "base_url": stub_url,
        "sync_weights": False, "steps": args.steps, "episodes_per_step": args.episodes, "group_size": 8,
        "max_turns": args.turns, "concurrency": args.episodes, "format_warmup_episodes": 0,
        "checkpoint_every": 10**6, "asynchronous": asynchronous, "max_staleness": 10**6, "out": str(out)})
    result = train(config)
    later = result.metrics[1:]
    return (sum(m["time/step"] for m in later) / len(later),
            sum(m.get("time/rollout", 0.0) for m in later) / len(later))


_BUILTIN_ENVS = {
    "Bandit-LLM-v0": {},
    "Sokoban-LLM-v0": {"env_kwargs": {"brief": True, "show_positions": True}, "max_turns": 8},
}


def run_builtin(args: argparse.Namespace, env_id: str, asynchronous: bool) -> dict[str, float]:
    """Mean seconds per step after the first, and its parts, of real GRPO against the built-in server."""
    out = Path(tempfile.mkdtemp(prefix="bench-async-")) / "run"
    config = TrainConfig.from_dict({
        "env_id": env_id, "model": args.model, "steps": args.steps, "episodes_per_step": args.episodes,
        # The format warm-up first: a random-init model's groups all score alike, and GRPO
        # leaves such groups out, so without it there would be nothing to learn and nothing to overlap.
        "group_size": 8, "max_tokens": 16, "checkpoint_every": 10**6,
        "asynchronous": asynchronous, "out": str(out), **_BUILTIN_ENVS[env_id]})
    later = train(config).metrics[1:]
    parts = ("time/step", "time/rollout", "time/train", "time/sync", "time/waiting")
    return {part: sum(m.get(part, 0.0) for m in later) / len(later) for part in parts}


def main_builtin(args: argparse.Namespace) -> None:
    print(f"GRPO (fsdp) with the built-in server, {args.model}, {args.episodes} episodes a step in groups of 8; "
          f"{args.steps} steps (the first left out); CPU, {os.cpu_count()} cores; Python {platform.python_version()}")
    print()
    print("| env | mode | s/step | rollout s | train s | push s | waiting s | async / sync |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for env_id in _BUILTIN_ENVS:
        sync = run_builtin(args, env_id, asynchronous=False)
        overlapped = run_builtin(args, env_id, asynchronous=True)
        for mode, times in (("sync", sync), ("async", overlapped)):
            ratio = f"{overlapped['time/step'] / sync['time/step']:.2f}" if mode == "async" else ""
            print(f"| {env_id} | {mode} | {times['time/step']:.2f} | {times['time/rollout']:.2f} | "
                  f"{times['time/train']:.2f} | {times['time/sync']:.2f} | {times['time/waiting']:.2f} | {ratio} |",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.5)
    parser.add_argument("--train-seconds", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    parser.add_argument("--builtin", action="store_true", help="(b): real GRPO with the built-in server")
    parser.add_argument("--model", default="tiny-128x4", help="(b): the model trained and served")
    args = parser.parse_args()
    import transformers

    transformers.utils.logging.disable_progress_bar()
    if args.builtin:
        main_builtin(args)
        return
    register_trainer("sleeping", "__main__:SleepingLearner", backends=("fsdp",), description="Sleeps.")  # this very module
    print(f"Stub server, {args.delay:g} s a request; {args.episodes} Sokoban episodes of {args.turns} turns a step, "
          f"all at once; {args.steps} steps (the first left out); CPU, {os.cpu_count()} cores; "
          f"Python {platform.python_version()}")
    print()
    print("| learner s/step | rollout s/step (sync run) | sync s/step | async s/step | ideal sync (sum) | ideal async (max) "
          "| async / sync |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with StubServer(delay=args.delay) as stub:
        for seconds in args.train_seconds:
            sync, rollout = run(args, stub.base_url, seconds, asynchronous=False)
            overlapped, _ = run(args, stub.base_url, seconds, asynchronous=True)
            print(f"| {seconds:g} | {rollout:.2f} | {sync:.2f} | {overlapped:.2f} | {rollout + seconds:.2f} | "
                  f"{max(rollout, seconds):.2f} | {overlapped / sync:.2f} |", flush=True)


if __name__ == "__main__":
    main()
