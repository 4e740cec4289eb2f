"""pyproject lists packages by hand (the pillar folders are remapped): keep it complete."""

from __future__ import annotations

import tomllib
from pathlib import Path

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
