"""agentgym and the other env standards, both ways.

Out of agentgym (this package):

- :mod:`agentgym.interop.openenv_server`: any registered env served as an OpenEnv
  environment (``agentgym env serve ENV_ID``), and the OpenEnv client class for it;
- :mod:`agentgym.interop.image`: the container image that serves it;
- :mod:`agentgym.interop.trl_env`: any registered env as TRL's ``environment_factory``.

Into agentgym (``agentgym.envs.external``): ``openenv:URL`` plays a running OpenEnv
server, ``verifiers:NAME`` a verifiers environment. :mod:`agentgym.interop.textwire`
holds what both sides of the OpenEnv bridge agree on. docs/interop.md shows each way.
"""
