"""What the repository tracks: no build artefacts, weights or other large files (issue 50)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 1_000_000
#: Folders whose data files may pass the limit, each with the reason. None needs it today; the
#: largest tracked files are the docs' pictures and envs/code/data (each well under 1 MB).
LARGE_FILES_ALLOWED_UNDER: dict[str, str] = {}


def tracked_files() -> list[Path]:
    if not (ROOT / ".git").exists():  # a source archive, not a clone: nothing is tracked
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in listed.decode().split("\0") if name]


def oversized(files: list[Path], root: Path = ROOT) -> list[str]:
    """``files`` over the limit outside the allowed folders, as 'path (size)'; a file deleted but
    not yet committed is skipped."""
    found = []
    for path in files:
        relative = path.relative_to(root).as_posix()
        if any(relative.startswith(folder.rstrip("/") + "/") for folder in LARGE_FILES_ALLOWED_UNDER):
            continue
        if path.is_file() and (size := path.stat().st_size) > LIMIT_BYTES:
            found.append(f"{relative} ({size / 1e6:.1f} MB)")
    return found


def test_no_tracked_file_is_over_1_mb() -> None:
    assert oversized(tracked_files()) == [], (
        "build artefacts, wheels and weights stay out of git (see .gitignore); data a test needs "
        "goes in a folder listed in LARGE_FILES_ALLOWED_UNDER with its reason")


def test_the_check_finds_a_large_file(tmp_path: Path) -> None:
    (tmp_path / "small.txt").write_bytes(b"x" * 10)
    (tmp_path / "ruff-0.17.6-py3-none-any.whl").write_bytes(b"x" * (LIMIT_BYTES + 1))
    files = sorted(tmp_path.iterdir())
    assert oversized(files, root=tmp_path) == ["ruff-0.17.6-py3-none-any.whl (1.0 MB)"]


def test_built_artefacts_and_rollout_files_are_ignored() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    names = ["dist/agentgym-0.1.0.tar.gz", "build/lib/x.py", "ruff-0.17.6-py3-none-any.whl",
             "final/model.safetensors", "model.gguf", "rollouts/bandit.parquet", "solver.parquet"]
    checked = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=ROOT, capture_output=True, text=True)
    assert checked.stdout.split() == names


def duplicate_basenames(test_files: list[Path]) -> list[str]:
    """Test modules sharing a file name: the suite's folders have no ``__init__.py``, so pytest
    imports each module by its bare name and refuses the second one it meets."""
    seen: dict[str, int] = {}
    for path in test_files:
        seen[path.name] = seen.get(path.name, 0) + 1
    return sorted(name for name, count in seen.items() if count > 1)


def test_test_modules_have_unique_names() -> None:
    assert duplicate_basenames(sorted((ROOT / "tests").rglob("test_*.py"))) == []


def test_the_check_finds_a_repeated_test_name() -> None:
    files = [Path("tests/sandbox/test_image.py"), Path("tests/interop/test_image.py"), Path("tests/test_core.py")]
    assert duplicate_basenames(files) == ["test_image.py"]
