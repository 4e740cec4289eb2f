"""The run skeleton: every trainer, every backend, one loop you can read top to bottom.

    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "steps": 40, "out": "runs/bandit"})
    result = train(config)                  # or: agentgym train --env Bandit-LLM-v0 --steps 40

    for step in steps:
        rows    = rollout(step)             # played now (or, asynchronous, while the last step learned), or read
        metrics = learner.train_step(rows)  # the trainer's own piece (grpo, sft, ...)
        push(learner) -> server             # the built-in server's endpoint, or vLLM's reload
        log, checkpoint, budget
    learner.export(final/)

The skeleton owns the run folder and its checks, the saved settings, resume, the time
budget, metrics (console, metrics.jsonl, TensorBoard, W&B), the built-in server and the
weight push, the format warm-up, checkpoints and the final export. A trainer is a
:class:`~agentgym.trainers.learners.base.Learner`. Under torchrun rank 0 plays, serves and logs;
every rank gets the rows and trains on its share. Every step's seeds derive from the
step number, so a resumed run plays and learns what the uninterrupted one would have.

With ``rollout.asynchronous`` the next step's episodes start as soon as this step's rows
are taken, so playing overlaps learning; the weight push reaches the server between turns
of the episodes in flight. Each token keeps the version that sampled it through its
logprobs (the importance correction compares against them); a row's ``policy_version``
is its newest turn's, and rows more than ``max_staleness`` versions old are dropped. A run
resumed from a checkpoint taken while a step was being played plays that step again, with
the checkpoint's weights.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.trainers.engines.distributed import Dist, broadcast_object, init_distributed
from agentgym.trainers.learners.base import Learner
from agentgym.trainers.learners.sft import SFTBatches, sft_update, trajectory_files
from agentgym.trainers.loop.budget import TimeBudget
from agentgym.trainers.loop.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from agentgym.trainers.loop.metrics import MetricsLogger
from agentgym.trainers.loop.rollouts import (
    OfflineGroups,
    drop_stale,
    episode_stats,
    format_warmup_rows,
)
from agentgym.trainers.loop.serving import Serving
from agentgym.trainers.settings import TrainConfig
from rich.console import Console

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow

__all__ = ["LoopState", "RowSource", "TrainResult", "check_run_folder", "train"]


@dataclass
class LoopState:
    """What the loop must remember across a resume (beside the learner's own state)."""

    step: int = 0
    """the next step to run"""
    warmed_up: bool = False
    data_position: int = 0
    """offline GRPO: index of the next group of the trajectories file"""

    def to_dict(self) -> dict[str, Any]:
        return {"warmed_up": self.warmed_up, "data_position": self.data_position}


@dataclass
class TrainResult:
    """What a run left behind."""

    out: Path
    metrics: list[dict[str, float]] = field(default_factory=list)
    final_model: Path | None = None
    stopped_early: bool = False


def train(config: TrainConfig, *, console: Console | None = None, stop_after: int | None = None,
          device: str = "auto") -> TrainResult:
    """Run ``config``'s trainer; returns the metrics of the steps run here.

    ``stop_after``: stop (with a checkpoint) once this many steps are done, as an interrupted run would.
    """
    from agentgym.trainers.registry import get_learner_factory, trainer_spec

    if config.run.backend is None:
        config.run.backend = trainer_spec(config.run.trainer).default_backend
    budget = TimeBudget(config.run.max_seconds)
    out = Path(config.run.out)
    check_run_folder(out, config)
    make_learner = get_learner_factory(config.run.trainer, config.run.backend)
    if config.rollout.trajectories is not None:
        trajectory_files(config.rollout.trajectories)  # a missing file fails before anything is loaded or written
    dist = init_distributed(device)
    learner = make_learner(config, dist)
    data = _recorded_rows(config, learner)
    state, resumed_from = _resume(learner, out, config)
    if dist.is_main:
        config.save_yaml(out / "config.yaml")
    result = TrainResult(out=out)
    engine = learner.engine
    log = MetricsLogger(out, config, start_step=state.step, enabled=dist.is_main, console=console)
    if config.rollout.trajectories is None and config.server.base_url is None:
        log.stage("starting the server")
    with log, Serving(config, engine.tokenizer, engine.model_path, main=dist.is_main) as serving:
        if resumed_from is not None:
            log.note(f"Resumed from {resumed_from} (step {state.step}).")
        _warm_up(config, learner, serving, state, log)
        serving.push(learner)  # the server starts from the learner's weights (warm-up, checkpoint)
        log.stage("train")
        next_rows = _row_source(config, learner, data, serving, log)
        settled = engine.optimizer_steps  # the learner as it was after the last whole step
        try:
            for step in range(state.step, config.run.steps):
                started = time.perf_counter()
                rows, metrics, position = next_rows(step, state.data_position)
                train_started = time.perf_counter()
                metrics.update(learner.train_step(rows))
                metrics["time/train"] = time.perf_counter() - train_started
                if serving.pushes:
                    metrics["time/sync"] = serving.push(learner)
                metrics.update({"time/step": time.perf_counter() - started, "policy_version": float(learner.version)})
                log.log(step, metrics)
                result.metrics.append(metrics)
                state.step, state.data_position, settled = step + 1, position, engine.optimizer_steps
                stopping = stop_after is not None and state.step >= stop_after
                out_of_time = state.step < config.run.steps and _out_of_time(budget, dist)
                if (state.step % config.run.checkpoint_every == 0 or state.step == config.run.steps or stopping
                        or out_of_time):
                    save_checkpoint(learner, out, state.step, state.to_dict(), keep=config.run.keep_checkpoints)
                if stopping and state.step < config.run.steps:
                    result.stopped_early = True
                    return result
                if out_of_time:
                    log.note(budget.note(state.step, config.run.steps))
                    break
        except KeyboardInterrupt:
            # A step cut in the middle of its updates would resume from a mix of two steps.
            if engine.optimizer_steps == settled and state.step > 0:
                log.note(f"Interrupted: saving a checkpoint at step {state.step}; continue with --resume.")
                save_checkpoint(learner, out, state.step, state.to_dict(), keep=config.run.keep_checkpoints)
            raise
    result.final_model = learner.export(out / "final")
    return result


RowSource = Callable[[int, int], tuple[list[TrajectoryRow], dict[str, float], int]]


def _recorded_rows(config: TrainConfig, learner: Learner) -> SFTBatches | OfflineGroups | None:
    """The rows of the rollout files, read before the run folder is written (a file without usable
    rows leaves nothing behind): batches (SFT) or whole groups (offline GRPO); None when playing."""
    if learner.data == "batches":
        return SFTBatches(config)
    if config.rollout.trajectories is not None:
        path = config.rollout.trajectories
        return OfflineGroups(path, config.rollout.episodes_per_step, learner.read_recorded(path))
    return None


def _row_source(config: TrainConfig, learner: Learner, data: SFTBatches | OfflineGroups | None, serving: Serving,
                log: MetricsLogger) -> RowSource:
    """``rows(step, position) -> (rows, metrics, next position)`` for the learner's kind of data:
    batches of a file (SFT), whole groups of a file (offline GRPO), or episodes played now."""
    dist = learner.engine.dist
    if isinstance(data, SFTBatches):
        batches = data
        log.note(f"{len(batches.rows)} successful rows of {batches.total} in {config.rollout.trajectories}.")

        def batch(step: int, position: int) -> tuple[list[TrajectoryRow], dict[str, float], int]:
            return batches.rows_of_step(step), {"train_rows": float(len(batches.rows))}, position
        return batch
    if isinstance(data, OfflineGroups):
        groups = data

        def offline(step: int, position: int) -> tuple[list[TrajectoryRow], dict[str, float], int]:
            rows, after = groups.take(position)
            log.log_samples(step, rows)
            return rows, {**episode_stats(rows), "time/rollout": 0.0}, after
        return offline

    def online(step: int, position: int) -> tuple[list[TrajectoryRow], dict[str, float], int]:
        rollout = serving.rollout(step) if dist.is_main else None
        if dist.is_main and config.rollout.asynchronous and step + 1 < config.run.steps:
            serving.start(step + 1)  # plays while this step learns
        rollout = broadcast_object(rollout, dist)
        log.log_episodes(step, rollout.rows)  # every episode played, stale ones too
        log.log_samples(step, rollout.rows)
        rows, stale = drop_stale(rollout.rows, learner.version, config.rollout.max_staleness)
        return rows, {**rollout.stats, "stale_rows": float(stale), "time/rollout": rollout.seconds}, position
    return online


def _resume(learner: Learner, out: Path, config: TrainConfig) -> tuple[LoopState, Path | None]:
    resumed_from = latest_checkpoint(out) if config.run.resume else None
    if resumed_from is None:
        return LoopState(), None
    saved = load_checkpoint(learner, resumed_from)
    return LoopState(step=int(saved["step"]), warmed_up=bool(saved.get("warmed_up")),
                     data_position=int(saved.get("data_position", 0))), resumed_from


def check_run_folder(out: Path, config: TrainConfig) -> None:
    """A ConfigError when ``out`` holds a run already and ``--resume`` was not given."""
    if config.run.resume:
        return
    finished = (out / "final").exists()
    if latest_checkpoint(out) is not None or finished:
        done = f" (finished: its model is {out / 'final'})" if finished else ""
        raise ConfigError(f"{str(out)!r} already holds a training run{done}. Continue it with --resume, "
                          f"or train again into another folder, e.g. --out {out}-2.")


def _out_of_time(budget: TimeBudget, dist: Dist) -> bool:
    """Whether the run has spent its budget; rank 0's clock decides for every rank."""
    return bool(budget.seconds) and bool(broadcast_object(budget.spent(), dist))


def _warm_up(config: TrainConfig, learner: Learner, serving: Serving, state: LoopState, log: MetricsLogger) -> None:
    """The format warm-up, once per run, then the KL reference is the model RL starts from."""
    warmup = config.warmup
    wanted = ("warmup" in learner.sections and warmup.format_warmup_episodes > 0 and warmup.format_warmup_steps > 0
              and serving.online)
    if wanted and not state.warmed_up and state.step == 0:
        dist = learner.engine.dist
        rows = asyncio.run(format_warmup_rows(config, serving.renderer)) if dist.is_main else None
        rows = broadcast_object(rows, dist)
        size = min(warmup.format_warmup_batch_size, len(rows))
        lr = warmup.format_warmup_lr if warmup.format_warmup_lr is not None else config.optim.lr
        losses = []
        log.note(f"Format warm-up: {warmup.format_warmup_steps} steps on {len(rows)} episodes of the env's "
                     "random well-formed policy...")
        for step in range(warmup.format_warmup_steps):
            log.stage(f"format warm-up {step + 1}/{warmup.format_warmup_steps}")
            start = step * size % len(rows)
            batch = (rows + rows)[start:start + size]  # round and round the episodes
            losses.append(sft_update(learner.engine, batch, lr=lr)["loss"])
        log.note(f"Format warm-up done: loss {losses[0]:.3f} -> {losses[-1]:.3f}.")
    state.warmed_up = True
    _keep_reference(config, learner)


def _keep_reference(config: TrainConfig, learner: Learner) -> None:
    """The KL reference is the model RL starts from (after the warm-up): kept in memory, and in
    ``OUT/reference`` so that a resumed run compares against the same weights."""
    if not learner.needs_reference:
        return
    folder = Path(config.run.out) / "reference"
    if config.run.resume and (folder / "config.json").exists():
        learner.engine.keep_reference(folder)
        return
    learner.engine.keep_reference()
    learner.export(folder)
