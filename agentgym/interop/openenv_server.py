"""Any agentgym env as an OpenEnv environment: the server, and OpenEnv's client class for it.

OpenEnv (``openenv-core``) serves a typed ``Environment`` with FastAPI: ``/reset``,
``/step``, ``/state``, ``/schema``, ``/metadata``, ``/health``, ``/mcp`` and the
``/ws`` WebSocket. Its HTTP routes make a fresh env per request; the WebSocket is the
session: one env instance per connection, many connections at once, idle sessions
closed by OpenEnv's reaper. This module gives OpenEnv an ``Environment`` that plays a
registered agentgym env (its ``-k`` arguments and tool wrapper included) and hands
it to OpenEnv's own ``create_app``, so the routes, schemas and sessions are OpenEnv's::

    agentgym env serve Sokoban-LLM-v0 --port 8000 -k dim_room=6

    from agentgym.interop.openenv_server import AgentGymAction, AgentGymEnvClient
    with AgentGymEnvClient(base_url="http://127.0.0.1:8000").sync() as client:
        result = client.reset(seed=3)          # result.observation.text, .instructions, .info
        result = client.step(AgentGymAction(text="<answer>Up</answer>"))

The models follow :mod:`agentgym.interop.textwire`; ``info`` is made JSON-safe with
:func:`~agentgym.interop.textwire.jsonable`.
"""

from __future__ import annotations

import argparse
import functools
import signal
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server import (
    Action,
    ConcurrencyConfig,
    Environment,
    Observation,
    State,
    create_app,
)
from openenv.core.env_server.types import EnvironmentMetadata
from pydantic import Field

import agentgym
from agentgym.asgi import ServerThread
from agentgym.errors import AgentGymError
from agentgym.interop.textwire import jsonable
from agentgym.registry import env_argument_error, env_info

__all__ = ["DEFAULT_IDLE_TIMEOUT", "DEFAULT_MAX_SESSIONS", "AgentGymAction", "AgentGymEnvClient",
           "AgentGymEnvironment", "AgentGymObservation", "AgentGymState", "OpenEnvServerThread",
           "create_openenv_app", "main", "serve_openenv"]

#: Sessions (WebSocket connections, one env each) served at once.
DEFAULT_MAX_SESSIONS = 64
#: Seconds without a message after which OpenEnv's reaper closes a session's env.
DEFAULT_IDLE_TIMEOUT = 600.0


class AgentGymAction(Action):
    """One turn of the agent: its whole message, written as the env's instructions say."""

    text: str = Field(description="The agent's message, e.g. '<answer>Up</answer>'.")


class AgentGymObservation(Observation):
    """What the env answers; OpenEnv adds ``reward`` and ``done`` (terminated or truncated)."""

    text: str = Field(default="", description="What the agent reads: the task, or the reply to its move.")
    instructions: str = Field(default="", description="The system prompt (on reset; empty after).")
    info: dict[str, Any] = Field(default_factory=dict, description="Gymnasium's info dict, as JSON.")
    terminated: bool = Field(default=False, description="The episode ended in the game (Gymnasium).")
    truncated: bool = Field(default=False, description="The episode was cut off (Gymnasium).")


class AgentGymState(State):
    """The session's episode: OpenEnv's ``episode_id`` and ``step_count``, the env and seed."""

    env_id: str = ""
    seed: int | None = None


class AgentGymEnvironment(Environment[AgentGymAction, AgentGymObservation, AgentGymState]):
    """One registered agentgym env behind OpenEnv's ``Environment`` interface."""

    # Each session gets its own instance: agentgym envs share no mutable state.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.env_id = env_id
        self._env = agentgym.make(env_id, **(env_kwargs or {}))
        self._state = AgentGymState(env_id=env_id)
        self._closed = False

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              options: dict[str, Any] | None = None) -> AgentGymObservation:
        self._check_open()
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an integer or null, got {seed!r}.")
        text, info = self._env.reset(seed=seed, options=options)
        self._state = AgentGymState(env_id=self.env_id, seed=seed, episode_id=episode_id, step_count=0)
        return AgentGymObservation(text=text, instructions=self._env.get_wrapper_attr("instructions"),
                                   info=jsonable(info))

    def step(self, action: AgentGymAction, timeout_s: float | None = None) -> AgentGymObservation:
        self._check_open()
        text, reward, terminated, truncated, info = self._env.step(action.text)
        self._state.step_count += 1
        return AgentGymObservation(text=text, info=jsonable(info), reward=float(reward),
                                   done=bool(terminated or truncated), terminated=bool(terminated),
                                   truncated=bool(truncated))

    @property
    def state(self) -> AgentGymState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=self.env_id, description=env_info(self.env_id).description,
                                   readme_content=self._env.get_wrapper_attr("instructions"),
                                   version=agentgym.__version__, author="agentgym")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._env.close()

    def _check_open(self) -> None:
        if self._closed:
            # OpenEnv's reaper closes an idle session's env but leaves its socket open.
            raise RuntimeError(f"This {self.env_id} session was closed (idle too long, or the server "
                               "is stopping): open a new connection.")


def create_openenv_app(env_id: str, env_kwargs: dict[str, Any] | None = None, *,
                       max_sessions: int = DEFAULT_MAX_SESSIONS,
                       idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT) -> Any:
    """OpenEnv's FastAPI app serving ``env_id``; the env is built once first, so bad
    arguments fail here (a :class:`~agentgym.errors.ConfigError` or the env's own error)."""
    kwargs = dict(env_kwargs or {})
    agentgym.make(env_id, **kwargs).close()
    factory = functools.partial(AgentGymEnvironment, env_id, kwargs)
    config = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout)
    app = create_app(factory, AgentGymAction, AgentGymObservation, env_name=env_id,
                     concurrency_config=config)
    app.add_middleware(_QuietDisconnect)
    return app


class _QuietDisconnect:
    """ASGI middleware: a WebSocket whose client already left ends quietly.

    OpenEnv's ``/ws`` handler closes the socket on its way out; when the client closed it
    first (as OpenEnv's own client does), that close raises ``WebSocketDisconnect``, which
    uvicorn would log as an error with a traceback on every disconnect.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            pass


def serve_openenv(env_id: str, env_kwargs: dict[str, Any] | None = None, *, host: str = "127.0.0.1",
                  port: int = 8000, max_sessions: int = DEFAULT_MAX_SESSIONS,
                  idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT, log_level: str = "warning") -> None:
    """Serve ``env_id`` over OpenEnv's protocol until SIGINT or SIGTERM (blocks)."""
    import uvicorn

    app = create_openenv_app(env_id, env_kwargs, max_sessions=max_sessions, idle_timeout=idle_timeout)
    # Docker stops a container with SIGTERM; uvicorn shuts down gracefully on it, then
    # re-raises it to the handler it found: a no-op one lets this return normally.
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False,
                    timeout_graceful_shutdown=5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _ignore(signum: int, frame: object) -> None:
    """A signal handler that does nothing (see :func:`serve_openenv`)."""


def main(argv: list[str] | None = None) -> None:
    """``python -m agentgym.interop ENV [-k KEY=VALUE]... [--port P]``: the env server image's
    entry point. People run ``agentgym env serve``; the image has no rollout stack, which the
    ``agentgym`` command imports when it starts, so its entry point does without the command."""
    import yaml

    parser = argparse.ArgumentParser(prog="python -m agentgym.interop", description=main.__doc__)
    parser.add_argument("env_id", metavar="ENV")
    parser.add_argument("-k", "--env-kwarg", action="append", default=[], metavar="KEY=VALUE",
                        help="env constructor argument, VALUE read as YAML; repeatable")
    parser.add_argument("--host", default="0.0.0.0", help="interface (the container's own network)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS)
    parser.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT, help="0: never")
    args = parser.parse_args(argv)
    kwargs = {}
    for pair in args.env_kwarg:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            parser.error(f"-k takes KEY=VALUE, got {pair!r}")
        kwargs[key.strip()] = yaml.safe_load(value)
    try:
        serve_openenv(args.env_id, kwargs, host=args.host, port=args.port, max_sessions=args.max_sessions,
                      idle_timeout=args.idle_timeout or None)
    except AgentGymError as exc:
        parser.exit(2, f"error: {exc}\n")
    except (TypeError, ValueError) as exc:  # an argument the env does not take, a value it cannot use
        parser.exit(2, f"error: {env_argument_error(args.env_id, kwargs, exc)}\n")


class OpenEnvServerThread(ServerThread):
    """The OpenEnv server for ``env_id`` in a thread of this process, on a loopback port.

    For tests, benchmarks and notebooks (``agentgym env serve`` runs one for real)::

        with OpenEnvServerThread("Sokoban-LLM-v0") as server:
            env = agentgym.make(f"openenv:{server.url}")
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, *,
                 port: int | None = None, max_sessions: int = DEFAULT_MAX_SESSIONS,
                 idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT) -> None:
        import uvicorn

        from agentgym.serve.launch import free_port

        self.port = port or free_port()
        app = create_openenv_app(env_id, env_kwargs, max_sessions=max_sessions, idle_timeout=idle_timeout)
        # lifespan on: OpenEnv starts its idle-session reaper on startup.
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                access_log=False, lifespan="on", timeout_graceful_shutdown=2)
        super().__init__(config, name="agentgym-openenv", what="The OpenEnv server",
                         url=f"http://127.0.0.1:{self.port}")


class AgentGymEnvClient(EnvClient[AgentGymAction, AgentGymObservation, AgentGymState]):
    """OpenEnv's client for an agentgym env server: typed results over one WebSocket session.

    Async, as every OpenEnv client; ``.sync()`` gives the blocking one. ``step`` also
    takes a plain ``str``. The three methods below are the hooks OpenEnv's ``EnvClient``
    declares abstract for each env's client to fill in.
    """

    def _step_payload(self, action: AgentGymAction | str) -> dict[str, Any]:
        if isinstance(action, str):
            action = AgentGymAction(text=action)
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[AgentGymObservation]:
        observation = AgentGymObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                          done=payload.get("done", False))
        return StepResult(observation=observation, reward=payload.get("reward"), done=observation.done)

    def _parse_state(self, payload: dict[str, Any]) -> AgentGymState:
        return AgentGymState(**payload)
