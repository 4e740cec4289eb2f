"""``python -m agentgym``: the ``agentgym`` command, for launchers that take a module.

    torchrun --nproc-per-node 2 -m agentgym train --backend fsdp --trajectories rollouts.parquet

Also the ``agentgym`` script's entry point: a long-running command first starts again
under tcmalloc where the machine has it (``agentgym.allocator``), before the CLI's
imports, which take seconds.
"""

import sys

from agentgym.allocator import restart_with_allocator
from agentgym.errors import ConfigError


def main() -> None:
    """Entry point of the ``agentgym`` script and of ``python -m agentgym``."""
    try:
        restart_with_allocator(sys.argv)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    from agentgym.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
