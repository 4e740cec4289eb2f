"""Trajectory rows on disk: Parquet, written as the run goes, resumable.

A Parquet file is only readable once its footer is written, so rows are
written to small closed part files beside the output (``OUT.parts/``) as
episodes finish, at most ``flush_seconds`` apart; :meth:`RolloutWriter.close`
merges everything into ``OUT`` and removes the parts. A crash therefore loses
the episodes in flight and those finished in the last ``flush_seconds``;
``--resume`` reads ``OUT`` and any parts left behind and skips the episodes
they hold.

The merge can be killed at any instruction without losing or doubling a row:
the merged ``OUT`` names, in its key-value metadata, the parts it absorbed,
and it replaces the old ``OUT`` in one atomic rename. Readers skip the parts
``OUT`` names, so until that rename the parts count and after it ``OUT`` does;
part names are never reused, so a named part is always an absorbed one.

Every file also records the run's identity (what decides which episodes are
played: env, its arguments, group size, seeds, policy...), and resuming a file
with other settings is refused.

>>> import datasets
>>> datasets.load_dataset("parquet", data_files="rollouts.parquet")["train"]  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from agentgym.errors import ConfigError
from agentgym.rollout.rows import ARROW_SCHEMA, DERIVED_COLUMNS, OPTIONAL_COLUMNS, TrajectoryRow, derive_turns

__all__ = ["ROLLOUT_FILE_HINT", "RolloutWriter", "check_same_run", "done_episodes", "load_rollouts",
           "parquet_schema", "read_rows", "read_table", "recorded_tokenizers"]

#: the key-value metadata key of every file: {"run": identity, "merged_parts": [names]}
_META_KEY = b"agentgym"
_PART = re.compile(r"part-(\d+)\.parquet")
#: the columns a rollout file must hold (older files lack the derived ones, filled in on read, and
#: the optional ones, read as null)
_NEEDED_COLUMNS = [field.name for field in ARROW_SCHEMA if field.name not in DERIVED_COLUMNS + OPTIONAL_COLUMNS]
#: how every "not a rollout file" message ends: what one is and how to make one
ROLLOUT_FILE_HINT = ("a rollout file is the Parquet file `agentgym rollout --env ENV --out FILE` "
                     "(or `agentgym eval --episodes-out FILE`) writes")


def _parts_dir(out: Path) -> Path:
    return out.with_name(out.name + ".parts")


def parquet_schema(file: str | Path) -> pa.Schema:
    """``file``'s Parquet schema; a :class:`ConfigError` naming the file, what it holds instead
    and what a rollout file is, when it is not a Parquet file."""
    try:
        return pq.read_schema(file)
    except (pa.ArrowException, OSError):  # ArrowInvalid: no Parquet footer; OSError: a folder, gone
        raise ConfigError(f"{file} {_what_is_there(Path(file))}; {ROLLOUT_FILE_HINT}.") from None


def _what_is_there(file: Path) -> str:
    """What a file that is not Parquet is: missing, a folder, empty, cut short, text, other bytes."""
    if not file.exists():
        return "does not exist"
    if file.is_dir():
        return "is a folder, not a Parquet file"
    with file.open("rb") as handle:
        head = handle.read(64)
    if not head:
        return "is empty, not a Parquet file"
    if head.startswith(b"PAR1"):
        return "is a Parquet file cut short (no footer: still being written, or copied in part)"
    text = head.decode("utf-8", errors="replace").rstrip("\ufffd")  # the 64th byte may cut a character
    if all(char.isprintable() or char in "\t\r\n" for char in text) and "\ufffd" not in text:
        first = (text.strip().splitlines() or [""])[0]
        return f"holds text (starting {first[:40]!r}), not Parquet"
    return f"is not a Parquet file (it starts with the bytes {head[:8]!r})"


def _rollout_schema(file: Path) -> pa.Schema:
    """``file``'s schema, or a :class:`ConfigError` naming what makes it no rollout file."""
    schema = parquet_schema(file)
    missing = [name for name in _NEEDED_COLUMNS if name not in schema.names]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise ConfigError(f"{file} is a Parquet file but not a rollout file: it lacks the columns "
                          f"{', '.join(missing[:3])}{more}; its columns are {sorted(schema.names)[:8]}; "
                          f"{ROLLOUT_FILE_HINT}.")
    return schema


def _metadata(file: Path) -> dict[str, Any]:
    raw = (parquet_schema(file).metadata or {}).get(_META_KEY)
    return json.loads(raw) if raw else {}


def _all_parts(out: Path) -> list[Path]:
    """Every part file beside ``out``, oldest first (absorbed ones included)."""
    parts = _parts_dir(out)
    if not parts.is_dir():
        return []
    found = [path for path in parts.iterdir() if _PART.fullmatch(path.name)]
    return sorted(found, key=lambda path: int(_PART.fullmatch(path.name).group(1)))


def _existing_files(out: Path) -> list[Path]:
    """``out`` and the parts it has not absorbed: the files that hold the run's rows."""
    if not out.exists():
        return _all_parts(out)
    merged = set(_metadata(out).get("merged_parts", []))
    return [out] + [part for part in _all_parts(out) if part.name not in merged]


def read_table(file: str | Path) -> pa.Table:
    """One file's rows as a table of :data:`ARROW_SCHEMA`.

    A file written before rows kept their turns gets ``turns`` and
    ``server_logprobs`` derived here (:func:`~agentgym.rollout.rows.derive_turns`); one written
    before rows recorded their tokenizer reads it as null (unknown). A file that is no rollout file is a :class:`ConfigError` that says what it is.
    """
    names = set(_rollout_schema(Path(file)).names)
    if all(column in names for column in DERIVED_COLUMNS):
        return pq.read_table(file, schema=ARROW_SCHEMA)
    old = [field for field in ARROW_SCHEMA if field.name not in DERIVED_COLUMNS]
    records = pq.read_table(file, schema=pa.schema(old)).to_pylist()
    return pa.Table.from_pylist(derive_turns(records), schema=ARROW_SCHEMA)


def read_rows(out: str | Path) -> list[TrajectoryRow]:
    """Every row in ``out`` and in parts a crashed run left beside it."""
    rows = []
    for file in _existing_files(Path(out)):
        for record in read_table(file).to_pylist():
            rows.append(TrajectoryRow.model_validate(record))
    return rows


def recorded_tokenizers(out: str | Path) -> list[str | None] | None:
    """The distinct tokenizers the rows of ``out`` (and parts left beside it) record, None among them
    for rows that record none; None when ``out`` is no rollout file (only that column is read)."""
    found: dict[str | None, None] = {}
    out = Path(out)
    try:
        pq.read_schema(out) if out.exists() else None
    except (pa.ArrowException, OSError):  # not Parquet (a JSONL file of pairs, say)
        return None
    for file in _existing_files(out):
        names = parquet_schema(file).names
        if any(name not in names for name in _NEEDED_COLUMNS):
            return None
        if "tokenizer" not in names:
            found[None] = None
            continue
        found.update(dict.fromkeys(pq.read_table(file, columns=["tokenizer"])["tokenizer"].unique().to_pylist()))
    return list(found) if found else None


def done_episodes(out: str | Path) -> set[tuple[int, int]]:
    """(group, index in group) of every episode already written."""
    keys = set()
    for file in _existing_files(Path(out)):
        _rollout_schema(file)
        table = pq.read_table(file, columns=["group_id", "index_in_group"])
        keys.update(zip(table["group_id"].to_pylist(), table["index_in_group"].to_pylist(), strict=True))
    return keys


def load_rollouts(out: str | Path):  # -> datasets.Dataset
    """The rows of a finished run as a ``datasets.Dataset``."""
    import datasets

    return datasets.Dataset.from_parquet(str(out))


def check_same_run(out: str | Path, run: dict[str, Any]) -> None:
    """Raise ConfigError, naming the first difference, if ``out`` holds another run's episodes.

    ``run`` maps the setting that decides the episodes (named as its flag,
    e.g. ``--env``) to its value. Settings missing on either side are not
    compared; a list may grow (more seeds), not change. A file that records
    no run (written before runs were recorded) is checked on its env id.
    """
    out = Path(out)
    run = json.loads(json.dumps(run, default=repr))  # compare as stored: tuples become lists
    for file in _existing_files(out):
        stored = _metadata(file).get("run")
        if stored is None:
            _rollout_schema(file)
            envs = set(pq.read_table(file, columns=["env_id"])["env_id"].to_pylist())
            stored = {"--env": envs.pop()} if len(envs) == 1 else {}
        for key, value in run.items():
            if key in stored and not _same_setting(stored[key], value):
                raise ConfigError(_difference(out, key, stored[key], value))


def _same_setting(stored: Any, value: Any) -> bool:
    if isinstance(stored, list) and isinstance(value, list):
        return value[: len(stored)] == stored
    return stored == value


def _difference(out: Path, key: str, stored: Any, value: Any) -> str:
    if key == "--env":
        return f"{out} holds {stored} episodes; --env is {value}: use another --out or the same --env."
    return (f"{out} holds episodes played with {key} {_shown(stored)}; this run has {key} {_shown(value)}: "
            f"use another --out or the same {key}.")


def _shown(value: Any) -> str:
    return "(not set)" if value is None else value if isinstance(value, str) else json.dumps(value)


class RolloutWriter:
    """Append rows as episodes finish; ``close()`` leaves one Parquet file.

    Args:
        out: the Parquet file to produce.
        resume: keep what ``out`` (and leftover parts) already hold; without
            it an existing ``out`` is an error, so nothing is overwritten by accident.
        flush_seconds: longest time a finished episode waits in memory.
        run: the run's identity (see :func:`check_same_run`), stored in every
            file's metadata; on resume, a file of another run is refused.
    """

    def __init__(self, out: str | Path, *, resume: bool = False, flush_seconds: float = 1.0,
                 run: dict[str, Any] | None = None) -> None:
        self.out = Path(out)
        self.flush_seconds = flush_seconds
        self.run = run
        if not resume and (self.out.exists() or _all_parts(self.out)):
            raise ConfigError(
                f"{self.out} already exists: pass --resume to continue that run, "
                "or choose another --out."
            )
        if resume and run is not None:
            check_same_run(self.out, run)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._parts = _parts_dir(self.out)
        self._buffer: list[TrajectoryRow] = []
        self._last_flush = time.monotonic()
        self._next_part = self._first_free_part()
        self.written = 0

    def _first_free_part(self) -> int:
        """A part number no file and no name in ``out``'s list of absorbed parts has used."""
        names = [part.name for part in _all_parts(self.out)]
        if self.out.exists():
            names += _metadata(self.out).get("merged_parts", [])
        numbers = [int(match.group(1)) for name in names if (match := _PART.fullmatch(name))]
        return max(numbers, default=-1) + 1

    def add(self, rows: Iterable[TrajectoryRow]) -> None:
        self._buffer.extend(rows)
        if time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._buffer:
            return
        self._parts.mkdir(exist_ok=True)
        table = pa.Table.from_pylist([row.to_record() for row in self._buffer], schema=ARROW_SCHEMA)
        final = self._parts / f"part-{self._next_part:06d}.parquet"
        staging = final.with_suffix(".tmp")
        pq.write_table(self._with_metadata(table), staging)
        os.replace(staging, final)  # a part is either whole or absent
        self._next_part += 1
        self.written += len(self._buffer)
        self._buffer.clear()

    def close(self) -> Path:
        """Flush, merge ``out`` and the parts into ``out``, remove the parts.

        Safe to kill at any point: until the rename the old ``out`` and the
        parts hold the rows; after it the new ``out`` does, and names the parts
        it absorbed, so readers skip the ones left undeleted.
        """
        self.flush()
        parts = _all_parts(self.out)
        if parts or not self.out.exists():
            files = _existing_files(self.out)
            tables = [read_table(file) for file in files]
            table = pa.concat_tables(tables) if tables else ARROW_SCHEMA.empty_table()
            run = self.run if self.run is not None else next(
                (stored for file in files if (stored := _metadata(file).get("run")) is not None), None)
            staging = self.out.with_name(self.out.name + ".tmp")
            pq.write_table(self._with_metadata(table, run=run, merged=[part.name for part in parts]), staging)
            os.replace(staging, self.out)
        for part in parts:
            part.unlink()
        if self._parts.is_dir():
            for leftover in self._parts.glob("*.tmp"):  # parts a crash cut short, never renamed
                leftover.unlink()
            self._parts.rmdir()
        return self.out

    def _with_metadata(self, table: pa.Table, *, run: dict[str, Any] | None = None,
                       merged: list[str] | None = None) -> pa.Table:
        meta: dict[str, Any] = {"run": run if run is not None else self.run}
        if merged is not None:
            meta["merged_parts"] = merged
        encoded = json.dumps(meta, default=repr).encode()
        return table.replace_schema_metadata({**(table.schema.metadata or {}), _META_KEY: encoded})

    def __enter__(self) -> RolloutWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
