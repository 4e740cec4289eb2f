r"""Maths problems from a ``datasets`` split: GSM8K, MATH, or your own files.

:func:`load_math_dataset` reads any split with a question column and an
answer column and pulls the final answer out of the answer text:

- GSM8K style: a worked solution ending in ``#### 42`` gives ``42``;
- MATH style: a solution with ``\boxed{\frac{1}{2}}`` gives ``\frac{1}{2}``
  (the last box);
- otherwise the whole (stripped) text is the answer.

::

    problems = load_math_dataset("train.jsonl")                        # a local file
    problems = load_math_dataset("openai/gsm8k", name="main", split="test")
    problems = load_math_dataset("data/", question_column="problem",
                                 answer_column="solution")
    env = gym.make("Math-LLM-v0", problems=problems)

A local ``.parquet``, ``.jsonl``, ``.json`` or ``.csv`` file (or a folder of
them) is read with the matching ``datasets`` builder; any other string is
given to :func:`datasets.load_dataset` as is, which may download it from the
hub (agentgym itself never does). Rows whose answer cannot be found are
skipped and counted in the log.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError, MissingDependencyError
from agentgym.parsing import extract_boxed

from agentgym.envs.math.problems import MathProblem

__all__ = ["ANSWER_STYLES", "extract_reference", "load_math_dataset", "problems_from_rows"]

_log = logging.getLogger(__name__)

#: How the final answer is found in the answer column.
ANSWER_STYLES = ("auto", "gsm8k", "math", "plain")
_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}


def extract_reference(text: str, style: str = "auto") -> str | None:
    r"""The final answer in a solution text, or ``None`` when ``style`` finds none.

    >>> extract_reference("3 + 4 = 7 apples.\n#### 7")
    '7'
    >>> extract_reference(r"So $x = \boxed{\frac{1}{2}}$.")
    '\\frac{1}{2}'
    """
    if style not in ANSWER_STYLES:
        raise ConfigError(f"answer_style must be one of {ANSWER_STYLES}, got {style!r}.")
    if not isinstance(text, str):
        return None
    if style == "plain":
        return text.strip() or None
    if "####" in text and style in ("auto", "gsm8k"):
        answer = text.rsplit("####", 1)[1].strip().rstrip(".").strip()
        return answer or None
    if style == "gsm8k":
        return None
    boxed = extract_boxed(text)
    if boxed or style == "math":
        return boxed or None
    return text.strip() or None  # "auto" with neither mark nor box: the text itself


def problems_from_rows(
    rows: Iterable[Mapping[str, Any]],
    *,
    question_column: str = "question",
    answer_column: str = "answer",
    answer_style: str = "auto",
    kind: str = "dataset",
) -> list[MathProblem]:
    """:class:`MathProblem` objects from rows (dicts); rows without an answer are skipped."""
    problems, skipped = [], 0
    for row in rows:
        question, solution = row.get(question_column), row.get(answer_column)
        answer = extract_reference(solution, answer_style) if isinstance(solution, str) else None
        if not isinstance(question, str) or not question.strip() or answer is None:
            skipped += 1
            continue
        problems.append(MathProblem(question.strip(), answer, kind))
    if skipped:
        _log.info("Skipped %d rows with no question or no %s answer.", skipped, answer_style)
    return problems


def load_math_dataset(
    path: str | os.PathLike[str] | Any,
    *,
    split: str = "train",
    name: str | None = None,
    question_column: str = "question",
    answer_column: str = "answer",
    answer_style: str = "auto",
    limit: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> list[MathProblem]:
    """Problems from a ``datasets`` split, a local data file, or a ``datasets.Dataset``.

    Args:
        path: a ``datasets.Dataset``; a local file or folder (``.parquet``,
            ``.jsonl``, ``.json``, ``.csv``); or a name for ``load_dataset``.
        split, name: the split and the configuration name, for ``load_dataset``.
        question_column, answer_column: the columns to read (MATH: ``problem``
            and ``solution``).
        answer_style: ``"auto"`` (``####`` if present, else the last
            ``\boxed{}``, else the whole text), ``"gsm8k"``, ``"math"`` or
            ``"plain"`` (the text as it is).
        limit: keep at most this many problems (the first ones).
        cache_dir: where ``datasets`` keeps its cache (default: its own).
    """
    if answer_style not in ANSWER_STYLES:
        raise ConfigError(f"answer_style must be one of {ANSWER_STYLES}, got {answer_style!r}.")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit must be a positive integer or None, got {limit!r}.")
    if hasattr(path, "column_names"):
        dataset = path
    else:
        dataset = _load_split(path, split, name, None if cache_dir is None else os.fspath(cache_dir))
    missing = [c for c in (question_column, answer_column) if c not in dataset.column_names]
    if missing:
        raise ConfigError(
            f"The dataset has no column {' or '.join(repr(c) for c in missing)}; its columns are "
            f"{dataset.column_names}. Pass question_column=... and answer_column=... "
            "(MATH uses 'problem' and 'solution')."
        )
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    problems = problems_from_rows(
        dataset, question_column=question_column, answer_column=answer_column,
        answer_style=answer_style,
    )
    if not problems:
        raise ConfigError(
            f"No row of {path!r} has a question and a {answer_style!r}-style answer in "
            f"{answer_column!r}; try answer_style='plain' or another answer_column."
        )
    return problems


def _load_split(path: str | os.PathLike[str], split: str, name: str | None,
                cache_dir: str | None) -> Any:
    try:
        import datasets
    except ImportError as error:
        raise MissingDependencyError(
            "load_math_dataset needs the datasets package: "
            f"{MissingDependencyError.install_hint('rollout', 'datasets')}."
        ) from error
    local = Path(path)
    if local.is_file() or (local.is_dir() and _data_files(local)):
        files = [local] if local.is_file() else _data_files(local)
        builder = _BUILDERS.get(files[0].suffix.lower())
        if builder is None:
            raise ConfigError(
                f"{str(local)!r} is not a .parquet, .jsonl, .json or .csv file; convert it or "
                "pass a datasets.Dataset."
            )
        # A local file is one "train" split, whatever split the caller named.
        return datasets.load_dataset(builder, data_files=[str(f) for f in files], split="train",
                                     cache_dir=cache_dir)
    if isinstance(path, os.PathLike) or str(path).startswith((".", "/")):
        raise ConfigError(f"No data file at {str(path)!r}: check the path.")
    return datasets.load_dataset(str(path), name, split=split, cache_dir=cache_dir)


def _data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in _BUILDERS)
