"""Trajectory rows on disk: Parquet, written as the run goes, resumable.

A Parquet file is only readable once its footer is written, so rows are
written to small closed part files beside the output (``OUT.parts/``) as
episodes finish, at most ``flush_seconds`` apart; :meth:`RolloutWriter.close`
merges everything into ``OUT`` atomically and removes the parts. A crash
therefore loses the episodes in flight and those finished in the last
``flush_seconds``; ``--resume`` reads ``OUT`` and any parts left behind and
skips the episodes they hold.

>>> import datasets
>>> datasets.load_dataset("parquet", data_files="rollouts.parquet")["train"]  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from agentgym.errors import ConfigError
from agentgym.rollout.rows import ARROW_SCHEMA, DERIVED_COLUMNS, TrajectoryRow, derive_turns

__all__ = ["RolloutWriter", "done_episodes", "load_rollouts", "read_rows", "read_table"]


def _parts_dir(out: Path) -> Path:
    return out.with_name(out.name + ".parts")


def _existing_files(out: Path) -> list[Path]:
    files = [out] if out.exists() else []
    parts = _parts_dir(out)
    if parts.is_dir():
        files += sorted(parts.glob("part-*.parquet"))
    return files


def read_table(file: str | Path) -> pa.Table:
    """One file's rows as a table of :data:`ARROW_SCHEMA`.

    A file written before rows kept their turns gets ``turns`` and
    ``server_logprobs`` derived here (:func:`~agentgym.rollout.rows.derive_turns`).
    """
    names = set(pq.read_schema(file).names)
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


def done_episodes(out: str | Path) -> set[tuple[int, int]]:
    """(group, index in group) of every episode already written."""
    keys = set()
    for file in _existing_files(Path(out)):
        table = pq.read_table(file, columns=["group_id", "index_in_group"])
        keys.update(zip(table["group_id"].to_pylist(), table["index_in_group"].to_pylist(), strict=True))
    return keys


def load_rollouts(out: str | Path):  # -> datasets.Dataset
    """The rows of a finished run as a ``datasets.Dataset``."""
    import datasets

    return datasets.Dataset.from_parquet(str(out))


class RolloutWriter:
    """Append rows as episodes finish; ``close()`` leaves one Parquet file.

    Args:
        out: the Parquet file to produce.
        resume: keep what ``out`` (and leftover parts) already hold; without
            it an existing ``out`` is an error, so nothing is overwritten by accident.
        flush_seconds: longest time a finished episode waits in memory.
    """

    def __init__(self, out: str | Path, *, resume: bool = False, flush_seconds: float = 1.0) -> None:
        self.out = Path(out)
        self.flush_seconds = flush_seconds
        if not resume and _existing_files(self.out):
            raise ConfigError(
                f"{self.out} already exists: pass --resume to continue that run, "
                "or choose another --out."
            )
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._parts = _parts_dir(self.out)
        self._buffer: list[TrajectoryRow] = []
        self._last_flush = time.monotonic()
        self._next_part = len(list(self._parts.glob("part-*.parquet"))) if self._parts.is_dir() else 0
        self.written = 0

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
        pq.write_table(table, staging)
        os.replace(staging, final)  # a part is either whole or absent
        self._next_part += 1
        self.written += len(self._buffer)
        self._buffer.clear()

    def close(self) -> Path:
        """Flush, merge ``out`` and the parts into ``out``, remove the parts."""
        self.flush()
        files = _existing_files(self.out)
        tables = [read_table(file) for file in files]
        table = pa.concat_tables(tables) if tables else ARROW_SCHEMA.empty_table()
        staging = self.out.with_name(self.out.name + ".tmp")
        pq.write_table(table, staging)
        os.replace(staging, self.out)
        for part in files:
            if part != self.out:
                part.unlink()
        if self._parts.is_dir():
            self._parts.rmdir()
        return self.out

    def __enter__(self) -> RolloutWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
