"""``agentgym train`` and ``agentgym report``: learn from episodes, then look at the run.

Settings come from the :class:`~agentgym.trainers.settings.TrainConfig`
defaults, then ``--config FILE.yaml``, then the flags given (a flag left out
never overrides the file); ``--set NAME=VALUE`` reaches any other setting and
``--settings`` lists them all.
Across processes: ``torchrun --nproc-per-node N -m agentgym train --backend
fsdp ...`` (every rank trains, rank 0 alone prints).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from agentgym.cli.common import EnvKwargOption, console, fail, parse_env_kwargs
from agentgym.errors import AgentGymError
from agentgym.trainers.settings import setting_help

__all__ = ["report_command", "train_command"]

_SET_HELP = ("Any setting as NAME=VALUE (VALUE read as YAML), e.g. -s lr=5e-4 -s loss.kl_coef=0.05; "
             "repeatable. `agentgym train --settings` lists them all.")


def _flag(name: str) -> Any:
    """A flag whose help is the setting's own docstring (one source)."""
    return typer.Option(help=setting_help(name))


def train_command(
    env_id: Annotated[str | None, typer.Option("--env", help=setting_help("env_id"))] = None,
    trainer: Annotated[str | None, _flag("trainer")] = None,
    backend: Annotated[str | None, _flag("backend")] = None,
    model: Annotated[str | None, _flag("model")] = None,
    base_url: Annotated[str | None, _flag("base_url")] = None,
    api_key: Annotated[str | None, _flag("api_key")] = None,
    engine: Annotated[str | None, _flag("engine")] = None,
    steps: Annotated[int | None, _flag("steps")] = None,
    group_size: Annotated[int | None, _flag("group_size")] = None,
    episodes_per_step: Annotated[int | None, _flag("episodes_per_step")] = None,
    max_turns: Annotated[int | None, _flag("max_turns")] = None,
    turn_budget: Annotated[int | None, _flag("turn_budget")] = None,
    max_tokens: Annotated[int | None, _flag("max_tokens")] = None,
    temperature: Annotated[float | None, _flag("temperature")] = None,
    lr: Annotated[float | None, _flag("lr")] = None,
    seed: Annotated[int | None, _flag("seed")] = None,
    out: Annotated[Path | None, _flag("out")] = None,
    resume: Annotated[bool, _flag("resume")] = False,
    trajectories: Annotated[Path | None, _flag("trajectories")] = None,
    lora: Annotated[bool | None, typer.Option("--lora/--no-lora", help=setting_help("lora"))] = None,
    tensorboard: Annotated[bool, _flag("tensorboard")] = False,
    wandb: Annotated[bool, _flag("wandb")] = False,
    config_file: Annotated[Path | None, typer.Option("--config", help="YAML file of settings (sections or flat names).")] = None,
    env_kwarg: EnvKwargOption = [],  # noqa: B006
    assignments: Annotated[list[str], typer.Option("--set", "-s", help=_SET_HELP)] = [],  # noqa: B006
    settings: Annotated[bool, typer.Option("--settings", help="List every setting with its default and meaning, then exit.")] = False,
) -> None:
    """Train a model on an env with RL (GRPO), on rollout files (SFT), or from a teacher (distill); log,
    checkpoint, push weights."""
    if settings:
        _print_settings()
        return
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


def _print_settings() -> None:
    """Every setting by section, its default and its help: the settings' own docstrings."""
    from rich.table import Table

    from agentgym.trainers.settings import setting_rows

    table = Table(title="agentgym train settings (-s NAME=VALUE, or NAME: VALUE under its section in --config)",
                  show_lines=False)
    for column in ("setting", "default", "meaning"):
        table.add_column(column, overflow="fold")
    for section, name, default, help_text in setting_rows():
        table.add_row(f"{section}.{name}", escape(default), escape(help_text))
    console.print(table)


def _is_main_process() -> bool:
    """Rank 0 under torchrun (the one that talks), or a lone process."""
    return int(os.environ.get("RANK", "0")) == 0


def _load_config(config_file: Path | None, flags: dict[str, Any]) -> Any:
    from agentgym.trainers.settings import TrainConfig

    if config_file is not None:
        return TrainConfig.from_yaml(config_file, flags)
    return TrainConfig.from_dict({key: value for key, value in flags.items() if value is not None})


def _dispatch(config: Any) -> Any:
    """Run the trainer through the run skeleton."""
    import transformers

    from agentgym.models import resolve_model
    from agentgym.trainers.registry import trainer_spec
    from agentgym.trainers.loop.run import check_run_folder, train
    from agentgym.trainers.loop.sources import trajectory_files

    transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars would break the live bar
    main = _is_main_process()
    run = config.run
    # A mistyped model or file, or a used run folder: one line, before the banner.
    resolve_model(config.model.model)
    check_run_folder(Path(run.out), config)
    if config.rollout.trajectories is not None:
        trajectory_files(config.rollout.trajectories)
    backend = run.backend or f"{trainer_spec(run.trainer).default_backend}, its default backend"
    if main:
        console.print(f"Training {escape(config.model.model)} on "
                      f"{escape(str(config.rollout.env_id or config.rollout.trajectories))} ({escape(run.trainer)} on "
                      f"{escape(backend)}) for {run.steps} steps; run folder {escape(run.out)}")
    return train(config, console=console if main else None)


def _print_result(config: Any, result: Any) -> None:
    metrics = list(getattr(result, "metrics", []) or [])
    if metrics and "success" in metrics[-1]:
        first, last = metrics[0], metrics[-1]
        line = f"Success rate {first['success']:.0%} -> {last['success']:.0%} (first step -> last"
        # Recorded rows were played by whoever recorded them, not by the model being trained.
        line += ", of the recorded episodes read)" if config.rollout.trajectories is not None else ")"
        reward, final_reward = first.get("reward"), last.get("reward")
        if reward is not None and final_reward is not None:
            line += f"; mean reward {reward:.3f} -> {final_reward:.3f}"
            if final_reward < reward and last["success"] > first["success"]:
                # Bandit's reward is its random payout: success can rise while it falls
                line += " (the env's own reward, which success need not raise: Bandit's is a random payout)"
        console.print(line + ".")
    out = getattr(result, "out", config.run.out)
    console.print(f"Metrics: {escape(str(Path(out) / 'metrics.jsonl'))}; "
                  f"report: agentgym report {escape(str(out))}")
    final = getattr(result, "final_model", None)
    env_id = config.rollout.env_id
    if final is not None and env_id:
        console.print(f"Trained model: {escape(str(final))}; roll it out: agentgym rollout --env {escape(env_id)} "
                      f"--model {escape(str(final))} --episodes 8")
    elif final is not None:
        console.print(f"Trained model: {escape(str(final))}; roll it out: agentgym rollout --env ENV "
                      f"--model {escape(str(final))} --episodes 8")


def report_command(
    run_dir: Annotated[Path, typer.Argument(help="The --out folder of an `agentgym train` run.")],
    out: Annotated[Path | None, typer.Option(help="Where to write the page (default RUN_DIR/report.html).")] = None,
    episodes: Annotated[int, typer.Option(help="Sampled episodes to show.")] = 4,
) -> None:
    """Write one self-contained HTML page with the run's curves and a few episodes."""
    from agentgym.trainers.loop.report import write_report

    try:
        path = write_report(run_dir, out, episodes=episodes)
    except AgentGymError as exc:
        raise fail(str(exc)) from exc
    console.print(f"Report written to {escape(str(path))} (open it in a browser; it needs no network).")
