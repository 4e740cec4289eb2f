"""``python -m agentgym.interop ENV ...``: serve an env over OpenEnv (the image's entry point)."""

from agentgym.interop.openenv_server import main

main()
