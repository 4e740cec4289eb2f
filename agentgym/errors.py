"""Every exception agentgym raises on purpose.

One root, so ``except AgentGymError`` catches all of ours and nothing else::

    AgentGymError
    ├── ConfigError            a value given by the user is out of range or inconsistent
    ├── RegistryError
    │   ├── UnknownEnvError    no env with that id ("did you mean ...")
    │   └── DuplicateEnvError  an id registered twice with different entry points
    ├── EnvUsageError          the env was driven out of order or given a non-str action
    │   └── ResetNeeded        step() before reset(), or after the episode ended
    └── PolicyError            a policy could not produce an action (e.g. a script ran out)

    AgentGymWarning (a UserWarning)
    └── PluginLoadWarning      a third-party env plugin failed to load; the rest still work

Bad *text* from an agent is never an exception: environments answer it with
feedback and ``info["action_valid"] = False``. These errors are for code that
calls agentgym wrongly; each message says what was expected, what came, and
what to do.
"""

from __future__ import annotations

__all__ = [
    "AgentGymError",
    "AgentGymWarning",
    "ConfigError",
    "DuplicateEnvError",
    "EnvUsageError",
    "PluginLoadWarning",
    "PolicyError",
    "RegistryError",
    "ResetNeeded",
    "UnknownEnvError",
]


class AgentGymError(Exception):
    """Root of every error agentgym raises on purpose."""


class ConfigError(AgentGymError, ValueError):
    """A configuration value is invalid; the message names the field and the fix."""


class RegistryError(AgentGymError):
    """Something is wrong with the env registry."""


class UnknownEnvError(RegistryError, LookupError):
    """No env is registered under the requested id."""

    def __init__(self, env_id: str, suggestions: list[str]) -> None:
        self.env_id = env_id
        self.suggestions = suggestions
        hint = f" Did you mean {' or '.join(repr(s) for s in suggestions)}?" if suggestions else ""
        super().__init__(
            f"No environment registered as {env_id!r}.{hint} Run `agentgym list` to see them all."
        )


class DuplicateEnvError(RegistryError):
    """The same id was registered twice with different entry points."""


class EnvUsageError(AgentGymError, TypeError):
    """An env method was called wrongly (for example, with a non-``str`` action)."""


class ResetNeeded(EnvUsageError):
    """``step()`` was called before ``reset()`` or after the episode ended."""


class PolicyError(AgentGymError):
    """A policy could not produce an action."""


class AgentGymWarning(UserWarning):
    """Root of the warnings agentgym emits."""


class PluginLoadWarning(AgentGymWarning):
    """A package's ``agentgym.envs`` entry point failed to load."""
