"""The README: short, and its commands work as written, in order, after the quickstart (issue 50).

The commands themselves run in the CLI tests; these check what ties them together: no run
folder or rollout file is written twice (the second write would be refused), every file read
was written by an earlier command, rollout files go to the folder git ignores.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import typer

from agentgym.cli import app

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def agentgym_commands() -> Iterator[list[str]]:
    """The words after ``agentgym`` of each command in the README's bash blocks, in order."""
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()  # a comment after the command
            if line.startswith("#"):
                continue
            for part in line.split(" && "):
                words = shlex.split(part.rstrip(" &"))
                if words and Path(words[0]).name == "agentgym":
                    yield words[1:]


def value(words: list[str], flag: str) -> str | None:
    return words[words.index(flag) + 1] if flag in words else None


def written_by(words: list[str]) -> str | None:
    """The run folder or rollout file a command writes (None: it writes neither)."""
    if words[0] == "train":
        return value(words, "--out") or "runs/train"
    if words[0] == "rollout":
        return value(words, "--out")
    if words[0] == "eval":
        return value(words, "--episodes-out")
    return None


def read_by(words: list[str]) -> list[str]:
    """The files and run folders a command needs to exist."""
    needed = (value(words, "--trajectories") or "").split(",")
    if words[0] in ("view", "report"):
        needed.append(words[1])
    model = value(words, "--model") or ""
    if model.startswith("runs/"):
        needed.append(model.removesuffix("/final"))  # a run's final model: the run folder
    return [path for path in needed if path]


def test_the_readme_is_under_200_lines() -> None:
    assert len(README.splitlines()) < 200


def test_no_run_folder_or_rollout_file_is_written_twice() -> None:
    written = [path for words in agentgym_commands() if (path := written_by(words))]
    assert "runs/bandit" in written  # the quickstart's, which the Training block must not write again
    assert len(written) == len(set(written)), sorted(path for path in written if written.count(path) > 1)


def test_every_file_a_command_reads_was_written_before_it() -> None:
    written: set[str] = set()
    for words in agentgym_commands():
        missing = [path for path in read_by(words) if path not in written and "DIR" not in path]
        assert missing == [], f"agentgym {' '.join(words)} reads {missing} before any command writes it"
        if (path := written_by(words)) is not None:
            written.add(path)


def test_rollout_files_go_to_the_ignored_folder() -> None:
    files = [path for words in agentgym_commands() if words[0] != "train" and (path := written_by(words))]
    assert files and all(path.startswith("rollouts/") for path in files), files
    assert not re.search(r"(?<![/\w])\w+\.parquet", README)  # none left in the clone's root either


def test_the_readme_says_how_many_episodes_rollout_shows() -> None:
    show = next(param for param in typer.main.get_command(app).commands["rollout"].params if param.name == "show")
    assert f"`rollout` prints its first {show.default} finished episodes in full (`--show N`" in " ".join(README.split())
