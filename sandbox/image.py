"""The sandbox image: Debian bookworm's python3, a non-root user, nothing else.

Two recipes make the same image (``agentgym sandbox build`` picks one):

- ``dockerfile``: ``sandbox/Dockerfile`` (``FROM debian:bookworm-slim``), where
  a registry can be reached; chosen by ``auto`` when the base image is
  already in the engine, so that ``auto`` never probes a registry;
- ``debootstrap``: a root filesystem built offline from Debian's packages
  (``debootstrap --variant=minbase --include=python3 bookworm DIR MIRROR``,
  with the mirror that apt already uses here), then ``docker import``-ed. The
  root filesystem is cached as a tarball (``$AGENTGYM_CACHE/sandbox/``, by
  default ``~/.cache/agentgym/sandbox/``), so a rebuild takes seconds.

The runner is not part of the image: every container is handed the runner of
the installed package when it starts, so the image never goes stale with it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from importlib import resources
from io import BytesIO
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError, SandboxError, SandboxUnavailable

__all__ = ["BASE_IMAGE", "DEFAULT_IMAGE", "IMAGE_VERSION", "METHODS", "SANDBOX_UID", "Progress",
           "apt_mirror", "build_image", "cache_dir", "image_exists", "import_rootfs",
           "rootfs_tarball"]

#: Bumped when the recipe changes, so an old image is not taken for a new one.
IMAGE_VERSION = "bookworm-1"
DEFAULT_IMAGE = f"agentgym-sandbox:{IMAGE_VERSION}"
BASE_IMAGE = "debian:bookworm-slim"
#: The uid (and gid) the code runs as in the container; no host user has it by default.
SANDBOX_UID = 61000
METHODS = ("auto", "dockerfile", "debootstrap")
_SUITE = "bookworm"
_DEFAULT_MIRROR = "http://deb.debian.org/debian"
_CHANGES = [f"USER {SANDBOX_UID}:{SANDBOX_UID}", "WORKDIR /work", "ENV LANG=C.UTF-8",
            'CMD ["python3"]']
_SLIM = ("usr/share/doc", "usr/share/man", "usr/share/info", "var/lib/apt/lists",
         "var/cache/apt/archives")

Progress = Callable[[str], None]


def cache_dir() -> Path:
    """Where the root filesystem tarball is kept between builds."""
    from agentgym.models.tiny import cache_root  # agentgym's one cache folder

    return cache_root() / "sandbox"


def apt_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt uses here (one-line or deb822 sources), else deb.debian.org."""
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for match in re.finditer(r"^\s*(?:deb\s+(?:\[[^\]]*\]\s+)?|URIs:\s*)(\S+)", text, re.MULTILINE):
            uri = match.group(1).rstrip("/")
            if uri.startswith(("http://", "https://")) and uri.endswith("/debian"):
                return uri
    return _DEFAULT_MIRROR


def image_exists(api: Any, image: str) -> bool:
    import docker.errors

    try:
        api.inspect_image(image)
    except docker.errors.ImageNotFound:
        return False
    return True


def build_image(api: Any, image: str = DEFAULT_IMAGE, *, method: str = "auto",
                mirror: str | None = None, force: bool = False,
                progress: Progress = print) -> str:
    """Make ``image`` in the engine behind ``api``; returns the method used ("existing" if none)."""
    if method not in METHODS:
        raise ConfigError(f"method must be one of {', '.join(METHODS)}; got {method!r}.")
    if not force and image_exists(api, image):
        progress(f"{image} is already there (use --force to rebuild it).")
        return "existing"
    if method == "auto":
        method = "dockerfile" if image_exists(api, BASE_IMAGE) else "debootstrap"
    progress(f"Building {image} with {method}.")
    if method == "dockerfile":
        _build_dockerfile(api, image, progress)
    else:
        import_rootfs(api, rootfs_tarball(mirror=mirror, force=force, progress=progress), image)
    progress(f"Built {image}.")
    return method


def _build_dockerfile(api: Any, image: str, progress: Progress) -> None:
    import docker.errors

    dockerfile = resources.files("agentgym.sandbox").joinpath("Dockerfile").read_bytes()
    try:
        for chunk in api.build(fileobj=BytesIO(dockerfile), tag=image, rm=True, decode=True):
            if "error" in chunk:
                raise SandboxError(f"docker build failed: {chunk['error'].strip()}. Without a "
                                   "registry, build offline: agentgym sandbox build --method "
                                   "debootstrap.")
            line = str(chunk.get("stream", "")).strip()
            if line:
                progress(line)
    except docker.errors.APIError as exc:
        raise SandboxError(f"docker build failed: {exc}") from exc


def rootfs_tarball(*, mirror: str | None = None, force: bool = False,
                   progress: Progress = print) -> Path:
    """The cached root filesystem tarball, built with debootstrap first if needed."""
    tarball = cache_dir() / f"rootfs-{IMAGE_VERSION}.tar"
    if tarball.exists() and not force:
        progress(f"Using the cached root filesystem {tarball}.")
        return tarball
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise SandboxUnavailable("debootstrap is not installed: apt-get install debootstrap "
                                 "(or build from the Dockerfile where a registry is reachable).")
    if os.geteuid() != 0:
        raise SandboxUnavailable("debootstrap needs root: run `sudo agentgym sandbox build`.")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tarball.parent, prefix="rootfs-") as work:
        root = Path(work) / "root"
        _debootstrap(debootstrap, root, mirror or apt_mirror(), progress)
        _customise(root)
        partial = Path(work) / "rootfs.tar"
        progress("Packing the root filesystem.")
        subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."],
                       check=True)
        partial.replace(tarball)
    return tarball


def _debootstrap(debootstrap: str, root: Path, mirror: str, progress: Progress) -> None:
    command = [debootstrap, "--variant=minbase", "--include=python3", _SUITE, str(root), mirror]
    progress(" ".join(command))
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as process:
        tail = []
        for line in process.stdout or []:
            tail = (tail + [line.rstrip()])[-20:]
            progress(line.rstrip())
    if process.returncode != 0:
        raise SandboxError(f"debootstrap failed (exit {process.returncode}) from {mirror}:\n"
                           + "\n".join(tail))


def _customise(root: Path) -> None:
    """The sandbox user, its /work, no setuid bits, no package caches."""
    uid = SANDBOX_UID
    with open(root / "etc" / "passwd", "a", encoding="utf-8") as handle:
        handle.write(f"sandbox:x:{uid}:{uid}:agentgym sandbox:/work:/usr/sbin/nologin\n")
    with open(root / "etc" / "group", "a", encoding="utf-8") as handle:
        handle.write(f"sandbox:x:{uid}:\n")
    work = root / "work"
    work.mkdir(mode=0o700, exist_ok=True)
    os.chown(work, uid, uid)
    for relative in _SLIM:
        shutil.rmtree(root / relative, ignore_errors=True)
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_mode & 0o6000:
            path.chmod(path.stat().st_mode & ~0o6000)


def import_rootfs(api: Any, tarball: Path, image: str) -> None:
    """``docker import`` a root filesystem tarball as ``image`` (repository:tag)."""
    import docker.errors

    repository, _, tag = image.rpartition(":")
    if not repository or "/" in tag:
        repository, tag = image, "latest"
    try:
        api.import_image_from_file(str(tarball), repository=repository, tag=tag, changes=_CHANGES)
    except docker.errors.APIError as exc:
        raise SandboxError(f"docker import of {tarball} failed: {exc}") from exc
