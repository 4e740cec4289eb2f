"""The image recipe: the apt mirror it reads, the cached root filesystem, docker import."""

from __future__ import annotations

import contextlib
import io
import tarfile
from importlib import resources
from pathlib import Path

import pytest
from sandbox_helpers import require_docker

from agentgym.errors import ConfigError
from agentgym.sandbox.docker import connect
from agentgym.sandbox.image import (BASE_IMAGE, DEFAULT_IMAGE, IMAGE_VERSION, SANDBOX_UID,
                                    apt_mirror, build_image, image_exists)


def _apt(tmp_path: Path, sources: str = "", lists: dict[str, str] | None = None) -> Path:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(sources)
    for name, text in (lists or {}).items():
        (tmp_path / "sources.list.d" / name).write_text(text)
    return tmp_path


def test_the_mirror_comes_from_deb822_sources(tmp_path: Path) -> None:
    apt = _apt(tmp_path, lists={"debian.sources": (
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm\n")})
    assert apt_mirror(apt) == "http://mirror.example/debian"


def test_the_mirror_comes_from_one_line_sources(tmp_path: Path) -> None:
    apt = _apt(tmp_path, "# deb http://old.example/debian bookworm main\n"
                         "deb [signed-by=/k.gpg] https://deb.example.org/debian bookworm main\n")
    assert apt_mirror(apt) == "https://deb.example.org/debian"


def test_without_a_debian_source_the_mirror_is_debs_own(tmp_path: Path) -> None:
    apt = _apt(tmp_path, lists={"node.list": "deb https://deb.nodesource.com/node_20.x nodistro main\n"})
    assert apt_mirror(apt) == "http://deb.debian.org/debian"


def test_the_dockerfile_ships_and_matches_the_offline_recipe() -> None:
    text = resources.files("agentgym.sandbox").joinpath("Dockerfile").read_text()
    assert f"FROM {BASE_IMAGE}\n" in text and "install -y --no-install-recommends python3" in text
    assert f"--uid {SANDBOX_UID} --gid {SANDBOX_UID}" in text
    assert f"USER {SANDBOX_UID}:{SANDBOX_UID}\nWORKDIR /work\n" in text


def test_an_unknown_method_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"method must be one of auto, dockerfile, debootstrap; "
                                          r"got 'podman'"):
        build_image(None, method="podman")


@pytest.mark.docker
def test_an_image_that_is_there_is_not_rebuilt() -> None:
    require_docker()
    lines: list[str] = []
    with contextlib.closing(connect()) as api:
        assert build_image(api, DEFAULT_IMAGE, progress=lines.append) == "existing"
    assert lines == [f"{DEFAULT_IMAGE} is already there (use --force to rebuild it)."]


@pytest.mark.docker
def test_the_cached_root_filesystem_is_imported_without_debootstrap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_docker()
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    tarball = tmp_path / "sandbox" / f"rootfs-{IMAGE_VERSION}.tar"
    tarball.parent.mkdir()
    with tarfile.open(tarball, "w") as archive:
        info = tarfile.TarInfo("hello.txt")
        info.size = 2
        archive.addfile(info, io.BytesIO(b"hi"))
    image = "agentgym-sandbox-test:imported"
    lines: list[str] = []
    with contextlib.closing(connect()) as api:
        try:
            assert build_image(api, image, method="debootstrap", progress=lines.append) == "debootstrap"
            assert image_exists(api, image)
            assert api.inspect_image(image)["Config"]["User"] == "61000:61000"
        finally:
            api.remove_image(image, force=True)
    assert f"Using the cached root filesystem {tarball}." in lines
