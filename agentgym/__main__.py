"""``python -m agentgym``: the ``agentgym`` command, for launchers that take a module.

    torchrun --nproc-per-node 2 -m agentgym train --backend fsdp --trajectories rollouts.parquet
"""

from agentgym.cli import main

if __name__ == "__main__":
    main()
