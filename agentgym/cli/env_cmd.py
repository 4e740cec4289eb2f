"""``agentgym env serve | build``: any registered env as an OpenEnv server, and its image."""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer
from rich.markup import escape

from agentgym.cli.common import EnvKwargOption, console, fail, make_env, parse_env_kwargs
from agentgym.errors import AgentGymError, MissingDependencyError
from agentgym.net import is_loopback

__all__ = ["app", "build_command", "serve_command"]

app = typer.Typer(help="Serve an env to other frameworks (OpenEnv), and build its container image.",
                  no_args_is_help=True)

_INSTALL_HINT = MissingDependencyError.install_hint("interop", "openenv-core")


@app.command("serve")
def serve_command(
    env_id: Annotated[str, typer.Argument(metavar="ENV", help="Env id, e.g. Sokoban-LLM-v0.")],
    env_kwarg: EnvKwargOption = [],  # noqa: B006
    host: Annotated[str, typer.Option(metavar="HOST", help="Interface to bind. OpenEnv has no authentication: "
                                           "anything but loopback needs --allow-remote.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", help="TCP port.")] = 8000,
    max_sessions: Annotated[int, typer.Option(metavar="N", help="WebSocket sessions (one env each) at once.")] = 64,
    idle_timeout: Annotated[float, typer.Option(
        metavar="S", help="Seconds without a message before a session's env is closed; 0: never.")] = 600.0,
    allow_remote: Annotated[bool, typer.Option(
        "--allow-remote", help="Bind a non-loopback interface (inside a container, or a trusted network).")] = False,
) -> None:
    """Serve an env as an OpenEnv environment (/reset, /step, /state, /schema, /ws) until Ctrl-C."""
    problem = _serve_problem(host, port, max_sessions, idle_timeout, allow_remote)
    if problem:
        raise fail(problem)
    kwargs = parse_env_kwargs(env_kwarg)
    make_env(env_id, kwargs).close()  # a bad id or argument: one line, before anything starts
    try:
        from agentgym.interop.openenv_server import serve_openenv
    except ImportError as exc:
        raise fail(f"agentgym env serve needs openenv-core, which is not installed: {_INSTALL_HINT}.") from exc
    console.print(f"Serving {escape(env_id)} as an OpenEnv environment at http://{escape(host)}:{port} "
                  f"(WebSocket /ws; {max_sessions} sessions at once).")
    try:
        serve_openenv(env_id, kwargs, host=host, port=port, max_sessions=max_sessions,
                      idle_timeout=idle_timeout or None)
    except AgentGymError as exc:
        raise fail(str(exc)) from exc


def _serve_problem(host: str, port: int, max_sessions: int, idle_timeout: float, allow_remote: bool) -> str:
    """What is wrong with ``env serve``'s options ('' when nothing is)."""
    if not 1 <= port <= 65535:
        return f"--port must be between 1 and 65535, got {port}."
    if not 1 <= max_sessions <= 4096:
        return f"--max-sessions must be between 1 and 4096, got {max_sessions}."
    if not idle_timeout >= 0:
        return f"--idle-timeout must be 0 (never) or more seconds, got {idle_timeout:g}."
    if not is_loopback(host) and not allow_remote:
        return (f"Refusing to bind {host}: OpenEnv's protocol has no authentication, so anyone who "
                "reaches the port plays the env and its tools. Bind 127.0.0.1, or pass --allow-remote "
                "inside a container or on a network you trust.")
    return ""


@app.command("build")
def build_command(
    image: Annotated[str | None, typer.Option(metavar="NAME:TAG", help="Image name:tag.")] = None,
    extra: Annotated[list[str], typer.Option(
        metavar="EXTRA", help="An extra of pyproject.toml whose packages the image also carries (math, "
                              "retrieval, ...); repeatable.")] = [],  # noqa: B006
    base: Annotated[str | None, typer.Option(
        metavar="IMAGE", help="Base image with python3 (default: the sandbox image, built offline).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if the image is there.")] = False,
    docker_host: Annotated[str | None, typer.Option(
        metavar="URL", help="Docker engine URL (default: DOCKER_HOST or the local socket).")] = None,
) -> None:
    """Build the image that serves any env over OpenEnv (offline: no registry is needed)."""
    from agentgym.interop.image import DEFAULT_IMAGE, build_env_image, run_hint
    from agentgym.sandbox.docker import connect

    try:
        api = connect(docker_host)
        with contextlib.closing(api), console.status("Building the env server image...") as status:
            def progress(line: str) -> None:
                status.update(escape(line[:120]))

            name = build_env_image(api, image or DEFAULT_IMAGE, extras=extra, base=base, force=force,
                                   progress=progress)
    except AgentGymError as exc:
        raise fail(str(exc)) from exc
    console.print(f"Built {escape(name)}. Run an env in it with:\n  {escape(run_hint(name))}", soft_wrap=True)
