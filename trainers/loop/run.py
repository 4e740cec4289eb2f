"""The run skeleton: every trainer, every backend, one loop you can read top to bottom.

    config = TrainConfig.from_dict({"env_id": "Bandit-LLM-v0", "steps": 40, "out": "runs/bandit"})
    result = train(config)                  # or: agentgym train --env Bandit-LLM-v0 --steps 40

    for step in steps:
        rows    = rows_of(step)             # played now (or, asynchronous, while earlier steps learned), or read
        metrics = learner.train_step(rows)  # the trainer's own piece (grpo, sft, ...)
        learner.finish_step(trained)        # the schedule moves on; the policy version, if it learned
        push(learner) -> server             # the built-in server's endpoint, or vLLM's reload
        log, checkpoint, budget
    learner.export(final/)

The skeleton owns the run folder and its checks, the saved settings, resume, the time
budget, metrics (console, metrics.jsonl, TensorBoard, W&B), the built-in server and the
weight push, the format warm-up, checkpoints and the final export. A trainer is a
:class:`~agentgym.trainers.learners.base.Learner`. Under torchrun rank 0 plays, serves and logs;
every rank gets the rows and trains on its share. Every step's seeds derive from the
step number, so a resumed run plays and learns what the uninterrupted one would have.

A step that takes no update (every group filtered, no pair) says so and pushes nothing; after
``run.max_idle_steps`` of them in a row the run stops with an error that says why, since more
steps would learn nothing either.

With ``rollout.asynchronous`` the next steps' episodes (up to ``max_staleness`` ahead) start as
soon as this step's rows are taken, so playing overlaps learning; the weight push reaches the
server between turns of the episodes in flight. Each token keeps the version that sampled it
through its logprobs (the importance correction compares against them); a row's
``policy_version`` is its newest turn's (or, for a server that does not say, the version pushed
before its request), and rows more than ``max_staleness`` versions old are dropped. A run
resumed from a checkpoint taken while a step was being played plays that step again, with
the checkpoint's weights.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from agentgym.errors import ConfigError, TrainingStalledError
from agentgym.trainers.engines.distributed import Dist, broadcast_object, init_distributed
from agentgym.trainers.learners.base import Learner
from agentgym.trainers.learners.sft import sft_update
from agentgym.trainers.loop.budget import TimeBudget
from agentgym.trainers.loop.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from agentgym.trainers.loop.metrics import METRICS_FILE, MetricsLogger, read_jsonl
from agentgym.trainers.loop.rollouts import format_warmup_rows
from agentgym.trainers.loop.serving import Serving
from agentgym.trainers.loop.sources import OfflineGroups, SFTBatches, row_source, trajectory_files

__all__ = ["LoopState", "TrainResult", "check_run_folder", "train"]


@dataclass
class LoopState:
    """What the loop must remember across a resume (beside the learner's own state)."""

    step: int = 0
    """the next step to run"""
    warmed_up: bool = False
    data_position: int = 0
    """offline: index of the next group of the trajectories file"""
    idle_steps: int = 0
    """steps in a row, up to the last one, that took no update"""

    def to_dict(self) -> dict[str, Any]:
        return {"warmed_up": self.warmed_up, "data_position": self.data_position, "idle_steps": self.idle_steps}


@dataclass
class TrainResult:
    """What a run left behind."""

    out: Path
    metrics: list[dict[str, float]] = field(default_factory=list)
    """the metrics of the steps run by this call"""
    earlier: list[dict[str, Any]] = field(default_factory=list)
    """a resumed run's records of the steps before the resume (metrics.jsonl's, each with its ``step``),
    so that a summary of the whole run starts at its first step; empty otherwise (and off rank 0)"""
    final_model: Path | None = None
    stopped_early: bool = False


def train(config: Any, *, console: Console | None = None, stop_after: int | None = None,
          device: str = "auto") -> TrainResult:
    """Run ``config``'s trainer; returns the metrics of the steps run here.

    ``stop_after``: stop (with a checkpoint) once this many steps are done, as an interrupted run would.
    """
    from agentgym.trainers.registry import build_learner, check_settings

    check_settings(config)  # every name and setting, before anything is loaded, started or written
    budget = TimeBudget(config.run.max_seconds)
    out = Path(config.run.out)
    check_run_folder(out, config)
    if config.rollout.trajectories is not None:
        trajectory_files(config.rollout.trajectories)  # a missing file fails before anything is loaded or written
    dist = init_distributed(device)
    learner = build_learner(config, dist)
    data = _recorded_rows(config, learner)
    state, resumed_from = _resume(learner, out, config)
    if dist.is_main:
        config.save_yaml(out / "config.yaml")
    result = TrainResult(out=out)
    engine = learner.engine
    log = MetricsLogger(out, config, start_step=state.step, enabled=dist.is_main, console=console)
    if dist.is_main and state.step > 0:
        result.earlier = read_jsonl(out / METRICS_FILE)  # kept by the logger: the steps before state.step
    if config.run.resume:
        log.note(_resume_note(out, resumed_from, state, config))
    if config.rollout.trajectories is None and config.server.base_url is None:
        log.stage("starting the server")
    with log, Serving(config, engine.tokenizer, engine.model_path, main=dist.is_main) as serving:
        _warm_up(config, learner, serving, state, log)
        serving.push(learner)  # the server starts from the learner's weights (warm-up, checkpoint)
        log.stage("train")
        rows_of = row_source(config, learner, data, serving, log)
        settled = engine.optimizer_steps  # the learner as it was after the last whole step
        try:
            for step in range(state.step, config.run.steps):
                started = time.perf_counter()
                rows, metrics, position = rows_of(step, state.data_position)
                train_started = time.perf_counter()
                metrics.update(learner.train_step(rows))
                metrics["time/train"] = time.perf_counter() - train_started
                trained = metrics.get("updates", 0.0) > 0
                learner.finish_step(trained=trained)
                if trained and serving.pushes:
                    metrics["time/sync"] = serving.push(learner)
                state.idle_steps = 0 if trained else state.idle_steps + 1
                metrics.update({"time/step": time.perf_counter() - started, "policy_version": float(learner.version)})
                log.log(step, metrics)
                if not trained:
                    log.note(f"Step {step + 1} learned nothing: {learner.idle_reason(metrics)}.")
                result.metrics.append(metrics)
                state.step, state.data_position, settled = step + 1, position, engine.optimizer_steps
                stopping = stop_after is not None and state.step >= stop_after
                out_of_time = state.step < config.run.steps and _out_of_time(budget, dist)
                stalled = 0 < config.run.max_idle_steps <= state.idle_steps
                if (state.step % config.run.checkpoint_every == 0 or state.step == config.run.steps or stopping
                        or out_of_time or stalled):
                    save_checkpoint(learner, out, state.step, state.to_dict(), keep=config.run.keep_checkpoints)
                if stalled:
                    raise TrainingStalledError(_stalled(config, learner, metrics))
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


def _resume_note(out: Path, resumed_from: Path | None, state: LoopState, config: Any) -> str:
    """Where ``--resume`` takes the run up, in the console's step numbers (from 1)."""
    steps = config.run.steps
    if resumed_from is None:  # stopped before its first checkpoint (or never started)
        first = min(config.run.checkpoint_every, steps)
        return (f"--resume: {out} holds no checkpoint yet (the first is saved after step {first}, or when Ctrl-C "
                "stops a run between steps): starting from step 1.")
    if state.step >= steps:
        return f"Resumed from {resumed_from}: all {steps} steps were done; writing the final model."
    return f"Resumed from {resumed_from} after step {state.step}: continuing from step {state.step + 1} of {steps}."


def _stalled(config: Any, learner: Learner, metrics: dict[str, float]) -> str:
    return (f"{config.run.max_idle_steps} steps in a row learned nothing (the last: "
            f"{learner.idle_reason(metrics)}), so the weights never moved. Make the task reachable (an easier env "
            "setting, SFT or the format warm-up first, a larger group_size), or raise -s max_idle_steps "
            "(0: never stop).")


def _recorded_rows(config: Any, learner: Learner) -> SFTBatches | OfflineGroups | None:
    """The rows of the rollout files, read before the run folder is written (a file without usable
    rows leaves nothing behind): batches (SFT) or whole groups (offline); None when playing.
    Rows of another tokenizer than the model's are refused first."""
    from agentgym.rollout.tokenizers import check_rollout_file

    if config.rollout.trajectories is not None:
        for path in dict.fromkeys(trajectory_files(config.rollout.trajectories)):
            check_rollout_file(path, learner.engine.tokenizer, model=config.model.model)
    if learner.data == "batches":
        return SFTBatches(config)
    if config.rollout.trajectories is not None:
        path = config.rollout.trajectories
        return OfflineGroups(path, config.rollout.episodes_per_step, learner.read_recorded(path))
    return None


def _resume(learner: Learner, out: Path, config: Any) -> tuple[LoopState, Path | None]:
    resumed_from = latest_checkpoint(out) if config.run.resume else None
    if resumed_from is None:
        return LoopState(), None
    saved = load_checkpoint(learner, resumed_from)
    return LoopState(step=int(saved["step"]), warmed_up=bool(saved.get("warmed_up")),
                     data_position=int(saved.get("data_position", 0)),
                     idle_steps=int(saved.get("idle_steps", 0))), resumed_from


def check_run_folder(out: Path, config: Any) -> None:
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


def _warm_up(config: Any, learner: Learner, serving: Serving, state: LoopState, log: MetricsLogger) -> None:
    """The format warm-up, once per run, then the reference is the model RL starts from."""
    warmup = config.warmup
    episodes = warmup.episodes_for(config.model.model)
    wanted = episodes > 0 and warmup.format_warmup_steps > 0 and serving.online
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
        log.log_warmup(losses)
        log.note(f"Format warm-up done: loss {losses[0]:.3f} -> {losses[-1]:.3f}.")
    state.warmed_up = True
    _keep_reference(config, learner)


def _keep_reference(config: Any, learner: Learner) -> None:
    """The reference is the model RL starts from (after the warm-up): written to ``OUT/reference`` and
    loaded from there, so a resumed run compares against the same weights and no trainer's model (a
    sharded one, or one accelerate wrapped) is ever copied in memory."""
    if not learner.needs_reference:
        return
    folder = Path(config.run.out) / "reference"
    if not (config.run.resume and (folder / "config.json").exists()):
        learner.engine.export(folder)
    broadcast_object(None, learner.engine.dist)  # rank 0 has written it before any rank reads it
    learner.engine.keep_reference(folder)
