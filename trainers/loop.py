"""The online loop of the fsdp backend: rollout -> rows -> optimiser step(s) -> weight sync -> log -> checkpoint.

    config = TrainConfig(env_id="Bandit-LLM-v0", model="tiny", steps=40, out="runs/bandit")
    result = run_training(config)            # or: agentgym train --env Bandit-LLM-v0 --steps 40

With no ``base_url`` it starts the built-in server on the model and pushes
the weights into it after every step; with ``base_url`` it trains against
that server (``engine`` says how to push weights to it). With
``trajectories`` it trains offline on a Parquet file's rows, whole groups at
a time, wrapping around the file, with no server at all.

Under ``torchrun`` rank 0 plays the episodes, serves and logs; every rank
gets the rows and trains on its share. Resuming (``resume``) restores the
trainer, the RNG and the loop's position from the newest checkpoint; since
every step's seeds derive from the step number, the resumed run plays and
learns what the uninterrupted one would have.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from rich.console import Console

from agentgym.errors import ConfigError
from agentgym.trainers.budget import TimeBudget
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.fsdp import FSDPTrainer, init_distributed
from agentgym.trainers.fsdp.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from agentgym.trainers.fsdp.distributed import Dist, broadcast_object
from agentgym.trainers.metrics import MetricsLogger
from agentgym.trainers.rollouts import (
    OfflineGroups,
    StepRollout,
    drop_stale,
    episode_stats,
    format_warmup_rows,
    play_step,
)

__all__ = ["LoopState", "TrainResult", "open_weight_sync", "run_training"]


@dataclass
class LoopState:
    """What the loop must remember across a resume (beside the trainer's own state)."""

    step: int = 0
    """the next step to run"""
    warmed_up: bool = False
    data_position: int = 0
    """offline: index of the next group of the trajectories file"""

    def to_dict(self) -> dict[str, Any]:
        return {"warmed_up": self.warmed_up, "data_position": self.data_position}


@dataclass
class TrainResult:
    """What a run left behind."""

    out: Path
    metrics: list[dict[str, float]] = field(default_factory=list)
    final_model: Path | None = None
    stopped_early: bool = False


def run_training(config: TrainConfig, *, console: Console | None = None, stop_after: int | None = None,
                 device: str = "auto") -> TrainResult:
    """Train as ``config`` says; returns the metrics of the steps run here.

    ``stop_after``: stop (with a checkpoint) once this many steps are done,
    as an interrupted run would.
    """
    budget = TimeBudget(config.max_seconds)
    out = Path(config.out)
    dist = init_distributed(device)
    _check_out(out, config)
    trainer = FSDPTrainer(config, dist=dist)
    state = LoopState()
    resumed_from = latest_checkpoint(out) if config.resume else None
    if resumed_from is not None:
        saved = load_checkpoint(trainer, resumed_from)
        state = LoopState(step=int(saved["step"]), warmed_up=bool(saved.get("warmed_up")),
                          data_position=int(saved.get("data_position", 0)))
    if dist.is_main:
        config.save_yaml(out / "config.yaml")
    result = TrainResult(out=out)
    with (MetricsLogger(out, config, start_step=state.step, enabled=dist.is_main, console=console) as log,
          _Serving(config, trainer) as serving):
        if resumed_from is not None:
            log.note(f"Resumed from {resumed_from} (step {state.step}).")
        elif config.resume:
            log.note(f"No checkpoint in {out}: starting from step 0.")
        _warm_up(config, trainer, serving, state, log)
        serving.push(trainer)  # the server starts from the trainer's weights (warm-up, checkpoint)
        offline = OfflineGroups(config.trajectories, config.episodes_per_step) if config.trajectories else None
        settled = trainer.optimizer_steps  # the trainer as it was after the last whole step
        try:
            for step in range(state.step, config.steps):
                metrics = _one_step(config, trainer, serving, offline, state, step, log)
                result.metrics.append(metrics)
                state.step, settled = step + 1, trainer.optimizer_steps
                stopping = stop_after is not None and state.step >= stop_after
                out_of_time = state.step < config.steps and _out_of_time(budget, trainer.dist)
                if (state.step % config.checkpoint_every == 0 or state.step == config.steps or stopping
                        or out_of_time):
                    save_checkpoint(trainer, out, state.step, state.to_dict(), keep=config.keep_checkpoints)
                if stopping and state.step < config.steps:
                    result.stopped_early = True
                    return result
                if out_of_time:
                    log.note(budget.note(state.step, config.steps))
                    break
        except KeyboardInterrupt:
            # A step cut in the middle of its updates would resume from a mix of two steps.
            if trainer.optimizer_steps == settled and state.step > 0:
                log.note(f"Interrupted: saving a checkpoint at step {state.step}; continue with --resume.")
                save_checkpoint(trainer, out, state.step, state.to_dict(), keep=config.keep_checkpoints)
            raise
    result.final_model = trainer.save_pretrained(out / "final")
    return result


def _out_of_time(budget: TimeBudget, dist: Dist) -> bool:
    """Whether the run has spent its budget; rank 0's clock decides for every rank."""
    return bool(budget.seconds) and bool(broadcast_object(budget.spent(), dist))


def _check_out(out: Path, config: TrainConfig) -> None:
    if not config.resume and latest_checkpoint(out) is not None:
        raise ConfigError(f"{str(out)!r} already holds a training run. Continue it with --resume, "
                          "or choose another --out.")


def _warm_up(config: TrainConfig, trainer: FSDPTrainer, serving: _Serving, state: LoopState,
             log: MetricsLogger) -> None:
    """The format warm-up (once per run; a resumed run already has it in its weights)."""
    if state.warmed_up or state.step > 0 or config.format_warmup_episodes == 0 or config.trajectories:
        state.warmed_up = True
        return
    rows = asyncio.run(format_warmup_rows(config, serving.renderer)) if trainer.dist.is_main else None
    rows = broadcast_object(rows, trainer.dist)
    metrics: dict[str, float] = {}
    size = min(config.format_warmup_batch_size, len(rows))
    for step in range(config.format_warmup_steps):
        start = step * size % len(rows)
        batch = (rows + rows)[start:start + size]  # round and round the episodes
        metrics = trainer.sft_step(batch, lr=config.format_warmup_lr)
    log.note(f"Format warm-up: {config.format_warmup_steps} steps on {len(rows)} episodes of the env's "
             f"random well-formed policy (last loss {metrics.get('loss', float('nan')):.3f}).")
    state.warmed_up = True


def _one_step(config: TrainConfig, trainer: FSDPTrainer, serving: _Serving, offline: OfflineGroups | None,
              state: LoopState, step: int, log: MetricsLogger) -> dict[str, float]:
    started = time.perf_counter()
    metrics: dict[str, float] = {}
    position = state.data_position
    if offline is not None:
        rows, position = offline.take(state.data_position)
        metrics.update(episode_stats(rows))
        rollout_seconds = 0.0
    else:
        rollout = serving.rollout(step) if trainer.dist.is_main else None
        rollout = broadcast_object(rollout, trainer.dist)
        rows, rollout_seconds = rollout.rows, rollout.seconds
        metrics.update(rollout.stats)
        log.log_episodes(step, rows)  # every episode played, stale ones too
        if config.sync_weights:
            rows, stale = drop_stale(rows, trainer.version, config.max_staleness)
            metrics["stale_rows"] = float(stale)
    log.log_samples(step, rows)
    train_started = time.perf_counter()
    metrics.update(trainer.train_step(rows))
    train_seconds = time.perf_counter() - train_started
    sync_seconds = serving.push(trainer)
    metrics.update({"time/rollout": rollout_seconds, "time/train": train_seconds, "time/sync": sync_seconds,
                    "time/step": time.perf_counter() - started, "policy_version": float(trainer.version)})
    log.log(step, metrics)
    state.data_position = position  # only once the step is whole
    return metrics


class _Serving:
    """The server the episodes are played against (rank 0): started here or given, and the weight sync."""

    def __init__(self, config: TrainConfig, trainer: FSDPTrainer) -> None:
        self.config = config
        self.main = trainer.dist.is_main
        self.model_path = trainer.model_path
        self.tokenizer = trainer.tokenizer
        self.renderer: Any = None
        self._stack = contextlib.ExitStack()
        self.base_url = config.base_url
        self.model_name = config.model
        self._sync: Any = None

    def __enter__(self) -> Self:
        if not self.main or self.config.trajectories is not None:
            return self  # offline: no server, no episodes, no warm-up
        from agentgym.rollout.chat import ChatRenderer

        self.renderer = ChatRenderer(self.tokenizer)  # the trainer's, not loaded again
        if self.base_url is None:
            from agentgym.serve.launch import BuiltinServer

            server = self._stack.enter_context(BuiltinServer(self.model_path, served_model_name=self.config.model))
            self.base_url, self.model_name = server.base_url, server.model_name
        if self.config.sync_weights:
            self._sync = self._stack.enter_context(open_weight_sync(self.config, self.base_url, self.model_name))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def rollout(self, step: int) -> StepRollout:
        return asyncio.run(play_step(self.config, step, self.base_url, self.model_name, self.renderer))

    def push(self, trainer: FSDPTrainer) -> float:
        """Send the trainer's weights to the server; seconds taken (0 when there is nothing to sync)."""
        if not self.config.sync_weights or self.config.trajectories is not None:
            return 0.0
        started = time.perf_counter()
        weights = trainer.full_weights()  # a collective: every rank takes part
        if self._sync is not None:
            self._sync.push(weights, version=trainer.version)
        return time.perf_counter() - started


@contextlib.contextmanager
def open_weight_sync(config: TrainConfig, base_url: str, model_name: str, *,
                     adapter: bool = False) -> Iterator[Any]:
    """The weight sync for this server, from a folder: full weights (a LoRA run's merged in), or
    with ``adapter`` the LoRA adapter itself (the trl backend). Both backends sync through here."""
    from agentgym.trainers.sync import make_weight_sync

    method = "lora" if adapter else ("vllm" if config.engine == "vllm" else "builtin")
    api_key = config.api_key if config.base_url is not None else None  # the key is for a given server
    sync = make_weight_sync(method, base_url, model_name=model_name, api_key=api_key,
                            folder=Path(config.out) / "sync")
    try:
        yield sync
    finally:
        sync.close()
