"""``agentgym rollout``: play episodes with a policy and print them."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from agentgym.cli.common import ENV_KWARG_HELP, console, fail, make_env, parse_env_kwargs
from agentgym.rollout import EpisodeRecord, RandomPolicy, play_episode

__all__ = ["rollout_command"]


class PolicyName(str, Enum):
    random = "random"


def rollout_command(
    env_id: Annotated[str, typer.Option("--env", help="Env id, e.g. Sokoban-LLM-v0.")],
    policy: Annotated[PolicyName, typer.Option(help="Who plays.")] = PolicyName.random,
    episodes: Annotated[int, typer.Option(help="Episodes to play.")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the first episode; episode i uses seed+i.")] = 0,
    quiet: Annotated[bool, typer.Option(help="Print only the summary.")] = False,
    env_kwarg: Annotated[list[str], typer.Option("--env-kwarg", "-k", help=ENV_KWARG_HELP)] = [],  # noqa: B006
) -> None:
    """Play episodes with a policy, print each one and a summary."""
    if episodes < 1:
        raise fail(f"--episodes must be at least 1, got {episodes}.")
    env = make_env(env_id, parse_env_kwargs(env_kwarg))
    player = RandomPolicy(seed=seed)
    records = []
    for index in range(episodes):
        record = play_episode(env, player, seed=seed + index)
        records.append(record)
        if not quiet:
            _print_episode(index, record)
    console.print(_summary(env_id, policy.value, records))


def _print_episode(index: int, record: EpisodeRecord) -> None:
    console.rule(f"episode {index} (seed {record.seed})")
    console.print(escape(record.first_observation))
    for number, turn in enumerate(record.turns, start=1):
        flag = "" if turn.action_valid else "  [red](invalid)[/]"
        console.print(f"[bold cyan]turn {number}> {escape(turn.action)}[/]{flag}")
        console.print(f"{escape(turn.observation)}\n[dim]reward {turn.reward:+g}[/]")
    outcome = "solved" if record.success else "not solved"
    console.print(f"[bold]{outcome}[/], reward {record.total_reward:g} in {record.num_turns} turns")


def _summary(env_id: str, policy: str, records: list[EpisodeRecord]) -> Table:
    count = len(records)
    turns = sum(record.num_turns for record in records)
    table = Table(title=f"{env_id}, {policy} policy")
    for column in ("episodes", "mean reward", "success rate", "mean turns", "invalid actions"):
        table.add_column(column, justify="right")
    table.add_row(
        str(count),
        f"{sum(record.total_reward for record in records) / count:.3f}",
        f"{sum(record.success for record in records) / count:.1%}",
        f"{turns / count:.1f}",
        f"{sum(record.invalid_actions for record in records) / max(turns, 1):.1%}",
    )
    return table
