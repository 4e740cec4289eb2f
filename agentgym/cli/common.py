"""Helpers shared by the commands: making an env from flags, reporting errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import gymnasium as gym
import typer
import yaml
from rich.console import Console
from rich.markup import escape

import agentgym
from agentgym.errors import AgentGymError
from agentgym.registry import env_argument_error

__all__ = ["ADVANCED_PANEL", "ConcurrencyOption", "ENV_KWARG_HELP", "EnvKwargOption", "EnvTimeoutOption",
           "EpisodeTimeoutOption", "MODEL_PANEL", "MaxContextOption", "MaxTokensOption", "MaxTurnsOption", "OUTPUT_PANEL",
           "PLAY_PANEL", "PlayEnvKwargOption", "SUMMARY_COLUMNS", "TurnBudgetOption", "TurnTimeoutOption", "all_failed",
           "check_base_urls", "console", "fail", "make_env", "parse_env_kwargs", "rows_written"]

console = Console(highlight=False)

#: The columns of the summary tables of ``rollout`` and ``eval``, in one order for both.
SUMMARY_COLUMNS = ("episodes", "success rate", "mean reward", "mean turns", "invalid actions", "failed")

ENV_KWARG_HELP = "Env constructor argument as KEY=VALUE (VALUE read as YAML: 7, [7, 7], true); repeatable."

# The groups of rollout's and eval's --help (typer's rich_help_panel), so 80 columns stay readable.
PLAY_PANEL, MODEL_PANEL, OUTPUT_PANEL, ADVANCED_PANEL = "What to play", "The model", "Output", "Advanced"

# Options the playing commands (rollout, eval, envs, train) share; each command sets its own default.
EnvKwargOption = Annotated[list[str], typer.Option("--env-kwarg", "-k", metavar="KEY=VALUE", help=ENV_KWARG_HELP)]
#: -k in rollout's and eval's groups (one line of help)
PlayEnvKwargOption = Annotated[list[str], typer.Option(
    "--env-kwarg", "-k", metavar="KEY=VALUE", help="Env argument (YAML value); repeatable.", rich_help_panel=PLAY_PANEL)]
MaxTurnsOption = Annotated[int | None, typer.Option(
    metavar="N", help="Turn limit (the prompt names it).", rich_help_panel=PLAY_PANEL)]
TurnBudgetOption = Annotated[int | None, typer.Option(
    metavar="N", help="Stop after N turns, unannounced.", rich_help_panel=PLAY_PANEL)]
MaxTokensOption = Annotated[int, typer.Option(metavar="N", help="Tokens one turn may sample.", rich_help_panel=MODEL_PANEL)]
MaxContextOption = Annotated[int, typer.Option(metavar="N", help="Tokens an episode may hold.", rich_help_panel=MODEL_PANEL)]
ConcurrencyOption = Annotated[int, typer.Option(metavar="N", help="Episodes playing at once.", rich_help_panel=ADVANCED_PANEL)]
EpisodeTimeoutOption = Annotated[float | None, typer.Option(
    metavar="S", help="Seconds before an episode fails (default: no limit).", rich_help_panel=ADVANCED_PANEL)]
TurnTimeoutOption = Annotated[float | None, typer.Option(
    metavar="S", help="Seconds one turn may sample (default: 120 + 2 per --max-tokens).", rich_help_panel=ADVANCED_PANEL)]
EnvTimeoutOption = Annotated[float | None, typer.Option(
    metavar="S", help="Seconds one env reset or step may take.", rich_help_panel=ADVANCED_PANEL)]


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` as an error and return the exit to raise (2: bad input; 1: the run failed)."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code=code)


def check_base_urls(base_urls: Sequence[str] | None, model: str, api_key: str) -> None:
    """Before playing: exit with one line unless a --base-url answers; warn of the ones
    that do not (the others play) or that list other models than ``model``."""
    if not base_urls:
        return
    from agentgym.rollout.probe import check_servers

    try:
        problems = check_servers(base_urls, model=model, api_key=api_key)
    except AgentGymError as exc:
        raise fail(str(exc), code=1) from exc
    for problem in problems:
        console.print(f"[yellow]warning: {escape(problem)}[/]")


def all_failed(rows: list[Any]) -> typer.Exit | None:
    """The exit of a run whose every episode stopped with an error (None if one did not)."""
    from collections import Counter

    from agentgym.rollout.rows import first_rows

    episodes = first_rows(rows)
    if not episodes or any(row.error is None for row in episodes):
        return None
    error, count = Counter(row.error for row in episodes).most_common(1)[0]
    return fail(f"all {len(episodes)} episodes stopped with an error ({count} x {error}); "
                "fix that and rerun the same command.", code=1)


def rows_written(path: Any, rows: list[Any]) -> str:
    """The line that says where ``rows`` went and how to look at them (rollout --out, eval --episodes-out)."""
    from agentgym.rollout.rows import first_rows

    shown = escape(str(path))
    return (f"{len(first_rows(rows))} episodes ({len(rows)} rows) written to {shown}; "
            f"agentgym view {shown} replays them.")


def parse_env_kwargs(pairs: list[str], option: str = "--env-kwarg") -> dict[str, Any]:
    """``["dim_room=7", "num_boxes=2"]`` -> ``{"dim_room": 7, "num_boxes": 2}``.

    Values are read as YAML; ``option`` is the flag that errors name (any KEY=VALUE flag).
    """
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise fail(f"{option} takes KEY=VALUE, got {pair!r}.")
        try:
            kwargs[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise fail(f"could not read the value of {key!r} ({value!r}): {exc}") from exc
    return kwargs


def make_env(env_id: str, kwargs: dict[str, Any]) -> gym.Env:
    """Make ``env_id``, turning our errors and bad kwargs into a clean exit."""
    try:
        return agentgym.make(env_id, **kwargs)
    except AgentGymError as exc:
        raise fail(str(exc)) from exc
    except (TypeError, ValueError) as exc:  # an argument it does not take, a value it cannot use
        raise fail(str(env_argument_error(env_id, kwargs, exc))) from exc
