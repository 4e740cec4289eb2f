"""What the rollout benchmarks share (bench_rollout, bench_servers, bench_scale); not a benchmark.

Each plays Sokoban with the tiny model's tokenizer against stub OpenAI servers
(``agentgym.serve.stub``, each its own process) that answer every turn with
the same canned reply, one the env rejects, so every episode plays exactly
its ``--turns`` turns. Imported by the scripts beside it (run as
``python benchmarks/bench_x.py``, which puts this folder on the path).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policy import OpenAIPolicy
from agentgym.rollout.rows import TrajectoryRow
from agentgym.serve.stub import StubServer

__all__ = ["MOVE", "TimedRun", "mean_prompt_tokens", "move_stub", "play", "sokoban", "tiny_renderer",
           "warm_then_time"]

MOVE = "<answer>Wait</answer>"  # not a move: every episode plays all its turns


def tiny_renderer() -> ChatRenderer:
    return ChatRenderer.for_model("tiny")


def move_stub(renderer: ChatRenderer, delay: float) -> StubServer:
    """A stub that 'samples' :data:`MOVE` then eos after ``delay`` seconds (a context manager)."""
    ids = renderer.tokenizer.encode(MOVE, add_special_tokens=False) + [renderer.eos_id]
    return StubServer(delay=delay, completion_text=MOVE, completion_ids=ids)


def sokoban(episodes: int, concurrency: int, turns: int, *, seed: int = 0) -> RolloutConfig:
    """The benchmarks' run: a context budget no episode reaches, so none ends early."""
    return RolloutConfig(env_id="Sokoban-LLM-v0", episodes=episodes, concurrency=concurrency,
                         max_turns=turns, max_context_tokens=32_768, seed=seed)


@dataclass
class TimedRun:
    """What :func:`warm_then_time` measured."""

    turns: int
    policy: OpenAIPolicy
    wall: float  # seconds
    cpu: float  # this process's CPU seconds
    #: the prompt each turn sent, in tokens, on average (its context: instructions, turns so far)
    mean_prompt_tokens: float


async def play(urls: Sequence[str], renderer: ChatRenderer, args: argparse.Namespace, *,
               seed: int = 0) -> tuple[list[TrajectoryRow], OpenAIPolicy]:
    """The rows of ``args.episodes`` episodes played over ``urls``, and the (closed) policy for its stats."""
    config = sokoban(args.episodes, args.concurrency, args.turns, seed=seed)
    async with OpenAIPolicy(list(urls), "stub", max_connections=args.concurrency) as policy:
        rows = await EnvManager(config, policy, renderer=renderer).run()
    failed = [row.error for row in rows if row.error]
    if failed:
        raise SystemExit(f"{len(failed)} episodes failed, e.g. {failed[0]}")
    return rows, policy


def mean_prompt_tokens(rows: Sequence[TrajectoryRow]) -> float:
    """Tokens each turn's request carried as its prompt, on average: the row's prompt and
    everything before the turn's sampled tokens."""
    lengths = [len(row.prompt_ids) + span.start for row in rows for span in row.turns]
    return sum(lengths) / len(lengths)


def warm_then_time(urls: Sequence[str], renderer: ChatRenderer, args: argparse.Namespace, *,
                   seed: int = 0) -> TimedRun:
    """A short untimed warm-up run (imports, template compilation, the thread pool), then the
    timed run."""
    warm = argparse.Namespace(**{**vars(args), "episodes": 4, "concurrency": 4, "turns": 2})
    asyncio.run(play(urls, renderer, warm, seed=seed))
    wall, cpu = time.perf_counter(), time.process_time()
    rows, policy = asyncio.run(play(urls, renderer, args, seed=seed))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return TimedRun(turns=sum(row.num_turns for row in rows), policy=policy, wall=wall, cpu=cpu,
                    mean_prompt_tokens=mean_prompt_tokens(rows))
