"""Envs from outside agentgym, played as agentgym text envs.

- ``openenv:URL`` (:mod:`~agentgym.envs.external.openenv_env`): an env on a running
  OpenEnv server;
- ``verifiers:NAME`` (:mod:`~agentgym.envs.external.verifiers_env`): a verifiers
  environment, scored by its rubric.

Both need ``scripts/setup.sh interop``; docs/interop.md shows them.
"""
