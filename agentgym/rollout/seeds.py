"""Seed files: a list of levels to play, one seed per line.

``agentgym eval --failed-seeds-out hard.txt`` writes the seeds of the levels a
model failed; ``agentgym train -s level_seeds=hard.txt`` then plays only those
levels (hard-level mining: RL spends its episodes where the model still fails,
instead of on levels it already solves every time). Blank lines and text after
``#`` are ignored, so a file can say where it came from.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from agentgym.errors import ConfigError

__all__ = ["read_seeds", "write_seeds"]


def write_seeds(path: str | Path, seeds: Iterable[int], *, comment: str = "") -> int:
    """Write ``seeds`` to ``path``, one per line, under an optional ``# comment`` line; returns how many."""
    seeds = [int(seed) for seed in seeds]
    header = "".join(f"# {line}\n" for line in comment.splitlines())
    Path(path).write_text(header + "".join(f"{seed}\n" for seed in seeds), encoding="utf-8")
    return len(seeds)


def read_seeds(path: str | Path) -> list[int]:
    """The seeds in ``path``, in file order; a missing file, a line that is not an integer or a
    file with no seed is a :class:`ConfigError` naming the file (and the line)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"Cannot read the seed file {path}: {exc.strerror or exc}. "
                          "Write one with agentgym eval --failed-seeds-out FILE.") from exc
    seeds = []
    for number, line in enumerate(text.splitlines(), start=1):
        value = line.split("#", 1)[0].strip()
        if not value:
            continue
        try:
            seeds.append(int(value))
        except ValueError:
            raise ConfigError(f"{path}, line {number}: {value!r} is not a seed (one integer per line; "
                              "'#' starts a comment).") from None
    if not seeds:
        raise ConfigError(f"{path} holds no seed: one integer per line.")
    return seeds
