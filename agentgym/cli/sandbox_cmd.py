"""``agentgym sandbox build | check | clean | serve``: the code sandbox's image, containers, service."""

from __future__ import annotations

import contextlib
import shutil
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from agentgym.cli.common import console, fail
from agentgym.cli.help_screen import HelpGroup
from agentgym.errors import AgentGymError
from agentgym.net import is_loopback

__all__ = ["app", "build_command", "check_command", "clean_command", "serve_command"]

app = typer.Typer(help="The code sandbox: build its image, check what is missing, clean up, "
                       "serve it to other hosts.", no_args_is_help=True, cls=HelpGroup)

_IMAGE_HELP = "Image name:tag."
_HOST_HELP = "Docker engine URL (default: DOCKER_HOST or the local socket)."


@app.command("build")
def build_command(
    method: Annotated[str, typer.Option(help="auto (the Dockerfile if its base image is here, "
                                             "else debootstrap), dockerfile or debootstrap.")] = "auto",
    image: Annotated[str | None, typer.Option(help=_IMAGE_HELP)] = None,
    mirror: Annotated[str | None, typer.Option(
        help="Debian mirror for debootstrap (default: the one apt uses here).")] = None,
    force: Annotated[bool, typer.Option(help="Rebuild even if the image (or the cached root "
                                              "filesystem) is there.")] = False,
    docker_host: Annotated[str | None, typer.Option(help=_HOST_HELP)] = None,
) -> None:
    """Build the sandbox image (offline with debootstrap where no registry is reachable)."""
    from agentgym.sandbox.docker import connect
    from agentgym.sandbox.image import DEFAULT_IMAGE, build_image

    try:
        api = connect(docker_host)
        with console.status("Building the sandbox image...") as status:
            def progress(line: str) -> None:
                status.update(escape(line[:120]))
                if not line.startswith(("I: Retrieving", "I: Validating", "I: Extracting",
                                        "I: Unpacking", "I: Configuring", "Step ", " ---> ")):
                    console.print(escape(line), soft_wrap=True)

            with contextlib.closing(api):
                build_image(api, image or DEFAULT_IMAGE, method=method, mirror=mirror,
                            force=force, progress=progress)
    except AgentGymError as exc:
        raise fail(str(exc)) from exc


@app.command("check")
def check_command(
    image: Annotated[str | None, typer.Option(help=_IMAGE_HELP)] = None,
    docker_host: Annotated[str | None, typer.Option(help=_HOST_HELP)] = None,
) -> None:
    """Show what the sandbox has here and what is missing, with the fix for each."""
    from agentgym.sandbox.image import DEFAULT_IMAGE

    table = Table(title="agentgym sandbox")
    for column in ("part", "status", "fix"):
        table.add_column(column, overflow="fold")
    rows, docker_ok = _docker_rows(image or DEFAULT_IMAGE, docker_host)
    rows += _local_rows()
    for part, status, fix in rows:
        table.add_row(escape(part), status, escape(fix))
    console.print(table)
    if docker_ok:
        backend = "docker"
    else:
        from agentgym.sandbox.local import bwrap_path

        backend = "bubblewrap (local)" if bwrap_path() else "subprocess (local, isolates least)"
    console.print(f"open_sandbox() would use: [bold]{backend}[/]")


def _docker_rows(image: str, docker_host: str | None) -> tuple[list[tuple[str, str, str]], bool]:
    """Rows for the docker package, the engine, the image and leftovers; and whether all is well."""
    from agentgym.errors import SandboxUnavailable

    try:
        from agentgym.sandbox.container import sandbox_containers
        from agentgym.sandbox.docker import connect
        from agentgym.sandbox.image import image_exists

        api = connect(docker_host)
    except SandboxUnavailable as exc:
        return [("docker engine", "[red]missing[/]", str(exc))], False
    with contextlib.closing(api):
        version = api.version().get("Version", "?")
        has_image = image_exists(api, image)
        leftovers = len(sandbox_containers(api))
    rows = [("docker engine", f"[green]answering[/] (server {escape(version)})", "")]
    rows.append((f"image {image}", "[green]present[/]" if has_image else "[red]missing[/]",
                 "" if has_image else "agentgym sandbox build"))
    rows.append(("leftover containers", str(leftovers), "agentgym sandbox clean" if leftovers else ""))
    return rows, has_image


def _local_rows() -> list[tuple[str, str, str]]:
    from agentgym.sandbox.image import cache_dir
    from agentgym.sandbox.local import bwrap_path

    bwrap = shutil.which("bwrap")
    if bwrap is None:
        bwrap_row = ("bubblewrap", "[yellow]missing[/]", "apt-get install bubblewrap")
    elif bwrap_path() is None:
        bwrap_row = ("bubblewrap", "[yellow]cannot create namespaces here[/]",
                     "allow unprivileged user namespaces, or use Docker")
    else:
        bwrap_row = ("bubblewrap", f"[green]works[/] ({escape(bwrap)})", "")
    debootstrap = shutil.which("debootstrap")
    tarballs = sorted(cache_dir().glob("rootfs-*.tar"))
    return [
        bwrap_row,
        ("debootstrap (offline image builds)",
         f"[green]present[/] ({escape(debootstrap)})" if debootstrap else "[yellow]missing[/]",
         "" if debootstrap else "apt-get install debootstrap"),
        ("cached root filesystem", escape(", ".join(map(str, tarballs))) or "none",
         "" if tarballs else "made by agentgym sandbox build --method debootstrap"),
    ]


@app.command("clean")
def clean_command(
    all_: Annotated[bool, typer.Option("--all", help="Also remove containers of sandboxes that "
                                                     "are still running.")] = False,
    docker_host: Annotated[str | None, typer.Option(help=_HOST_HELP)] = None,
) -> None:
    """Remove sandbox containers left behind by processes that died."""
    from agentgym.sandbox.container import remove_container, sandbox_containers
    from agentgym.sandbox.docker import connect

    try:
        api = connect(docker_host)
    except AgentGymError as exc:
        raise fail(str(exc)) from exc
    with contextlib.closing(api):
        found = sandbox_containers(api, include_live=all_)
        for info in found:
            remove_container(api, info["Id"])
    console.print(f"Removed {len(found)} sandbox container{'s' * (len(found) != 1)}.")


@app.command("serve")
def serve_command(
    host: Annotated[str, typer.Option(help="Interface to bind. Anything but loopback is "
                                           "reachable by others and needs --token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8100,
    backend: Annotated[str, typer.Option(help="docker (the warm pool), local (isolates less), "
                                              "or auto (docker when it can run here).")] = "docker",
    token: Annotated[str | None, typer.Option(
        envvar="AGENTGYM_SANDBOX_TOKEN", show_envvar=True,
        help="Require 'Authorization: Bearer TOKEN' on every request.")] = None,
    pool_size: Annotated[int, typer.Option(help="Runs at once (Docker: warm containers); "
                                                "more requests wait their turn.")] = 4,
    image: Annotated[str | None, typer.Option(help=_IMAGE_HELP)] = None,
) -> None:
    """Serve the sandbox over HTTP (POST /run, GET /health) until Ctrl-C, for other hosts."""
    from agentgym.sandbox.service import serve_sandbox

    problem = _serve_problem(host, port, backend, token, pool_size)
    if image and backend == "local":
        problem = "--image is for the docker backend; leave it out with --backend local."
    if problem:
        raise fail(problem)
    try:
        sandbox = _open_served_sandbox(backend, pool_size, image)
    except AgentGymError as exc:
        raise fail(str(exc)) from exc
    with sandbox:
        console.print(f"Serving the {sandbox.name} sandbox at http://{escape(host)}:{port} "
                      f"({pool_size} runs at once{', token required' if token else ''}).")
        serve_sandbox(sandbox, host=host, port=port, token=token, pool_size=pool_size)


def _serve_problem(host: str, port: int, backend: str, token: str | None, pool_size: int) -> str:
    """What is wrong with ``sandbox serve``'s options ('' when nothing is)."""
    if backend not in ("docker", "local", "auto"):
        return f"--backend must be docker, local or auto; got {backend!r}."
    if not 1 <= port <= 65535:
        return f"--port must be between 1 and 65535, got {port}."
    if not 1 <= pool_size <= 256:
        return f"--pool-size must be between 1 and 256, got {pool_size}."
    if token is not None and not token.strip():
        return "--token is empty; give a real token or leave it out (loopback only)."
    if not is_loopback(host) and not token:
        return (f"Refusing to bind {host} without a token: anyone who can reach it could run "
                "code on this host. Pass --token T (or set AGENTGYM_SANDBOX_TOKEN), or bind "
                "127.0.0.1.")
    return ""


def _open_served_sandbox(backend: str, pool_size: int, image: str | None) -> Any:
    """The sandbox to serve; "auto" here never means a remote service (no serving in a loop)."""
    from agentgym.sandbox import open_sandbox

    options: dict[str, Any] = {}
    if backend in ("docker", "auto"):
        options.update(pool_size=pool_size, max_containers=pool_size)
        if image:
            options["image"] = image
    return open_sandbox(backend, **options)
