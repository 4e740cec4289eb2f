"""The container image that serves any agentgym env over OpenEnv (``agentgym env build``).

Built offline, as the sandbox image is (:mod:`agentgym.sandbox.image`): no registry and
no package index is reached. The base is the sandbox image (Debian bookworm's python3,
the non-root ``sandbox`` user), and on it goes what this Python runs: agentgym's own
code, and the files of each installed distribution that serving needs (agentgym's
dependencies, openenv-core's and theirs, and those of the extras asked for), copied from
this environment's site-packages. So the image runs the very versions the host runs; it
needs a CPython of the same minor version as the base's (3.11 on bookworm) and Linux
wheels that bookworm's glibc runs. OpenEnv's web UI (gradio, its heaviest dependency) is
left out: OpenEnv's server runs without it.

    agentgym env build
    docker run --rm -p 127.0.0.1:8000:8000 agentgym-env:0.1.0 Sokoban-LLM-v0 -k dim_room=6
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import agentgym
from agentgym.errors import ConfigError, SandboxError, SandboxUnavailable

__all__ = ["CONTAINER_PORT", "DEFAULT_IMAGE", "Progress", "build_env_image", "distributions_to_copy", "run_hint"]

DEFAULT_IMAGE = f"agentgym-env:{agentgym.__version__}"
#: The port the server listens on inside the container.
CONTAINER_PORT = 8000
#: What serving needs beyond agentgym's own dependencies.
_SERVING = ("openenv-core", "fastapi", "uvicorn", "websockets")
#: Left out: OpenEnv's optional web UI and what only it needs.
_LEFT_OUT = frozenset({"gradio"})
_AGENTGYM_PACKAGES = ("agentgym", "agentgym.envs", "agentgym.sandbox", "agentgym.trainers")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")

Progress = Callable[[str], None]


def run_hint(image: str) -> str:
    """The command that serves an env from ``image`` on this host's loopback."""
    return f"docker run --rm -p 127.0.0.1:8000:{CONTAINER_PORT} {image} Sokoban-LLM-v0 -k dim_room=6"


def distributions_to_copy(extras: Iterable[str] = ()) -> list[importlib.metadata.Distribution]:
    """The installed distributions serving needs: agentgym's requirements (with ``extras``), the
    serving stack, and everything they require here, gradio's UI left out."""
    try:
        own = importlib.metadata.distribution("agentgym")
    except importlib.metadata.PackageNotFoundError as exc:
        raise ConfigError("agentgym is not installed in this Python: scripts/setup.sh interop.") from exc
    wanted = [Requirement(text) for text in own.requires or []
              if _applies(Requirement(text), set(extras))]
    wanted += [Requirement(name) for name in _SERVING]
    found: dict[str, importlib.metadata.Distribution] = {}
    while wanted:
        requirement = wanted.pop()
        name = canonicalize_name(requirement.name)
        if name in found or name in _LEFT_OUT or name == "agentgym":
            continue
        try:
            dist = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError as exc:
            if requirement.name in _SERVING:
                raise ConfigError(f"{requirement.name} is not installed: scripts/setup.sh interop.") from exc
            continue  # an optional requirement this environment does without
        found[name] = dist
        wanted += [Requirement(text) for text in dist.requires or []
                   if _applies(Requirement(text), set(requirement.extras))]
    return sorted(found.values(), key=lambda dist: canonicalize_name(dist.metadata["Name"]))


def _applies(requirement: Requirement, extras: set[str]) -> bool:
    """Whether ``requirement`` holds here, for the given extras of its parent."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def build_env_image(api: Any, image: str = DEFAULT_IMAGE, *, extras: Iterable[str] = (),
                    base: str | None = None, force: bool = False, progress: Progress = print) -> str:
    """Build ``image`` in the engine behind ``api`` (a docker ``APIClient``); returns its name."""
    from agentgym.sandbox.image import DEFAULT_IMAGE as SANDBOX_IMAGE
    from agentgym.sandbox.image import image_exists

    base = base or SANDBOX_IMAGE
    if not force and image_exists(api, image):
        progress(f"{image} is already there (use --force to rebuild it).")
        return image
    if not image_exists(api, base):
        raise SandboxUnavailable(f"The base image {base} is not in the engine: build it with "
                                 "`agentgym sandbox build` (offline), or pass --base IMAGE with python3 "
                                 f"{sys.version_info.major}.{sys.version_info.minor}.")
    with tempfile.TemporaryDirectory(prefix="agentgym-env-image-") as folder:
        context = Path(folder)
        site = context / "site"
        _copy_agentgym(site)
        dists = distributions_to_copy(extras)
        for dist in dists:
            _copy_distribution(dist, site)
        progress(f"Copied agentgym and {len(dists)} distributions; building {image} on {base}.")
        (context / "Dockerfile").write_text(_dockerfile(base))
        _docker_build(api, context, image, progress)
    progress(f"Built {image}.")
    return image


def _dockerfile(base: str) -> str:
    return "\n".join([
        f"FROM {base}",
        "COPY site /opt/agentgym/site",
        "ENV PYTHONPATH=/opt/agentgym/site PYTHONDONTWRITEBYTECODE=1 LANG=C.UTF-8",
        f"EXPOSE {CONTAINER_PORT}",
        # Inside its own network namespace the server binds every interface; publish the
        # port on the host's loopback (docker run -p 127.0.0.1:P:8000).
        f'ENTRYPOINT ["python3", "-m", "agentgym.interop", "--host", "0.0.0.0", "--port", "{CONTAINER_PORT}"]',
        'CMD ["Bandit-LLM-v0"]',
        "",
    ])


def _copy_agentgym(site: Path) -> None:
    """agentgym's packages, laid out as a wheel installs them (the pillar folders inside it)."""
    for name in _AGENTGYM_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"{name} cannot be found in this Python: scripts/setup.sh interop.")
        source = Path(next(iter(spec.submodule_search_locations)))
        target = site.joinpath(*name.split("."))
        if not target.exists():
            shutil.copytree(source, target, ignore=_IGNORE)


def _copy_distribution(dist: importlib.metadata.Distribution, site: Path) -> None:
    """The files a distribution installed into site-packages (its RECORD), but scripts and caches."""
    root = Path(str(dist.locate_file(""))).resolve()
    for file in dist.files or []:
        path = Path(str(dist.locate_file(file))).resolve()
        if "__pycache__" in file.parts or not path.is_file() or not path.is_relative_to(root):
            continue
        target = site / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def _docker_build(api: Any, context: Path, image: str, progress: Progress) -> None:
    import docker.errors

    try:
        for chunk in api.build(path=str(context), tag=image, rm=True, decode=True, pull=False):
            if "error" in chunk:
                raise SandboxError(f"docker build of {image} failed: {chunk['error'].strip()}")
            line = str(chunk.get("stream", "")).strip()
            if line:
                progress(line)
    except docker.errors.APIError as exc:
        raise SandboxError(f"docker build of {image} failed: {exc}") from exc
