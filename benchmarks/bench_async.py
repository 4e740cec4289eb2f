"""Seconds per training step, synchronous against asynchronous (``-s asynchronous=true``).

Run:  .venv/bin/python benchmarks/bench_async.py [--steps 6] [--delay 0.5] [--train-seconds 1.0 2.0 4.0]

The real run skeleton (``agentgym.trainers.run.train``) against a stub OpenAI server
that answers every completion after ``--delay`` seconds (it stands in for GPU
inference), with a learner of known cost: it sleeps ``--train-seconds`` a step
(it stands in for the optimiser's work, and leaves the cores free, as a GPU
trainer would). Sokoban episodes of ``--turns`` turns (the stub's canned move is
one the env rejects, so no episode ends early), all at once. A synchronous step
costs about rollout + training; an asynchronous one about the larger of the two
once the overlap has begun (step 0 has nothing to overlap with, so it is left
out of the mean). No weight push (the stub has no weights).
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentgym.rollout.rows import TrajectoryRow
from agentgym.serve.stub import StubServer
from agentgym.trainers.learner import Learner, build_learner
from agentgym.trainers.registry import register_trainer
from agentgym.trainers.run import train
from agentgym.trainers.settings import TrainConfig

_TRAIN_SECONDS = [1.0]


class SleepingLearner(Learner):
    """A learner that costs a known wall time and changes nothing."""

    sections = frozenset({"rollout", "server", "warmup", "grpo", "experimental"})

    def train_step(self, rows: Sequence[TrajectoryRow]) -> dict[str, float]:
        time.sleep(_TRAIN_SECONDS[0])
        self.engine.version += 1
        return {"train_rows": float(len(rows))}


def make_sleeping(config: TrainConfig, dist: Any) -> Learner:
    return build_learner(SleepingLearner, config, dist)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.5)
    parser.add_argument("--train-seconds", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    args = parser.parse_args()
    import transformers

    transformers.utils.logging.disable_progress_bar()
    register_trainer("sleeping", {"fsdp": "__main__:make_sleeping"}, description="Sleeps.")  # this very module
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
