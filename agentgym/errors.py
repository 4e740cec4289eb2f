"""Every exception agentgym raises on purpose.

One root, so ``except AgentGymError`` catches all of ours and nothing else::

    AgentGymError
    ├── ConfigError            a value given by the user is out of range or inconsistent
    │   └── TokenizerMismatchError  rows (or a server) in another tokenizer than the model's
    ├── RegistryError
    │   ├── UnknownEnvError    no env with that id ("did you mean ...")
    │   ├── DuplicateEnvError  an id registered twice with different entry points
    │   └── UnknownTrainerError  no trainer with that name ("did you mean ...")
    ├── EnvUsageError          the env was driven out of order or given a non-str action
    │   └── ResetNeeded        step() before reset(), or after the episode ended
    ├── PolicyError            a policy could not produce an action (e.g. a script ran out)
    │   └── ServerRequestError a request to the model server failed (after its retries)
    ├── ServerStartError       a model server agentgym launched exited or did not answer in time
    ├── WeightSyncError        a running model server did not take the new weights
    ├── TrainingStalledError   a training run learned nothing for run.max_idle_steps steps in a row
    ├── SandboxError           the sandbox itself failed (never the untrusted code it ran)
    │   └── SandboxUnavailable no engine, no image, or no such backend here ("run agentgym sandbox build")
    ├── ToolInputError         raised inside a tool for input the agent got wrong; Tool.call returns it as text
    ├── MissingDependencyError an optional package is not installed (the message names the extra)
    ├── BrowserError           a web page could not be fetched, or a browser backend could not start
    ├── JudgeError             an LLM judge's server refused or kept failing a request
    ├── RolloutWorkerError     a Ray actor playing episodes died or failed (rows already sent are kept)
    ├── RemoteEnvError         an env from outside (an OpenEnv server, a verifiers env) failed mid-episode
    └── ServeError             the built-in server refused a request (HTTP status, param)
        ├── InvalidRequestError  a field of the request is invalid (400)
        │   ├── ModelNotFoundError   no model or adapter is served under that name (404)
        │   └── WeightLoadError      a weights folder is missing, unreadable or mismatched (400)
        ├── AuthenticationError  no or a wrong API key (401)
        └── UnsupportedError     the server lacks a feature (e.g. LoRA without peft) (501)

    AgentGymWarning (a UserWarning)
    ├── PluginLoadWarning      a third-party env plugin failed to load; the rest still work
    └── UnknownTokenizerWarning  rows record no tokenizer (an older file): they cannot be checked

Bad *text* from an agent is never an exception: environments answer it with
feedback and ``info["action_valid"] = False``. These errors are for code that
calls agentgym wrongly; each message says what was expected, what came, and
what to do.
"""

from __future__ import annotations

__all__ = [
    "AgentGymError",
    "AgentGymWarning",
    "AuthenticationError",
    "BrowserError",
    "ConfigError",
    "DuplicateEnvError",
    "EnvUsageError",
    "InvalidRequestError",
    "JudgeError",
    "MissingDependencyError",
    "ModelNotFoundError",
    "PluginLoadWarning",
    "PolicyError",
    "RegistryError",
    "RemoteEnvError",
    "ResetNeeded",
    "RolloutWorkerError",
    "SandboxError",
    "SandboxUnavailable",
    "ServeError",
    "ServerRequestError",
    "ServerStartError",
    "TokenizerMismatchError",
    "ToolInputError",
    "TrainingStalledError",
    "UnknownEnvError",
    "UnknownTokenizerWarning",
    "UnknownTrainerError",
    "UnsupportedError",
    "WeightLoadError",
    "WeightSyncError",
]


class AgentGymError(Exception):
    """Root of every error agentgym raises on purpose."""


class ConfigError(AgentGymError, ValueError):
    """A configuration value is invalid; the message names the field and the fix."""


class TokenizerMismatchError(ConfigError):
    """Token ids made by one tokenizer were given to a model with another (rows of a rollout file, a
    server that serves another model); the message names both and what to run instead."""


class RegistryError(AgentGymError):
    """Something is wrong with the env registry."""


def _one_of(names: list[str]) -> str:
    """'a', 'a' or 'b', 'a', 'b' or 'c'."""
    quoted = [repr(name) for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


class UnknownEnvError(RegistryError, LookupError):
    """No env is registered under the requested id."""

    def __init__(self, env_id: str, suggestions: list[str]) -> None:
        self.env_id = env_id
        self.suggestions = suggestions
        hint = f" Did you mean {_one_of(suggestions)}?" if suggestions else ""
        super().__init__(
            f"No environment registered as {env_id!r}.{hint} Run `agentgym list` to see them all."
        )


class UnknownTrainerError(RegistryError, LookupError):
    """No trainer is registered under the requested name."""

    def __init__(self, name: str, suggestions: list[str], known: list[str]) -> None:
        self.name = name
        self.suggestions = suggestions
        hint = f" Did you mean {_one_of(suggestions)}?" if suggestions else ""
        super().__init__(f"No trainer registered as {name!r}.{hint} Registered: {', '.join(known)}.")


class DuplicateEnvError(RegistryError):
    """The same id was registered twice with different entry points."""


class EnvUsageError(AgentGymError, TypeError):
    """An env method was called wrongly (for example, with a non-``str`` action)."""


class ResetNeeded(EnvUsageError):
    """``step()`` was called before ``reset()`` or after the episode ended."""


class PolicyError(AgentGymError):
    """A policy could not produce an action."""


class ServerRequestError(PolicyError):
    """A request to the model server failed, after retrying what can be retried."""


class ServerStartError(AgentGymError, RuntimeError):
    """A model server process (e.g. vLLM) exited or did not answer before its startup timeout.

    The message ends with the tail of the server's log.
    """


class WeightSyncError(AgentGymError, RuntimeError):
    """A running model server did not take new weights (the call failed or was refused)."""


class TrainingStalledError(AgentGymError, RuntimeError):
    """A training run took no update for ``run.max_idle_steps`` steps in a row (its message says why)."""


class SandboxError(AgentGymError, RuntimeError):
    """The sandbox infrastructure failed (engine gone, container lost, runner broken).

    Code that misbehaves inside the sandbox never raises this: it gets an
    ``ExecResult`` with its exit code, ``timed_out`` or ``oom`` set.
    """


class SandboxUnavailable(SandboxError):
    """A sandbox backend cannot run here: no Docker engine, no image, no bubblewrap.

    The message says what is missing and the command that fixes it.
    """


class ToolInputError(AgentGymError, ValueError):
    """A tool was called with input it cannot use (an empty query, a page it has no link to).

    A tool's ``run`` raises it; :meth:`agentgym.tools.Tool.call` catches it and
    returns ``"Error: <message>"`` to the agent, so it never reaches the caller.
    """


class BrowserError(AgentGymError):
    """A web page could not be fetched (refused, timed out, a host not allowed, too many
    redirects), or a browser backend (headless Chromium) could not start.

    The browser tool turns it into ``"Error: ..."`` text for the agent.
    """


class MissingDependencyError(AgentGymError, ImportError):
    """An optional package that this feature needs is not installed.

    The message names the package and the command that installs it, written by
    :meth:`install_hint`: ``scripts/setup.sh math`` (an unrelated ``agentgym`` is
    on PyPI, so never ``pip install 'agentgym[math]'``).
    """

    @staticmethod
    def install_hint(extra: str, packages: str | None = None) -> str:
        """How to install the ``extra`` of pyproject.toml, e.g. ``install_hint("math", "math-verify")``
        -> ``scripts/setup.sh math (from the agentgym repository root; or: pip install math-verify)``."""
        alone = f"; or: pip install {packages}" if packages else ""
        return f"scripts/setup.sh {extra} (from the agentgym repository root{alone})"


class RolloutWorkerError(AgentGymError, RuntimeError):
    """A Ray actor playing episodes died (node lost, out of memory) or raised.

    The rows it and the other actors streamed back before are already with the
    driver's writer; ``--resume`` plays only the rest.
    """


class RemoteEnvError(AgentGymError, RuntimeError):
    """An env that lives outside agentgym failed: an OpenEnv server dropped its WebSocket,
    did not answer in time, answered what cannot be read (not UTF-8, not JSON) or with a
    schema that has no text mapping; a verifiers env raised or stalled.

    Raised by ``reset`` or ``step``, so the rollout manager records the episode as failed,
    with this message as its error, and plays on.
    """


class JudgeError(AgentGymError, RuntimeError):
    """An LLM judge could not score: its server refused the request (wrong model,
    key or URL) or kept failing after the judge's retries."""


class ServeError(AgentGymError):
    """The built-in server refused a request; rendered as the OpenAI error shape.

    ``status_code`` is the HTTP status, ``param`` the request field at fault
    (or None), ``error_type`` the ``type`` of the error body (vLLM's names).
    """

    status_code: int = 500
    error_type: str = "InternalServerError"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequestError(ServeError, ValueError):
    """A request field is invalid; the message names it, says what came and what is allowed."""

    status_code = 400
    error_type = "BadRequestError"


class ModelNotFoundError(InvalidRequestError, LookupError):
    """No model (or LoRA adapter) is served under the requested name."""

    status_code = 404
    error_type = "NotFoundError"


class WeightLoadError(InvalidRequestError):
    """New weights could not be loaded: missing folder, unknown tensor names or shapes."""


class AuthenticationError(ServeError):
    """The server wants ``Authorization: Bearer KEY`` and got no key or a wrong one."""

    status_code = 401
    error_type = "AuthenticationError"


class UnsupportedError(ServeError):
    """The server cannot do this here (for example LoRA adapters without ``peft``)."""

    status_code = 501
    error_type = "NotImplementedError"


class AgentGymWarning(UserWarning):
    """Root of the warnings agentgym emits."""


class PluginLoadWarning(AgentGymWarning):
    """A package's ``agentgym.envs`` entry point failed to load."""


class UnknownTokenizerWarning(AgentGymWarning):
    """Rows that record no tokenizer (written before rows did) are read unchecked."""
