"""``python -m agentgym.serve --model M ...``: the same as ``agentgym serve``.

``BuiltinServer`` starts the built-in server this way, with the interpreter
that runs the caller, so it works wherever agentgym imports. Started that
way, it stops when its parent exits, however the parent died.
"""

from __future__ import annotations

import os

import typer

from agentgym.cli.serve_cmd import serve_command
from agentgym.serve.launch import PARENT_PID_ENV, stop_when_parent_exits


def main() -> None:
    """Run the serve command as a program of its own."""
    parent = os.environ.pop(PARENT_PID_ENV, "")
    if parent.isdigit():
        stop_when_parent_exits(int(parent))
    typer.run(serve_command)


if __name__ == "__main__":
    main()
