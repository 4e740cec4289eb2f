"""``agentgym train`` and ``agentgym report``: learn from episodes, then look at the run.

Settings come from the :class:`~agentgym.trainers.config.TrainConfig`
defaults, then ``--config FILE.yaml``, then the flags given (a flag left out
never overrides the file); ``--set KEY=VALUE`` reaches any other field.
Across processes: ``torchrun --nproc-per-node N -m agentgym train --backend
fsdp ...`` (every rank trains, rank 0 alone prints).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from agentgym.cli.common import EnvKwargOption, MaxTurnsOption, TurnBudgetOption, console, fail, parse_env_kwargs
from agentgym.errors import AgentGymError

__all__ = ["report_command", "train_command"]

_SET_HELP = "Any TrainConfig field as KEY=VALUE (VALUE read as YAML), e.g. -s lr=5e-4 -s pack_sequences=true; repeatable."


def train_command(
    env_id: Annotated[str | None, typer.Option("--env", help="Env to train on, e.g. Bandit-LLM-v0.")] = None,
    trainer: Annotated[str | None, typer.Option(help="Trainer: grpo or sft.")] = None,
    backend: Annotated[str | None, typer.Option(help="fsdp (native PyTorch) or trl; default: the trainer's own (grpo: fsdp, sft: trl).")] = None,
    model: Annotated[str | None, typer.Option(help="Model: 'tiny', a local folder or a hub id.")] = None,
    base_url: Annotated[str | None, typer.Option(help="Server to roll out against (ending in /v1); none: start the built-in one.")] = None,
    api_key: Annotated[str | None, typer.Option(help="API key for --base-url.")] = None,
    engine: Annotated[str | None, typer.Option(help="What --base-url is: builtin or vllm (decides the weight sync).")] = None,
    steps: Annotated[int | None, typer.Option(help="Training steps.")] = None,
    group_size: Annotated[int | None, typer.Option(help="Episodes per seed (a GRPO group).")] = None,
    episodes_per_step: Annotated[int | None, typer.Option(help="Episodes per step (a multiple of --group-size).")] = None,
    max_turns: MaxTurnsOption = None,
    turn_budget: TurnBudgetOption = None,
    max_tokens: Annotated[int | None, typer.Option(help="Tokens one turn may sample.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None,
    lr: Annotated[float | None, typer.Option(help="Peak learning rate.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the run.")] = None,
    out: Annotated[Path | None, typer.Option(help="Run folder (metrics, checkpoints, final model).")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the run in --out from its newest checkpoint.")] = False,
    trajectories: Annotated[Path | None, typer.Option(help="Train offline on the rows of this Parquet file (--trainer sft: several, comma-separated; a file named twice counts twice).")] = None,
    lora: Annotated[bool | None, typer.Option("--lora/--no-lora", help="Train a LoRA adapter (peft).")] = None,
    tensorboard: Annotated[bool, typer.Option(help="Also log to TensorBoard.")] = False,
    wandb: Annotated[bool, typer.Option(help="Also log to Weights & Biases.")] = False,
    config_file: Annotated[Path | None, typer.Option("--config", help="YAML file of TrainConfig fields.")] = None,
    env_kwarg: EnvKwargOption = [],  # noqa: B006
    assignments: Annotated[list[str], typer.Option("--set", "-s", help=_SET_HELP)] = [],  # noqa: B006
) -> None:
    """Train a model on an env with RL (GRPO) or SFT; log, checkpoint, push weights to the server."""
    flags: dict[str, Any] = {
        "env_id": env_id, "trainer": trainer, "backend": backend, "model": model, "base_url": base_url,
        "api_key": api_key, "engine": engine, "steps": steps, "group_size": group_size,
        "episodes_per_step": episodes_per_step, "max_turns": max_turns, "turn_budget": turn_budget,
        "max_tokens": max_tokens,
        "temperature": temperature, "lr": lr, "seed": seed, "out": str(out) if out else None,
        "trajectories": str(trajectories) if trajectories else None, "lora": lora,
        "resume": resume or None, "tensorboard": tensorboard or None, "wandb": wandb or None,
        "env_kwargs": parse_env_kwargs(env_kwarg) or None,
    }
    flags.update(parse_env_kwargs(assignments, option="--set"))
    try:
        config = _load_config(config_file, flags)
        result = _dispatch(config)
    except AgentGymError as exc:
        raise fail(str(exc)) from exc
    except KeyboardInterrupt:
        raise fail("Interrupted. Continue the run with the same flags and --resume.") from None
    if _is_main_process():
        _print_result(config, result)


def _is_main_process() -> bool:
    """Rank 0 under torchrun (the one that talks), or a lone process."""
    return int(os.environ.get("RANK", "0")) == 0


def _load_config(config_file: Path | None, flags: dict[str, Any]) -> Any:
    from agentgym.trainers.config import TrainConfig

    base = TrainConfig.from_yaml(config_file).to_dict() if config_file is not None else {}
    given = {key: value for key, value in flags.items() if value is not None}
    return TrainConfig.from_dict({**base, **given})


def _dispatch(config: Any) -> Any:
    """Run the trainer the registry holds for (trainer, backend)."""
    import transformers

    from agentgym.trainers.registry import get_trainer

    transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars would break the live bar
    run = get_trainer(config.trainer, config.backend)
    main = _is_main_process()
    if main:
        console.print(f"Training {escape(config.model)} on {escape(str(config.env_id or config.trajectories))} "
                      f"({escape(config.trainer)}, {escape(config.backend)}) for {config.steps} steps; "
                      f"run folder {escape(config.out)}")
    return run(config, console=console if main else None)


def _print_result(config: Any, result: Any) -> None:
    metrics = list(getattr(result, "metrics", []) or [])
    if metrics and "success" in metrics[-1]:
        first, last = metrics[0], metrics[-1]
        console.print(f"Success rate: {first['success']:.0%} at the first step, {last['success']:.0%} at the last; "
                      f"reward {first.get('reward', 0.0):.3f} -> {last.get('reward', 0.0):.3f}.")
    out = getattr(result, "out", config.out)
    console.print(f"Metrics: {escape(str(Path(out) / 'metrics.jsonl'))}; "
                  f"report: agentgym report {escape(str(out))}")
    final = getattr(result, "final_model", None)
    if final is not None and config.env_id:
        console.print(f"Trained model: {escape(str(final))}; roll it out: agentgym rollout --env {escape(config.env_id)} "
                      f"--model {escape(str(final))} --episodes 8")


def report_command(
    run_dir: Annotated[Path, typer.Argument(help="The --out folder of an `agentgym train` run.")],
    out: Annotated[Path | None, typer.Option(help="Where to write the page (default RUN_DIR/report.html).")] = None,
    episodes: Annotated[int, typer.Option(help="Sampled episodes to show.")] = 4,
) -> None:
    """Write one self-contained HTML page with the run's curves and a few episodes."""
    from agentgym.trainers.report import write_report

    try:
        path = write_report(run_dir, out, episodes=episodes)
    except AgentGymError as exc:
        raise fail(str(exc)) from exc
    console.print(f"Report written to {escape(str(path))} (open it in a browser; it needs no network).")
