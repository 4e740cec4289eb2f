"""Supervised fine-tuning on trajectories with TRL's ``SFTTrainer`` (``--trainer sft``).

Two uses:

- ``agentgym train --trainer sft --trajectories rollouts.parquet``
  (:func:`run_sft`): fine-tune on the *successful* episodes of a rollout file
  (rejection sampling, or "filtered behaviour cloning").
- the format warm-up before GRPO (:func:`format_warmup`): a few steps on
  episodes of the env's random well-formed policy, which teach a
  random-init model to write a readable action (not which one is right).

Either way the loss is on the policy's own tokens only: each row becomes
``input_ids = prompt_ids + completion_ids`` and TRL's
``completion_only_loss`` masks everything but ``completion_mask`` (so the
env's replies between turns and the prompt carry no loss).

    config = TrainConfig(trainer="sft", backend="trl", trajectories="rollouts.parquet",
                         steps=50, out="runs/sft")
    result = run_sft(config)        # result.final_model: a folder to serve or roll out
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import math
import random
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow
from agentgym.trainers.budget import TimeBudget, time_limit_callback
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.optimizers import hf_optimizer_args

__all__ = ["format_warmup", "freeze_parameters", "length_grouped_order", "load_model_and_tokenizer",
           "lr_schedule_args", "quiet_trl", "random_batch_order", "run_sft", "sft_dataset", "sft_passes",
           "sft_train", "sorted_within_batches", "trajectory_files", "without_printer"]


@contextlib.contextmanager
def quiet_trl() -> Iterator[None]:
    """TRL's trainers without their chatter: no dataset progress bars, no warnings about
    TRL's own calls of deprecated transformers APIs or its "experimental" notices.

    The run's own progress goes to agentgym's metrics logger instead.
    """
    from datasets.utils.tqdm import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    bars_were_off = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated",
                                    category=FutureWarning)
            warnings.filterwarnings("ignore", message="You are using 'rollout_func'", category=UserWarning)
            yield
    finally:
        if not bars_were_off:
            enable_progress_bars()


def without_printer(trainer: Any) -> Any:
    """``trainer`` without the callback that prints every log dict (agentgym logs the steps itself)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer


def sft_dataset(rows: Sequence[TrajectoryRow], *, only_successful: bool = False) -> Any:
    """A ``datasets.Dataset`` of ``input_ids`` and ``completion_mask`` (prompt tokens 0) from rows.

    Failed episodes (``error`` set) and rows without a sampled token are left out;
    with ``only_successful``, so is every episode that did not succeed.
    """
    from datasets import Dataset

    records = [
        {"input_ids": list(row.prompt_ids) + list(row.completion_ids),
         "completion_mask": [0] * len(row.prompt_ids) + [int(bit) for bit in row.completion_mask]}
        for row in rows
        if row.error is None and any(row.completion_mask) and (row.success or not only_successful)
    ]
    if not records:
        wanted = "successful episodes" if only_successful else "rows with sampled tokens"
        raise ConfigError(f"No {wanted} to fine-tune on among {len(rows)} rows. Roll out more "
                          "episodes (or a better policy) first.")
    return Dataset.from_list(records)


def length_grouped_order(lengths: Sequence[int], *, batch_size: int, samples: int, seed: int,
                         window: int = 50) -> list[int]:
    """The first ``samples`` row indices of batches of similar length, the batches in random order.

    Each pass over the rows is shuffled and cut into windows of ``window`` batches; a window
    is sorted by length and cut into batches of ``batch_size``, and the pass's batches are
    shuffled. So a batch pads to a length close to its shortest row's, and consecutive steps
    still see rows of every length: transformers' ``group_by_length`` sampler runs each
    window from its longest batch to its shortest, ``window`` steps of long episodes in a
    row, where the long episodes are the ones with most mistakes to recover from. A pass
    leaves out its last ``len(lengths) % batch_size`` rows (a different few each pass) so
    that every batch is full and the batches stay aligned.
    """
    if batch_size < 1 or window < 1 or samples < 0:
        raise ConfigError(f"batch_size and window must be >= 1 and samples >= 0, got {batch_size}, {window}, "
                          f"{samples}.")
    _check_fills(len(lengths), batch_size)
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < samples:
        rows = list(range(len(lengths)))
        rng.shuffle(rows)
        rows = rows[:len(rows) - len(rows) % batch_size]
        batches: list[list[int]] = []
        for start in range(0, len(rows), window * batch_size):
            chunk = sorted(rows[start:start + window * batch_size], key=lambda i: lengths[i])
            batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
        rng.shuffle(batches)
        order += [i for batch in batches for i in batch]
    return order[:samples]


def _check_fills(num_rows: int, batch_size: int) -> None:
    if num_rows < batch_size:
        raise ConfigError(f"{num_rows} rows cannot fill a batch of {batch_size}: lower micro_batch_size "
                          f"or roll out more episodes.")


def random_batch_order(num_rows: int, *, batch_size: int, samples: int, seed: int) -> list[int]:
    """The first ``samples`` row indices of batches drawn at random, each pass over the rows reshuffled.

    A pass leaves out its last ``num_rows % batch_size`` rows (a different few each pass), as
    :func:`length_grouped_order` does, so every batch is full and the batches stay aligned.
    """
    _check_fills(num_rows, batch_size)
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < samples:
        rows = list(range(num_rows))
        rng.shuffle(rows)
        order += rows[:num_rows - num_rows % batch_size]
    return order[:samples]


def sorted_within_batches(order: Sequence[int], lengths: Sequence[int], *, batch_size: int) -> list[int]:
    """``order`` with each batch of ``batch_size`` consecutive rows sorted by length, shortest first.

    The batches hold the same rows; only their order inside a batch changes, so a batch run as
    several forward passes (:func:`sft_passes`) pads each pass to the longest of its own rows.
    """
    return [i for start in range(0, len(order), batch_size)
            for i in sorted(order[start:start + batch_size], key=lambda i: lengths[i])]


def sft_passes(batch_size: int, wanted: int) -> int:
    """The forward passes a batch of ``batch_size`` rows runs as: the largest divisor of it up to ``wanted``."""
    return max(d for d in range(1, max(1, min(wanted, batch_size)) + 1) if batch_size % d == 0)


def load_model_and_tokenizer(model: str, *, dtype: str = "float32") -> tuple[Any, Any]:
    """The causal LM and tokenizer of ``model`` ('tiny', a folder or a hub id)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.models import resolve_model

    path = resolve_model(model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype), tokenizer


def freeze_parameters(model: Any, patterns: Sequence[str]) -> list[str]:
    """Stop training the parameters whose names match any of ``patterns`` (fnmatch); returns their names.

    Raises ConfigError, listing the model's parameter names, when a pattern matches none.
    """
    parameters = dict(model.named_parameters())
    frozen: dict[str, None] = {}  # ordered, each name once
    for pattern in patterns:
        matched = [name for name in parameters if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            sample = ", ".join(list(parameters)[:6])
            raise ConfigError(f"frozen_parameters: {pattern!r} names no parameter of this model. Its parameters "
                              f"are named like {sample}, ... ({len(parameters)} in all).")
        frozen.update(dict.fromkeys(matched))
    for name in frozen:
        parameters[name].requires_grad_(False)
    return list(frozen)


def lr_schedule_args(name: str, *, lr: float, warmup_steps: int, min_lr_ratio: float) -> dict[str, Any]:
    """transformers' scheduler arguments for a TrainConfig schedule: linear warm-up, then constant,
    linear or cosine down to ``min_lr_ratio * lr``, as the fsdp trainer's (both TRL trainers use it)."""
    kwargs: dict[str, Any] = {}
    if name == "cosine":
        kind, kwargs = "cosine_with_min_lr", {"min_lr_rate": min_lr_ratio}
    elif name == "linear":
        kind, kwargs = "polynomial", {"lr_end": lr * min_lr_ratio, "power": 1.0}
    else:
        kind = "constant_with_warmup"
    return {"lr_scheduler_type": kind, "lr_scheduler_kwargs": kwargs, "warmup_steps": warmup_steps}


def _sft_args(out: Path, *, steps: int, lr: float, batch_size: int, passes: int, seed: int, max_length: int,
              max_grad_norm: float, optimizer: dict[str, Any], logging: bool,
              schedule: dict[str, Any], in_order: bool) -> Any:
    from trl import SFTConfig

    # With several passes TRL divides each pass's summed loss by the whole batch's loss tokens
    # (num_items_in_batch), so the step's gradient is the batch's token mean, as in one pass.
    return SFTConfig(
        output_dir=str(out), use_cpu=not torch.cuda.is_available(), bf16=False,
        max_steps=steps, per_device_train_batch_size=batch_size // passes, gradient_accumulation_steps=passes,
        learning_rate=lr, weight_decay=0.0, **schedule, **optimizer,
        max_grad_norm=max_grad_norm or 1e9, seed=seed, data_seed=seed,
        completion_only_loss=True, max_length=max_length, logging_steps=1,
        activation_checkpointing=False,  # TRL turns it on by default: 30% slower, and small models need no memory saved
        save_strategy="no", report_to=[], disable_tqdm=not logging, dataloader_num_workers=0,
        train_sampling_strategy="sequential" if in_order else "random",
    )


def sft_train(model: Any, tokenizer: Any, dataset: Any, *, out: str | Path, steps: int, lr: float,
              batch_size: int, seed: int = 0, max_length: int = 4096, max_grad_norm: float = 1.0,
              adam_betas: tuple[float, float] = (0.9, 0.99), optimizer: str = "adamw", momentum: float = 0.0,
              logging: bool = False, optimizer_out: list[Any] | None = None, lr_schedule: str = "constant",
              warmup_steps: int = 0, min_lr_ratio: float = 0.1, group_by_length: bool = False,
              passes: int = 1, on_step: Callable[[int, dict[str, float]], None] | None = None,
              time_limit: Any = None) -> list[dict[str, float]]:
    """Fine-tune ``model`` in place for ``steps`` optimiser steps; the per-step logs (``loss``, ...).

    ``on_step(step, log)``, when given, is called as each step's log arrives (step from 0), so
    a long run shows its progress while it trains.
    ``optimizer`` (adamw with ``adam_betas``, or sgd with ``momentum``): see
    :mod:`~agentgym.trainers.optimizers`.
    ``optimizer_out``, when given, receives the optimiser used (its moments can carry on into RL).
    ``lr_schedule`` (constant, linear, cosine down to ``min_lr_ratio * lr``) after
    ``warmup_steps`` of linear warm-up: a model trained from scratch ends better on a decayed rate.
    ``group_by_length``: each batch of rows of similar length (:func:`length_grouped_order`),
    so less of every batch is padding; otherwise batches are drawn at random.
    ``passes``: each batch, sorted by length, runs as this many forward passes whose gradients
    add up (:func:`sft_passes` rounds it to a divisor of the batch): the same step, but each pass
    pads only to the longest of its own rows, far less where lengths vary.
    ``time_limit``: a :func:`~agentgym.trainers.budget.time_limit_callback` that may end the run
    before ``steps``.
    """
    from trl import SFTTrainer

    if steps < 1 or batch_size < 1 or not lr > 0:
        raise ConfigError(f"steps and batch_size must be >= 1 and lr > 0, got {steps}, {batch_size}, {lr}.")
    batch_size = min(batch_size, len(dataset))
    passes = sft_passes(batch_size, passes)
    in_order = group_by_length or passes > 1
    if in_order:  # the dataset in the planned order, read front to back: one pass is the whole run
        dataset = dataset.select(_planned_order([len(ids) for ids in dataset["input_ids"]], batch_size=batch_size,
                                                samples=steps * batch_size, seed=seed,
                                                group_by_length=group_by_length))
    args = _sft_args(Path(out), steps=steps, lr=lr, batch_size=batch_size, passes=passes, seed=seed,
                     max_length=max_length, max_grad_norm=max_grad_norm,
                     optimizer=hf_optimizer_args(optimizer, adam_betas=adam_betas, momentum=momentum),
                     logging=logging, in_order=in_order,
                     schedule=lr_schedule_args(lr_schedule, lr=lr, warmup_steps=warmup_steps,
                                               min_lr_ratio=min_lr_ratio))
    with quiet_trl():
        trainer = without_printer(SFTTrainer(model=model, args=args, train_dataset=dataset,
                                             processing_class=tokenizer))
        if on_step is not None:
            trainer.add_callback(_step_logs_callback(on_step))
        if time_limit is not None:
            trainer.add_callback(time_limit)
        trainer.train()
    model.eval()
    if optimizer_out is not None:
        optimizer_out.append(getattr(trainer.optimizer, "optimizer", trainer.optimizer))  # unwrap accelerate's
    return [_numbers(record) for record in trainer.state.log_history if "loss" in record]


def _planned_order(lengths: Sequence[int], *, batch_size: int, samples: int, seed: int,
                   group_by_length: bool) -> list[int]:
    if group_by_length:
        order = length_grouped_order(lengths, batch_size=batch_size, samples=samples, seed=seed)
    else:
        order = random_batch_order(len(lengths), batch_size=batch_size, samples=samples, seed=seed)
    return sorted_within_batches(order, lengths, batch_size=batch_size)


def _numbers(record: dict[str, Any]) -> dict[str, float]:
    return {key: float(value) for key, value in record.items() if isinstance(value, (int, float))}


def _step_logs_callback(on_step: Callable[[int, dict[str, float]], None]) -> Any:
    """A transformers callback handing each step's log (``loss``, ...) to ``on_step``."""
    from transformers import TrainerCallback

    class StepLogs(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kwargs: Any) -> None:
            if logs and "loss" in logs:
                on_step(state.global_step - 1, _numbers(logs))

    return StepLogs()


def format_warmup(model: Any, tokenizer: Any, config: TrainConfig,
                  optimizer_out: list[Any] | None = None) -> dict[str, float]:
    """The format warm-up of ``config`` (``format_warmup_*`` fields), done with TRL on ``model``.

    Plays ``format_warmup_episodes`` episodes of the env's random well-formed
    policy (the same rows the fsdp backend uses, from
    :func:`agentgym.trainers.rollouts.format_warmup_rows`) and takes
    ``format_warmup_steps`` optimiser steps of ``format_warmup_batch_size`` of them. Returns
    ``{"loss_first", "loss_last", "episodes", "seconds"}``; empty when off.
    ``optimizer_out`` receives its AdamW: GRPO should go on with it (a fresh
    Adam's first steps move every weight by about ``lr``, which undoes the
    format on a tiny model; the warm-up's moments damp them).
    """
    from agentgym.rollout.chat import ChatRenderer
    from agentgym.trainers.rollouts import format_warmup_rows

    if config.format_warmup_episodes == 0 or config.format_warmup_steps == 0 or config.env_id is None:
        return {}
    started = time.perf_counter()
    rows = asyncio.run(format_warmup_rows(config, ChatRenderer(tokenizer)))
    dataset = sft_dataset(rows)
    logs = sft_train(model, tokenizer, dataset, out=Path(config.out) / "format_warmup",
                     steps=config.format_warmup_steps, lr=config.format_warmup_lr or config.lr,
                     batch_size=config.format_warmup_batch_size, seed=config.seed, max_length=config.max_context_tokens,
                     max_grad_norm=config.max_grad_norm, adam_betas=config.adam_betas,
                     optimizer=config.optimizer, momentum=config.momentum, optimizer_out=optimizer_out)
    losses = [log["loss"] for log in logs] or [math.nan]
    return {"loss_first": losses[0], "loss_last": losses[-1], "episodes": float(len(rows)),
            "seconds": time.perf_counter() - started}


def trajectory_files(spec: str) -> list[Path]:
    """The rollout files of ``--trajectories``: one path or several, comma-separated
    (demonstrations and DAgger rows, say; a file named twice counts twice, to weight it)."""
    paths = [Path(part.strip()) for part in spec.split(",") if part.strip()]
    if not paths:
        raise ConfigError(f"--trajectories {spec!r} names no file.")
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        raise ConfigError(f"--trajectories: no such file: {', '.join(missing)}.")
    return paths


def run_sft(config: TrainConfig, *, console: Any = None) -> Any:
    """``--trainer sft``: fine-tune ``config.model`` on the successful episodes of ``config.trajectories``.

    ``steps`` optimiser steps of ``micro_batch_size`` sequences at ``lr``; the
    per-step loss goes to ``metrics.jsonl`` (and the console), the model to
    ``<out>/final``. Returns a :class:`~agentgym.trainers.loop.TrainResult`.
    """
    from agentgym.rollout.storage import read_rows
    from agentgym.trainers.loop import TrainResult
    from agentgym.trainers.metrics import MetricsLogger

    budget = TimeBudget(config.max_seconds)
    if config.trajectories is None:
        raise ConfigError("--trainer sft learns from a rollout file: pass --trajectories FILE "
                          "(make one with `agentgym rollout --env ENV --out FILE`, e.g. --policy solver "
                          "for demonstrations).")
    out = Path(config.out)
    paths = trajectory_files(config.trajectories)
    loaded = {path: read_rows(path) for path in dict.fromkeys(paths)}  # a file named twice is read once
    rows = [row for path in paths for row in loaded[path]]
    dataset = sft_dataset(rows, only_successful=True)
    model, tokenizer = load_model_and_tokenizer(config.model, dtype=config.dtype)
    config.save_yaml(out / "config.yaml")
    result = TrainResult(out=out)
    time_limit = time_limit_callback(budget)
    with MetricsLogger(out, config, console=console) as log:
        log.note(f"SFT on {len(dataset)} successful rows of {len(rows)} in {config.trajectories}.")

        def log_step(step: int, record: dict[str, float]) -> None:
            metrics = {"loss": record["loss"], "train_rows": float(len(dataset))}
            if "mean_token_accuracy" in record:
                metrics["token_accuracy"] = record["mean_token_accuracy"]
            log.log(step, metrics)
            result.metrics.append(metrics)

        sft_train(model, tokenizer, dataset, out=out / "sft", steps=config.steps, lr=config.lr,
                  batch_size=config.micro_batch_size, seed=config.seed,
                  max_length=config.max_context_tokens, max_grad_norm=config.max_grad_norm,
                  adam_betas=config.adam_betas, optimizer=config.optimizer, momentum=config.momentum,
                  lr_schedule=config.lr_schedule,
                  warmup_steps=config.warmup_steps, min_lr_ratio=config.min_lr_ratio,
                  group_by_length=config.group_by_length, passes=config.sft_passes, on_step=log_step,
                  time_limit=time_limit)
        if time_limit.stopped_at is not None:
            log.note(budget.note(time_limit.stopped_at, config.steps))
    final = out / "final"
    model.save_pretrained(final)
    tokenizer.save_pretrained(final)
    result.final_model = final
    return result
