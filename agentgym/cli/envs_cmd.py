"""``agentgym list`` and ``agentgym play``."""

from __future__ import annotations

from typing import Annotated

import gymnasium as gym
import typer
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

import agentgym
from agentgym.cli.common import EnvKwargOption, console, make_env, parse_env_kwargs
from agentgym.core import TextEnv
from agentgym.registry import list_sources, plugin_failures

__all__ = ["list_command", "play_command"]

_PLAY_HELP = (
    "Type a move and press Enter: a bare move (Up, 3 4, crane) is written in the env's "
    "action format for you; text with tags is sent as it is. "
    "Commands: :help (instructions), :reset (new level), :quit."
)


def list_command(
    family: Annotated[str | None, typer.Option(help="Only envs of this family.")] = None,
    tag: Annotated[str | None, typer.Option(help="Only envs with this tag.")] = None,
) -> None:
    """List the registered environments."""
    table = Table(title="agentgym environments")
    for column in ("id", "family", "description", "needs"):
        table.add_column(column, overflow="fold")
    envs = agentgym.list_envs(family=family, tag=tag)
    for info in envs:
        needs = [*info.needs, *([f"{info.extra} extra"] if info.extra else [])]
        table.add_row(*(escape(text) for text in (info.id, info.family, info.description, ", ".join(needs) or "-")))
    # Envs from outside: one row per source, its id written as the form to fill in.
    sources = [source for source in list_sources()
               if (family is None or family == source.scheme) and (tag is None or tag in source.tags)]
    for source in sources:
        needs = f"{source.extra} extra" if source.extra else "-"
        table.add_row(*(escape(text) for text in (source.example, source.scheme, source.description, needs)))
    console.print(table)
    if any(info.extra for info in envs) or any(source.extra for source in sources):
        console.print("An env's extra installs with scripts/setup.sh EXTRA, from the agentgym repository root.")
    for failure in plugin_failures():
        console.print(f"[yellow]plugin {escape(failure.name)} ({escape(failure.value)}) failed: {escape(failure.error)}[/]")


def play_command(
    env_id: Annotated[str, typer.Argument(metavar="ENV", help="Env id, e.g. Sokoban-LLM-v0.")],
    seed: Annotated[int | None, typer.Option(help="Seed of the first level.")] = None,
    env_kwarg: EnvKwargOption = [],  # noqa: B006
) -> None:
    """Play an environment yourself in the terminal."""
    _enable_line_editing()
    env = make_env(env_id, parse_env_kwargs(env_kwarg))
    game: TextEnv = env.unwrapped  # type: ignore[assignment]
    # What the agent is told: a wrapper may extend the env's own instructions (tools).
    instructions = env.get_wrapper_attr("instructions")
    console.print(Panel(escape(instructions), title=env_id))
    console.print(f"[dim]{_PLAY_HELP}[/]")
    total, over = _new_level(env, seed), False
    while True:
        line = _read_line()
        command = ":quit" if line is None else line.strip()
        if command == ":quit" or (over and command != ":reset"):
            console.print(f"Bye. Reward this episode: {total:g}")
            return
        if command == ":help":
            console.print(Panel(escape(instructions), title=env_id))
        elif command == ":reset":
            total, over = _new_level(env), False
        else:
            action = line if "<" in line or "\\" in line else game.format_action(command)
            observation, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            valid = "" if info["action_valid"] else " [red](invalid action)[/]"
            console.print(f"{escape(observation)}\n[dim]reward {float(reward):+g}, total {total:g}[/]{valid}")
            if terminated or truncated:
                verdict = "[green]Solved![/]" if info["success"] else "[yellow]Episode over.[/]"
                console.print(f"{verdict} Type :reset for a new level or :quit.")
                over = True


def _new_level(env: gym.Env, seed: int | None = None) -> float:
    """Reset, show the task; the episode's reward so far is 0."""
    observation, _ = env.reset(seed=seed)
    console.print(escape(observation))
    return 0.0


def _enable_line_editing() -> None:
    try:
        import readline  # noqa: F401  (arrow keys and history at the prompt, where available)
    except ImportError:
        pass


def _read_line() -> str | None:
    try:
        return input("action> ")
    except EOFError:
        return None
