"""The trl backend: TRL's ``GRPOTrainer`` fed by agentgym's multi-turn env manager.

    config = TrainConfig(env_id="Bandit-LLM-v0", backend="trl", steps=40, out="runs/bandit-trl")
    result = run_trl(config)             # or: agentgym train --backend trl --env Bandit-LLM-v0

How TRL is driven (one training step = one TRL generation batch):

- ``rollout_func`` (:class:`EnvRollout`): TRL hands it one placeholder prompt
  per episode (already repeated ``group_size`` times); it plays the step's
  ``episodes_per_step`` episodes against the server with
  :class:`~agentgym.rollout.manager.EnvManager` and returns one sequence per
  episode: ``prompt_ids``, ``completion_ids`` (the policy's turns and the
  env's replies between them), ``logprobs`` (the server's), ``env_mask``
  (= ``completion_mask``: only sampled tokens carry loss) and ``env_reward``,
  which the reward function :func:`episode_reward` reads back.
- Advantages: :func:`agentgym.trainers.batch.token_advantages` (the shared
  ``group_advantages``, and GiGPO's turn-level term when
  ``turn_advantage_weight`` is set), as in the fsdp backend, replace TRL's,
  one per completion token; groups with nothing to teach are masked out with
  ``filter_zero_variance``.
- Loss: :func:`agentgym.trainers.algorithms.policy_loss` (clip, importance
  correction against the server's logprobs, k3 KL) replaces TRL's
  ``_compute_loss``. TRL does the rest: logprobs, old and reference logprobs,
  micro-batches and accumulation, the optimiser, the schedule, checkpoints.
- Weight sync (:class:`SyncCallback`, a ``TrainerCallback``): after the last
  optimiser step of each training step (every step with the defaults), so
  the next rollout samples from the new weights.
- Offline (``--trajectories FILE``, :class:`OfflineRollout`): the step's
  whole groups of the file instead of a rollout, the same steps the fsdp
  backend trains on; no server, no sync, no warm-up.

Departures: one process only (TRL splits a generation batch across processes
and a GRPO group would straddle them: use the fsdp backend on several GPUs).
An episode the manager had to split into several rows (the server changed the
prompt) trains on its first row only (``dropped_rows`` in the metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from agentgym.errors import ConfigError
from agentgym.rollout.rows import TrajectoryRow, first_rows
from agentgym.trainers.algorithms import LOSS_METRICS, masked_mean, policy_loss
from agentgym.trainers.batch import has_rollout_logprobs, token_advantages
from agentgym.trainers.budget import TimeBudget, time_limit_callback
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.optimizers import hf_optimizer_args
from agentgym.trainers.rollouts import OfflineGroups, episode_stats, play_step
from agentgym.trainers.sft import lr_schedule_args, quiet_trl, without_printer

__all__ = [
    "AgentGymGRPOTrainer",
    "EnvRollout",
    "FixedRollout",
    "OfflineRollout",
    "SyncCallback",
    "episode_reward",
    "grpo_args",
    "run_trl",
    "trl_train_on_rows",
]

def grpo_args(config: TrainConfig, output_dir: str | Path) -> GRPOConfig:
    """TRL's ``GRPOConfig`` for ``config``: one generation batch per training step.

    ``episodes_per_step`` splits into ``mini_batches`` optimiser steps of
    ``micro_batch_size``-sequence micro-batches (gradients accumulate), each
    generation reused for ``epochs`` passes.
    """
    per_mini, rest = divmod(config.episodes_per_step, config.mini_batches)
    micro = min(config.micro_batch_size, per_mini)
    if rest or per_mini % micro:
        raise ConfigError(
            f"The trl backend needs episodes_per_step ({config.episodes_per_step}) to split into "
            f"mini_batches ({config.mini_batches}) of whole micro-batches of micro_batch_size "
            f"({config.micro_batch_size}); e.g. --micro-batch-size {_divisor(per_mini, micro)}.")
    accumulation = per_mini // micro
    optimizer_steps = config.updates_per_step
    schedule = lr_schedule_args(config.lr_schedule, lr=config.lr, warmup_steps=config.warmup_steps,
                                min_lr_ratio=config.min_lr_ratio)
    cuda = torch.cuda.is_available()
    return GRPOConfig(
        output_dir=str(output_dir), use_cpu=not cuda, bf16=cuda and config.dtype == "bfloat16",
        max_steps=config.steps * optimizer_steps, per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulation, steps_per_generation=accumulation * config.mini_batches,
        num_generations=config.group_size, num_iterations=config.epochs,
        learning_rate=config.lr, weight_decay=config.weight_decay, **schedule, max_grad_norm=config.max_grad_norm,
        beta=config.kl_coef, epsilon=config.clip_low, epsilon_high=config.clip_high,
        temperature=max(config.temperature, 1e-5), max_completion_length=config.max_context_tokens,
        activation_checkpointing=config.gradient_checkpointing,  # TRL defaults it to on
        logging_steps=1, save_strategy="steps", save_steps=config.checkpoint_every * optimizer_steps,
        save_total_limit=config.keep_checkpoints, seed=config.seed, data_seed=config.seed,
        report_to=[], disable_tqdm=True, log_completions=False, dataloader_num_workers=0,
        **hf_optimizer_args(config.optimizer, adam_betas=config.adam_betas, momentum=config.momentum),
    )


def _divisor(total: int, at_most: int) -> int:
    return max(d for d in range(1, at_most + 1) if total % d == 0)


def episode_reward(prompts: Sequence[Any], completions: Sequence[Any], env_reward: Sequence[float],
                   **columns: Any) -> list[float]:
    """TRL reward function: the episode's total env reward, as the rollout recorded it.

    TRL calls every reward function with all the batch's columns (and its own
    extras: ``trainer_state``, ``log_metric``, ...); only ``env_reward`` matters here.
    """
    del prompts, completions, columns
    return [float(reward) for reward in env_reward]


def _trl_sample(row: TrajectoryRow, eos: int) -> tuple[list[int], list[int], list[float], list[int]]:
    """prompt_ids, completion_ids, logprobs, env_mask; a failed episode gets one masked token."""
    if not row.completion_ids:
        return list(row.prompt_ids) or [eos], [eos], [0.0], [0]
    logprobs = [float(x) for x in row.logprobs] or [0.0] * len(row.completion_ids)
    return list(row.prompt_ids) or [eos], list(row.completion_ids), logprobs, [int(m) for m in row.completion_mask]


class _RolloutBase:
    """What the trainer reads from a rollout: the last step's rows and what it cost."""

    def __init__(self) -> None:
        self.rows: list[TrajectoryRow] = []
        self.stats: dict[str, float] = {}
        self.seconds = 0.0
        self.dropped_rows = 0

    def _output(self, rows: Sequence[TrajectoryRow], eos: int) -> dict[str, list[Any]]:
        episodes = first_rows(rows)  # the manager keeps groups contiguous
        self.dropped_rows = len(rows) - len(episodes)
        self.rows = episodes
        samples = [_trl_sample(row, eos) for row in episodes]
        return {
            "prompt_ids": [s[0] for s in samples], "completion_ids": [s[1] for s in samples],
            "logprobs": [s[2] for s in samples], "env_mask": [s[3] for s in samples],
            "env_reward": [row.reward for row in episodes], "success": [row.success for row in episodes],
        }


class EnvRollout(_RolloutBase):
    """TRL's ``rollout_func``: the step's episodes, played against the server.

    ``model_name`` is what requests name; :class:`SyncCallback` changes it
    when a LoRA sync serves a new adapter.
    """

    def __init__(self, config: TrainConfig, renderer: Any, *, base_url: str, model_name: str,
                 on_rows: Any = None) -> None:
        super().__init__()
        self.config = config
        self.renderer = renderer
        self.base_url = base_url
        self.model_name = model_name
        self.on_rows = on_rows
        self.optimizer_steps = config.updates_per_step

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        if len(prompts) != self.config.episodes_per_step:
            raise ConfigError(f"TRL asked for {len(prompts)} episodes, the config for "
                              f"{self.config.episodes_per_step}: the trl backend runs in one process only.")
        step = trainer.state.global_step // self.optimizer_steps
        rollout = asyncio.run(play_step(self.config, step, self.base_url, self.model_name, self.renderer))
        self.stats, self.seconds = dict(rollout.stats), rollout.seconds
        if self.on_rows is not None:
            self.on_rows(step, rollout.rows)
        return self._output(rollout.rows, self.renderer.eos_id)


class FixedRollout(_RolloutBase):
    """A ``rollout_func`` that returns the same rows every time (benchmarks, offline tests)."""

    def __init__(self, rows: Sequence[TrajectoryRow], eos: int) -> None:
        super().__init__()
        self._rows = list(rows)
        self.eos = eos

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        del trainer
        output = self._output(self._rows, self.eos)
        if len(self.rows) != len(prompts):
            raise ConfigError(f"FixedRollout holds {len(self.rows)} episodes; TRL asked for {len(prompts)} "
                              "(episodes_per_step).")
        return output


class OfflineRollout(_RolloutBase):
    """TRL's ``rollout_func`` for ``--trajectories FILE``: each step's whole groups of the file, no server.

    Step ``k`` gets the groups the fsdp backend's step ``k`` trains on
    (:class:`~agentgym.trainers.rollouts.OfflineGroups`), found from TRL's
    step counter, so a resumed run reads on where the stopped one was.
    """

    def __init__(self, groups: OfflineGroups, eos: int, *, optimizer_steps: int, on_rows: Any = None) -> None:
        super().__init__()
        self.groups = groups
        self.eos = eos
        self.optimizer_steps = optimizer_steps
        self.on_rows = on_rows

    def step_output(self, step: int, episodes: int) -> dict[str, list[Any]]:
        """TRL's batch for training step ``step``; ``episodes``: how many TRL expects."""
        rows = self.groups.rows_of_step(step)
        output = self._output(rows, self.eos)
        if len(self.rows) != episodes:
            raise ConfigError(
                f"Step {step} of {self.groups.path!r} is {len(self.rows)} episodes (whole groups), but the trl "
                f"backend trains on exactly episodes_per_step ({episodes}) a step. Set --episodes-per-step to a "
                "multiple of the file's group size, or use --backend fsdp.")
        self.stats, self.seconds = episode_stats(rows), 0.0
        if self.on_rows is not None:
            self.on_rows(step, rows)
        return output

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        return self.step_output(trainer.state.global_step // self.optimizer_steps, len(prompts))


class AgentGymGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with agentgym's advantages and loss (see the module's docstring).

    The two overrides are :meth:`compute_advantages` and :meth:`_compute_loss`;
    everything else is TRL's.
    """

    def __init__(self, config: TrainConfig, model: Any, tokenizer: Any, rollout: _RolloutBase, *,
                 args: GRPOConfig, callbacks: Sequence[TrainerCallback] = (), peft_config: Any = None,
                 optimizer: torch.optim.Optimizer | None = None) -> None:
        from datasets import Dataset

        self.agentgym_config = config
        self.loss_config = config.loss_config()
        self.rollout = rollout
        prompts = [f"{config.env_id or 'offline'} group {g}" for g in range(config.groups_per_step * config.steps)]
        with quiet_trl():
            super().__init__(model=model, reward_funcs=[episode_reward], args=args,
                             train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer,
                             callbacks=list(callbacks), peft_config=peft_config, rollout_func=rollout,
                             optimizers=(optimizer, None))
        without_printer(self)

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """TRL's ``train``, without its chatter (agentgym logs each step itself)."""
        with quiet_trl():
            return super().train(*args, **kwargs)

    def compute_advantages(self, rows: Sequence[TrajectoryRow]) -> list[list[float] | None]:
        """One advantage per completion token of each episode (None: the group is filtered out)."""
        return token_advantages(rows, **self.agentgym_config.advantage_options())

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        rows = self.rollout.rows
        advantages = self.compute_advantages(rows)
        device = output["completion_ids"].device
        width = output["completion_ids"].shape[1]
        keep = torch.tensor([a is not None for a in advantages], device=device)
        output["advantages"] = torch.tensor([((a or [])[:width] + [0.0] * width)[:width] for a in advantages],
                                            device=device)
        mask = output.get("tool_mask", torch.ones_like(output["completion_mask"])) * keep[:, None]
        output["tool_mask"] = mask
        output["num_items_in_batch"] = (output["completion_mask"] * mask).sum()
        # rows without server logprobs (retokenized) must not be importance-weighted
        output["has_rollout_logprobs"] = torch.tensor([has_rollout_logprobs(r) for r in rows], device=device)
        self._metrics["train"]["filtered_groups_rows"].append(float((~keep).sum()))
        return output

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        mask = completion_mask * inputs["tool_mask"]
        logprobs, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True)
        old = inputs.get("old_per_token_logps")
        old = logprobs.detach() if old is None else old
        rollout_logprobs = None
        if self.loss_config.correction != "none" and "sampling_per_token_logps" in inputs:
            has = inputs["has_rollout_logprobs"][:, None]
            rollout_logprobs = torch.where(has, inputs["sampling_per_token_logps"], old)
        output = policy_loss(logprobs, old, inputs["advantages"], mask, self.loss_config,
                             rollout_logprobs=rollout_logprobs, ref_logprobs=inputs.get("ref_per_token_logps"),
                             entropy=entropies)
        loss = output.loss * self._accumulation_scale(mask, inputs["num_items_in_batch"])
        metrics = self._metrics["train" if model.training else "eval"]
        for name in LOSS_METRICS:
            metrics[name].append(output.metrics[name])
        metrics["entropy"].append(masked_mean(entropies.detach(), mask).item())
        return loss

    def _accumulation_scale(self, mask: torch.Tensor, items_in_generation: torch.Tensor) -> torch.Tensor | float:
        """What turns this micro-batch's loss into its share of the optimiser step's.

        token_mean: the mean over every loss token of the optimiser step (not a
        mean of micro-batch means); the other aggregations already scale by a
        per-sequence count, so a plain 1/accumulation does.
        """
        accumulation = self.current_gradient_accumulation_steps if self.model.training else 1
        if self.loss_config.aggregation != "token_mean":
            return 1.0 / accumulation
        per_step = items_in_generation.clamp(min=1.0) * accumulation / self.args.steps_per_generation
        return mask.sum().clamp(min=1.0) / per_step if self.model.training else 1.0


class SyncCallback(TrainerCallback):
    """Pushes the weights to the server at the end of each training step, and logs the step.

    ``sync`` is a :class:`~agentgym.trainers.sync.WeightSync` (None: no sync);
    ``log`` a :class:`~agentgym.trainers.metrics.MetricsLogger` (None: not logged).
    """

    def __init__(self, rollout: _RolloutBase, optimizer_steps: int, *, sync: Any = None, log: Any = None) -> None:
        self.rollout = rollout
        self.optimizer_steps = optimizer_steps
        self.sync = sync
        self.log = log
        self.metrics: list[dict[str, float]] = []
        self._started = 0.0
        self._sync_seconds = 0.0
        self._pending: dict[str, float] | None = None

    def push(self, model: Any, version: int) -> float:
        """Push ``model`` as ``version``; seconds taken."""
        if self.sync is None:
            return 0.0
        started = time.perf_counter()
        result = self.sync.push(model, version=version)
        if isinstance(self.rollout, EnvRollout):
            self.rollout.model_name = result.model_name  # a new name per version with LoRA
        return time.perf_counter() - started

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # the server starts from the trainer's weights (after a warm-up or a resumed checkpoint)
        self.push(kwargs["model"], state.global_step // self.optimizer_steps)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.optimizer_steps == 0:
            self._started = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.optimizer_steps:
            return
        seconds = time.perf_counter() - self._started
        self._sync_seconds = self.push(kwargs["model"], state.global_step // self.optimizer_steps)
        tokens = sum(len(r.prompt_ids) + len(r.completion_ids) for r in self.rollout.rows) * args.num_iterations
        train = max(seconds - self.rollout.seconds, 1e-9)
        self._pending = {
            **self.rollout.stats, "train_tokens": float(tokens), "train_tokens_per_s": tokens / train,
            "dropped_rows": float(self.rollout.dropped_rows), "time/rollout": self.rollout.seconds,
            "time/train": train, "time/sync": self._sync_seconds, "time/step": seconds + self._sync_seconds,
            "policy_version": float(state.global_step // self.optimizer_steps)}

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        if self._pending is None or not logs:
            return
        names = {"loss": "loss", "grad_norm": "grad_norm", "learning_rate": "lr", "entropy": "entropy",
                 "filtered_groups_rows": "filtered_groups_rows", **{name: name for name in LOSS_METRICS}}
        metrics = {**self._pending, **{ours: float(logs[theirs]) for theirs, ours in names.items()
                                       if isinstance(logs.get(theirs), (int, float))}}
        self._pending = None
        step = state.global_step // self.optimizer_steps - 1
        self.metrics.append(metrics)
        if self.log is not None:
            self.log.log(step, metrics)


# -- the run -------------------------------------------------------------------------------------


def _latest_trl_checkpoint(folder: Path) -> Path | None:
    found = sorted(folder.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1])
                   if p.name.split("-")[-1].isdigit() else -1)
    return found[-1] if found else None


def _base_model(config: TrainConfig, out: Path, resuming: bool, log: Any) -> tuple[Any, Any, str, Any]:
    """The model to train, its tokenizer, the folder it was loaded from (the warm-up's when one ran)
    and the warm-up's optimiser (None without one)."""
    from agentgym.models import resolve_model
    from agentgym.trainers.sft import format_warmup, freeze_parameters, load_model_and_tokenizer

    def load(path: str) -> tuple[Any, Any]:
        model, tokenizer = load_model_and_tokenizer(path, dtype=config.dtype)
        freeze_parameters(model, config.frozen_parameters)  # before any optimiser sees them
        return model, tokenizer

    warmed = out / "base"
    if resuming and (warmed / "config.json").exists():
        model, tokenizer = load(str(warmed))
        return model, tokenizer, str(warmed), None
    model, tokenizer = load(config.model)
    if resuming or config.trajectories is not None:
        return model, tokenizer, resolve_model(config.model), None
    optimizers: list[Any] = []
    done = format_warmup(model, tokenizer, config, optimizer_out=optimizers)
    if not done:
        return model, tokenizer, resolve_model(config.model), None
    log.note(f"Format warm-up: {config.format_warmup_steps} steps on {done['episodes']:.0f} episodes of the "
             f"env's random well-formed policy (loss {done['loss_first']:.3f} -> {done['loss_last']:.3f}).")
    # Saved: the server starts from it, and a resumed LoRA run needs the same base.
    model.save_pretrained(warmed)
    tokenizer.save_pretrained(warmed)
    return model, tokenizer, str(warmed), _for_rl(optimizers[0], config) if not config.lora else None


def _for_rl(optimizer: Any, config: TrainConfig) -> Any:
    """The warm-up's optimiser (``config.optimizer``), set to the RL learning rate (its moments kept)."""
    for group in optimizer.param_groups:
        group["lr"] = group["initial_lr"] = config.lr
    return optimizer


def _live_rollout(config: TrainConfig, tokenizer: Any, base_url: str, model_name: str, log: Any) -> EnvRollout:
    from agentgym.rollout.chat import ChatRenderer

    def on_rows(step: int, rows: list[Any]) -> None:
        log.log_episodes(step, rows)
        log.log_samples(step, rows)

    return EnvRollout(config, ChatRenderer(tokenizer), base_url=base_url, model_name=model_name, on_rows=on_rows)


@contextlib.contextmanager
def _server(config: TrainConfig, model_path: str, needed: bool = True) -> Iterator[tuple[Any, Any, Any]]:
    """(base URL, model name, weight sync) of the server the episodes are played against
    (all None when not ``needed``: offline training plays no episodes)."""
    from agentgym.trainers.loop import open_weight_sync

    if not needed:
        yield None, None, None
        return
    with contextlib.ExitStack() as stack:
        base_url, name = config.base_url, config.model
        if base_url is None:
            from agentgym.serve.launch import BuiltinServer

            server = stack.enter_context(BuiltinServer(model_path, served_model_name=config.model,
                                                       max_model_len=config.max_context_tokens))
            base_url, name = server.base_url, server.model_name
        sync = (stack.enter_context(open_weight_sync(config, base_url, name, adapter=config.lora))
                if config.sync_weights else None)
        yield base_url, name, sync


class _StopAfter(TrainerCallback):
    """Stops with a checkpoint once ``steps`` training steps are done, as an interrupted run would."""

    def __init__(self, steps: int, optimizer_steps: int) -> None:
        self.last = steps * optimizer_steps
        self.stopped = False

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.last <= state.global_step < state.max_steps:
            control.should_save = control.should_training_stop = True
            self.stopped = True


def run_trl(config: TrainConfig, *, console: Any = None, stop_after: int | None = None) -> Any:
    """``agentgym train --backend trl``: GRPO with TRL's trainer on live episodes or a rollout file.

    With no ``base_url`` the built-in server is started on the model (after
    the format warm-up); the weights are pushed to it after every training
    step. With ``trajectories`` it trains offline on the file's rows (the
    same steps as the fsdp backend's), with no server and no warm-up.
    ``resume`` continues from the newest TRL checkpoint in ``<out>/trl``;
    ``stop_after``: stop (with a checkpoint) once this many steps are done.
    Returns a :class:`~agentgym.trainers.loop.TrainResult`.
    """
    from agentgym.trainers.loop import TrainResult
    from agentgym.trainers.metrics import MetricsLogger

    budget = TimeBudget(config.max_seconds)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("The trl backend runs in one process (a GRPO group must not straddle processes); "
                          "under torchrun use --backend fsdp.")
    offline = OfflineGroups(config.trajectories, config.episodes_per_step) if config.trajectories else None
    if offline is not None:  # a file that does not split into steps fails now, not after loading the model
        OfflineRollout(offline, 0, optimizer_steps=1).step_output(0, config.episodes_per_step)
    out = Path(config.out)
    checkpoint = _latest_trl_checkpoint(out / "trl")
    if checkpoint is not None and not config.resume:
        raise ConfigError(f"{str(out)!r} already holds a training run. Continue it with --resume, "
                          "or choose another --out.")
    optimizer_steps = config.updates_per_step
    start_step = int(checkpoint.name.split("-")[-1]) // optimizer_steps if checkpoint else 0
    config.save_yaml(out / "config.yaml")
    result = TrainResult(out=out)
    with MetricsLogger(out, config, start_step=start_step, console=console) as log:
        model, tokenizer, model_path, optimizer = _base_model(config, out, checkpoint is not None, log)
        with _server(config, model_path, offline is None) as (base_url, name, sync):
            rollout: _RolloutBase
            if offline is not None:
                rollout = OfflineRollout(offline, tokenizer.eos_token_id, optimizer_steps=optimizer_steps,
                                         on_rows=log.log_samples)
            else:
                rollout = _live_rollout(config, tokenizer, base_url, name, log)
            callback = SyncCallback(rollout, optimizer_steps, sync=sync, log=log)
            stop = _StopAfter(stop_after if stop_after is not None else config.steps, optimizer_steps)
            time_limit = time_limit_callback(budget, every=optimizer_steps, save=True)
            trainer = AgentGymGRPOTrainer(config, model, tokenizer, rollout, args=grpo_args(config, out / "trl"),
                                          callbacks=[callback, stop, time_limit],
                                          peft_config=config.lora_config() if config.lora else None,
                                          optimizer=optimizer)
            if checkpoint is not None:
                log.note(f"Resuming from {checkpoint} (step {start_step}).")
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
            result.metrics = callback.metrics
            if time_limit.stopped_at is not None and not stop.stopped:
                log.note(budget.note(time_limit.stopped_at, config.steps))
    if stop.stopped:
        result.stopped_early = True
        return result
    final = out / "final"
    trained = trainer.model.merge_and_unload() if config.lora else trainer.model
    trained.save_pretrained(final)
    tokenizer.save_pretrained(final)
    result.final_model = final
    return result


def trl_train_on_rows(config: TrainConfig, rows: Sequence[TrajectoryRow], *, steps: int = 3) -> dict[str, float]:
    """TRL's GRPO training step on fixed rows, ``steps`` times (for ``benchmarks/bench_train.py``).

    ``rows`` are one step's episodes (``episodes_per_step`` of them, whole
    groups); no server, no sync. The first step is a warm-up and not timed.
    Returns ``{"steps", "seconds", "train_tokens", "train_tokens_per_s", "loss"}``
    over the timed steps.
    """
    import tempfile

    from agentgym.trainers.sft import load_model_and_tokenizer

    if steps < 2:
        raise ConfigError(f"steps must be >= 2 (the first is not timed), got {steps}.")
    model, tokenizer = load_model_and_tokenizer(config.model, dtype=config.dtype)
    rollout = FixedRollout(rows, tokenizer.eos_token_id)
    timed = config.updated({"steps": steps, "checkpoint_every": 10**6})
    optimizer_steps = timed.updates_per_step
    callback = SyncCallback(rollout, optimizer_steps)
    with tempfile.TemporaryDirectory(prefix="agentgym-trl-bench-") as scratch:
        trainer = AgentGymGRPOTrainer(timed, model, tokenizer, rollout,
                                      args=grpo_args(timed, os.path.join(scratch, "trl")), callbacks=[callback])
        trainer.args.save_strategy = "no"
        trainer.train()
    measured = callback.metrics[1:]
    seconds = sum(m["time/train"] for m in measured)
    tokens = sum(m["train_tokens"] for m in measured)
    return {"steps": float(len(measured)), "seconds": seconds, "train_tokens": tokens,
            "train_tokens_per_s": tokens / max(seconds, 1e-9),
            "loss": measured[-1].get("loss", float("nan")) if measured else float("nan")}
