"""``python -m agentgym.serve --model M ...``: the same as ``agentgym serve``.

``BuiltinServer`` starts the built-in server this way, with the interpreter
that runs the caller, so it works wherever agentgym imports.
"""

from __future__ import annotations

import typer

from agentgym.cli.serve_cmd import serve_command


def main() -> None:
    """Run the serve command as a program of its own."""
    typer.run(serve_command)


if __name__ == "__main__":
    main()
