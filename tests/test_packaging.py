"""pyproject lists packages by hand (the pillar folders are remapped): keep it complete."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPPING = {"agentgym": "agentgym", "envs": "agentgym.envs", "sandbox": "agentgym.sandbox",
           "trainers": "agentgym.trainers"}


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {name: folder for folder, name in MAPPING.items()}
    found = set()
    for folder, name in MAPPING.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *parts)))
    assert found == set(config["packages"])


def test_pillars_import_under_the_agentgym_namespace() -> None:
    import agentgym.envs.games
    import agentgym.sandbox
    import agentgym.trainers

    assert Path(agentgym.envs.games.__file__).parent == ROOT / "envs" / "games"
    assert agentgym.sandbox.__name__ == "agentgym.sandbox"
    assert agentgym.trainers.__name__ == "agentgym.trainers"


_SMOKE = """
import pathlib, sys
import gymnasium as gym
import agentgym
assert pathlib.Path(agentgym.__file__).is_relative_to(sys.argv[1]), agentgym.__file__
for info in agentgym.list_envs():
    observation, _ = gym.make(info.id).reset(seed=0)
    assert observation, info.id
print(len(agentgym.list_envs()))
"""


@pytest.mark.slow
def test_the_wheel_installs_and_every_env_runs_from_it(tmp_path: Path) -> None:
    """A plain (non-editable) install carries every module and data file."""
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    *map(str, wheels.glob("agentgym-*.whl"))], check=True, capture_output=True)
    result = subprocess.run([sys.executable, "-c", _SMOKE, str(target)], cwd=tmp_path, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(target)})
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 9
