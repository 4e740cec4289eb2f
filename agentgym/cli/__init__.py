"""The ``agentgym`` command: ``list``, ``list-models``, ``play``, ``rollout``, ``view``, ``serve``,
``sandbox``, ``train``, ``report``, ``export``, ``eval``, ``env``.

Each command lives in its own module; this one only assembles the app.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from agentgym.cli import (
    env_cmd,
    envs_cmd,
    eval_cmd,
    export_cmd,
    models_cmd,
    rollout_cmd,
    sandbox_cmd,
    serve_cmd,
    train_cmd,
    view_cmd,
)
from agentgym.cli.help_screen import HelpGroup

__all__ = ["app", "main"]

app = typer.Typer(
    name="agentgym",
    help="A gym for LLM agents: text environments, rollouts and trainers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=HelpGroup,  # flags show no <bool> in --help
)


def _version(value: bool) -> None:
    if value:
        import agentgym

        print(f"agentgym {agentgym.__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """A gym for LLM agents: text environments, rollouts and trainers."""


app.command("list")(envs_cmd.list_command)
app.command("list-models")(models_cmd.list_models_command)
app.command("play")(envs_cmd.play_command)
app.command("rollout")(rollout_cmd.rollout_command)
app.command("view")(view_cmd.view_command)
app.command("serve")(serve_cmd.serve_command)
app.add_typer(sandbox_cmd.app, name="sandbox")
app.command("train")(train_cmd.train_command)
app.command("report")(train_cmd.report_command)
app.command("export")(export_cmd.export_command)
app.command("eval")(eval_cmd.eval_command)
app.add_typer(env_cmd.app, name="env")


def main() -> None:
    """Entry point of the ``agentgym`` script."""
    app(args=rollout_cmd.expand_bare_ray(sys.argv[1:]))
