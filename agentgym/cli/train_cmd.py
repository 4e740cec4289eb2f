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
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from agentgym.cli.common import MODEL_PANEL, OUTPUT_PANEL, console, fail, make_env, parse_env_kwargs
from agentgym.errors import AgentGymError
from agentgym.trainers.settings import SECTIONS, setting_help

__all__ = ["SERVER_PANEL", "SETTINGS_PANEL", "STEP_PANEL", "TRAIN_PANEL", "report_command", "train_command"]

# The groups of train's --help (typer's rich_help_panel), beside rollout's "The model" and "Output".
TRAIN_PANEL, STEP_PANEL, SERVER_PANEL, SETTINGS_PANEL = "What to train", "Each step", "The server", "Settings"
#: setting name -> its flag, where it has one (a setting's help names other settings by these)
_FLAGS = {"env_id": "--env", "trainer": "--trainer", "backend": "--backend", "model": "--model",
          "base_url": "--base-url", "api_key": "--api-key", "engine": "--engine", "steps": "--steps",
          "group_size": "--group-size", "episodes_per_step": "--episodes-per-step", "max_turns": "--max-turns",
          "turn_budget": "--turn-budget", "max_tokens": "--max-tokens", "temperature": "--temperature", "lr": "--lr",
          "seed": "--seed", "out": "--out", "resume": "--resume", "trajectories": "--trajectories",
          "lora": "--lora", "tensorboard": "--tensorboard", "wandb": "--wandb"}


def _help(name: str) -> str:
    """The setting's own help (its docstring's first sentence), ``name`` markup written as the flag
    (or the plain name) a reader of --help can use."""
    return re.sub(r"``(\w+)``", lambda match: _FLAGS.get(match[1], match[1]), setting_help(name))


def _default(name: str) -> Any:
    """The setting's default, read from its section (one source; --help shows it)."""
    for model in SECTIONS.values():
        if name in model.model_fields:
            return model.model_fields[name].get_default(call_default_factory=True)
    raise KeyError(name)


def _flag(name: str, metavar: str, panel: str) -> Any:
    """The flag of setting ``name``: its help and default are the setting's own."""
    if isinstance(_default(name), bool):  # a flag takes no value
        return typer.Option(_FLAGS[name], help=_help(name), rich_help_panel=panel)
    return typer.Option(_FLAGS[name], metavar=metavar, help=_help(name), rich_help_panel=panel)


def train_command(
    ctx: typer.Context,
    trainer: Annotated[str, _flag("trainer", "NAME", TRAIN_PANEL)] = _default("trainer"),
    backend: Annotated[str | None, _flag("backend", "NAME", TRAIN_PANEL)] = None,
    env_id: Annotated[str | None, _flag("env_id", "ENV", TRAIN_PANEL)] = None,
    env_kwarg: Annotated[list[str], typer.Option(
        "--env-kwarg", "-k", metavar="KEY=VALUE", help="Env argument (YAML value); repeatable.",
        rich_help_panel=TRAIN_PANEL)] = [],  # noqa: B006
    trajectories: Annotated[str | None, _flag("trajectories", "FILE", TRAIN_PANEL)] = None,
    steps: Annotated[int, _flag("steps", "N", TRAIN_PANEL)] = _default("steps"),
    model: Annotated[str, _flag("model", "MODEL", MODEL_PANEL)] = _default("model"),
    lr: Annotated[float, _flag("lr", "LR", MODEL_PANEL)] = _default("lr"),
    lora: Annotated[bool, typer.Option("--lora/--no-lora", help=_help("lora"),
                                       rich_help_panel=MODEL_PANEL)] = _default("lora"),
    group_size: Annotated[int, _flag("group_size", "N", STEP_PANEL)] = _default("group_size"),
    episodes_per_step: Annotated[int, _flag("episodes_per_step", "N", STEP_PANEL)] = _default("episodes_per_step"),
    max_turns: Annotated[int | None, _flag("max_turns", "N", STEP_PANEL)] = None,
    turn_budget: Annotated[int | None, _flag("turn_budget", "N", STEP_PANEL)] = None,
    max_tokens: Annotated[int, _flag("max_tokens", "N", STEP_PANEL)] = _default("max_tokens"),
    temperature: Annotated[float, _flag("temperature", "T", STEP_PANEL)] = _default("temperature"),
    base_url: Annotated[str | None, _flag("base_url", "URL", SERVER_PANEL)] = None,
    api_key: Annotated[str, _flag("api_key", "KEY", SERVER_PANEL)] = _default("api_key"),
    engine: Annotated[str, _flag("engine", "NAME", SERVER_PANEL)] = _default("engine"),
    out: Annotated[str, _flag("out", "DIR", OUTPUT_PANEL)] = _default("out"),
    resume: Annotated[bool, _flag("resume", "", OUTPUT_PANEL)] = _default("resume"),
    seed: Annotated[int, _flag("seed", "N", OUTPUT_PANEL)] = _default("seed"),
    tensorboard: Annotated[bool, _flag("tensorboard", "", OUTPUT_PANEL)] = _default("tensorboard"),
    wandb: Annotated[bool, _flag("wandb", "", OUTPUT_PANEL)] = _default("wandb"),
    config_file: Annotated[Path | None, typer.Option(
        "--config", metavar="FILE", help="YAML file of settings (sections or flat names); the flags given "
        "override it.", rich_help_panel=SETTINGS_PANEL)] = None,
    assignments: Annotated[list[str], typer.Option(
        "--set", "-s", metavar="NAME=VALUE", help="Any setting (VALUE read as YAML), e.g. -s loss.kl_coef=0.05; "
        "repeatable.", rich_help_panel=SETTINGS_PANEL)] = [],  # noqa: B006
    settings: Annotated[bool, typer.Option(
        "--settings", help="List every setting with its default and meaning, then exit.",
        rich_help_panel=SETTINGS_PANEL)] = False,
) -> None:
    """Train a model with grpo, ppo, dpo, sft, distill or rm, on an env or on rollout files.

    grpo, ppo: learn from the episodes they play (ppo with a critic).
    dpo: from pairs of episodes of a group, or from a pairs file.
    sft: from the successful episodes of rollout files.
    distill: from a teacher's token distributions.
    rm: a reward model (a score head) from dpo's pairs.
    """
    if settings:
        _print_settings()
        return
    values: dict[str, Any] = {
        "env_id": env_id, "trainer": trainer, "backend": backend, "model": model, "base_url": base_url,
        "api_key": api_key, "engine": engine, "steps": steps, "group_size": group_size,
        "episodes_per_step": episodes_per_step, "max_turns": max_turns, "turn_budget": turn_budget,
        "max_tokens": max_tokens, "temperature": temperature, "lr": lr, "seed": seed, "out": out,
        "trajectories": trajectories, "lora": lora, "resume": resume, "tensorboard": tensorboard, "wandb": wandb,
    }
    # Only the flags given: a flag left out keeps the --config file's value (or the default).
    flags = {name: value for name, value in values.items() if _given(ctx, name)}
    if env_kwarg:
        flags["env_kwargs"] = parse_env_kwargs(env_kwarg)
    flags.update(parse_env_kwargs(assignments, option="--set"))
    try:
        config = _load_config(config_file, flags)
        backend_given = config.run.backend is not None  # the check fills in the trainer's default
        _check_before_starting(config)
        result = _dispatch(config, backend_given=backend_given)
    except AgentGymError as exc:
        raise fail(str(exc)) from exc
    except KeyboardInterrupt:
        raise fail("Interrupted. Continue the run with the same flags and --resume.") from None
    if _is_main_process():
        _print_result(config, result)


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the flag of parameter ``name`` was on the command line (not its default)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


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
    return TrainConfig.from_dict(flags)


def _check_before_starting(config: Any) -> None:
    """Every name and setting the run will use, checked now with the registries' own lookups, so a
    typo fails in a second with one line, before the banner, before any model is built or loaded and
    before any server is started (each setting's own value was checked as ``config`` was read)."""
    from agentgym.models import check_model_name
    from agentgym.trainers.registry import check_settings, trainer_spec

    trainer_spec(config.run.trainer).backend(config.run.backend)  # the trainer, then its backend
    if config.rollout.env_id is not None:
        make_env(config.rollout.env_id, config.rollout.env_kwargs).close()  # the id, its arguments, their values
    check_model_name(config.model.model)  # a tiny model is built later, by the run, not by a check
    if config.distill.teacher is not None:
        check_model_name(config.distill.teacher, option="-s teacher")
    if config.rollout.trajectories is not None:
        from agentgym.rollout.storage import parquet_schema
        from agentgym.trainers.loop.sources import trajectory_files

        for path in trajectory_files(config.rollout.trajectories):
            if path.suffix == ".parquet":  # dpo also reads JSON-lines pairs files: only this name promises Parquet
                parquet_schema(path)
    check_settings(config)  # last, as it imports the learners (torch): the learner's own checks, unread settings


def _dispatch(config: Any, *, backend_given: bool) -> Any:
    """Run the trainer through the run skeleton."""
    import transformers

    from agentgym.trainers.loop.run import check_run_folder, train

    transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars would break the live bar
    main = _is_main_process()
    run = config.run
    check_run_folder(Path(run.out), config)  # a used run folder: one line, before the banner
    backend = run.backend if backend_given else f"{run.backend}, its default backend"  # filled in by the check
    if main:
        console.print(f"Training {escape(config.model.model)} on "
                      f"{escape(str(config.rollout.env_id or config.rollout.trajectories))} ({escape(run.trainer)} on "
                      f"{escape(backend)}) for {run.steps} steps; run folder {escape(run.out)}")
    return train(config, console=console if main else None)


def _print_result(config: Any, result: Any) -> None:
    # The whole run's steps: a resumed run's closing line starts at its first step, not the resumed one.
    metrics = [*(getattr(result, "earlier", None) or []), *(getattr(result, "metrics", None) or [])]
    reward_model = config.run.trainer == "rm"
    if reward_model:
        _print_pair_accuracy(metrics)
    elif metrics and all(isinstance(record.get("success"), (int, float)) for record in (metrics[0], metrics[-1])):
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
    if final is not None and reward_model:  # a scorer, not a policy: an env plays against it
        console.print(f"Reward model: {escape(str(final))}; train against it: agentgym train --env rm:ENV "
                      f"-k reward_model={escape(str(final))} --model MODEL")
    elif final is not None and env_id:
        console.print(f"Trained model: {escape(str(final))}; roll it out: agentgym rollout --env {escape(env_id)} "
                      f"--model {escape(str(final))} --episodes 8")
    elif final is not None:
        console.print(f"Trained model: {escape(str(final))}; roll it out: agentgym rollout --env ENV "
                      f"--model {escape(str(final))} --episodes 8")


def _print_pair_accuracy(metrics: list[dict[str, Any]]) -> None:
    """A reward model's closing line: its held-out pair accuracy, first measure to last (the
    episodes' success is the recorded players', not the model's)."""
    measured = [(step, record) for step, record in enumerate(metrics, start=1)
                if isinstance(record.get("eval_accuracy"), (int, float))]
    if measured:
        (first_step, first), (last_step, last) = measured[0], measured[-1]
        console.print(f"Held-out pair accuracy {first['eval_accuracy']:.0%} (step {first_step}) -> "
                      f"{last['eval_accuracy']:.0%} (step {last_step}), on {last.get('eval_pairs', 0):.0f} pairs.")


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
