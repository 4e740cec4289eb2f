"""How ``--help`` looks: a flag shows no value type.

Typer (0.29) writes the type of every option in its own column, flags included, so
``--resume <bool>`` reads as if it took a value. An empty metavar is typer's public way
to leave that column blank; :class:`HelpGroup` gives one to every flag of the commands
it holds (``--help`` and ``--version`` included), so no command has to remember it.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

__all__ = ["HelpGroup"]


def _blank_flag_types(command: Any, ctx: typer.Context) -> None:
    """Every flag of ``command`` and, for a group added with ``add_typer`` (``env``, ``sandbox``), of
    each of its commands: a sub-app need not be made with ``cls=HelpGroup`` to get it."""
    for param in [*command.params, command.get_help_option(ctx)]:
        if param is not None and getattr(param, "is_bool_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _blank_flag_types(sub, ctx)


class HelpGroup(TyperGroup):
    """A command group whose commands' flags show no ``<bool>`` in ``--help``."""

    def get_params(self, ctx: typer.Context) -> list[Any]:
        _blank_flag_types(self, ctx)
        return super().get_params(ctx)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _blank_flag_types(command, ctx)
        return command
