"""Passages, corpora and question sets, and loading your own from JSONL.

A corpus is a sequence of :class:`Passage` (a title and a text); a question
set is a sequence of :class:`QAItem` (a question and its gold answers)::

    corpus = load_corpus("wiki.jsonl")       # {"title": ..., "text": ...} per line
    questions = load_questions("qa.jsonl")   # {"question": ..., "answers": [...]} per line
    env = gym.make("SearchQA-LLM-v0", corpus=corpus, questions=questions)

Corpus lines may also use Search-R1's layout, ``{"contents": "\\"Title\\"\\ntext"}``
(the first line is the title). Question lines may give their gold answers as
``answers`` (a list), ``answer`` (a string) or ``golden_answers`` (a list, as
Search-R1's data does). A line that cannot be read is a :class:`ConfigError`
naming the file and the line: a question set with a broken row is better fixed
than silently shrunk.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, overload

from agentgym.errors import ConfigError

__all__ = ["Corpus", "Hop", "Passage", "QAItem", "load_corpus", "load_questions",
           "read_passage", "read_question"]


@dataclass(frozen=True, slots=True)
class Passage:
    """One searchable document: its title and its text."""

    title: str
    text: str


@dataclass(frozen=True, slots=True)
class Hop:
    """One search a question needs: the key phrase to search, the document it
    should find, and the fact that document gives (the next hop's key, or the answer)."""

    query: str
    title: str
    answer: str


@dataclass(frozen=True, slots=True)
class QAItem:
    """A question, its gold answers, and (for generated questions) the searches it needs."""

    question: str
    answers: tuple[str, ...]
    kind: str = "custom"
    hops: tuple[Hop, ...] = ()

    @property
    def num_hops(self) -> int:
        """How many documents the answer needs (0 when unknown, e.g. a loaded question)."""
        return len(self.hops)


class Corpus(Sequence[Passage]):
    """An immutable sequence of passages with a fingerprint of its content.

    The fingerprint (a SHA-256 of every title and text) keys the index caches,
    so a corpus is indexed once however many envs share it; keep one
    ``Corpus`` object and pass it around rather than rebuilding it.
    """

    def __init__(self, passages: Iterable[Passage]) -> None:
        self._passages = tuple(passages)
        for position, passage in enumerate(self._passages):
            if not isinstance(passage, Passage):
                raise ConfigError(f"A Corpus holds Passage objects; item {position} is "
                                  f"{type(passage).__name__}. Use read_passage() on dicts.")
        if not self._passages:
            raise ConfigError("The corpus is empty: give at least one passage.")

    @overload
    def __getitem__(self, index: int) -> Passage: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Passage]: ...
    def __getitem__(self, index: int | slice) -> Passage | Sequence[Passage]:
        return self._passages[index]

    def __len__(self) -> int:
        return len(self._passages)

    def __iter__(self) -> Iterator[Passage]:
        return iter(self._passages)

    def __repr__(self) -> str:
        return f"Corpus({len(self)} passages, fingerprint={self.fingerprint[:12]})"

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of the titles and texts, in order."""
        digest = hashlib.sha256()
        for passage in self._passages:
            # Separators that cannot be confused with text keep ("ab", "c") apart from ("a", "bc").
            digest.update(passage.title.encode("utf-8", "surrogatepass"))
            digest.update(b"\x00")
            digest.update(passage.text.encode("utf-8", "surrogatepass"))
            digest.update(b"\x01")
        return digest.hexdigest()

    @cached_property
    def by_title(self) -> dict[str, Passage]:
        """The passages by title (the first one of a repeated title)."""
        found: dict[str, Passage] = {}
        for passage in self._passages:
            found.setdefault(passage.title, passage)
        return found


def read_passage(row: Any, where: str = "passage") -> Passage:
    """A :class:`Passage` from a ``{"title", "text"}`` or ``{"contents"}`` mapping."""
    if isinstance(row, Passage):
        return row
    if isinstance(row, Mapping):
        title, text = row.get("title"), row.get("text")
        if isinstance(text, str) and (title is None or isinstance(title, str)):
            return Passage(title or "", text)
        contents = row.get("contents")
        if isinstance(contents, str):
            first, _, rest = contents.partition("\n")
            return Passage(first.strip().strip('"'), rest.strip())
    raise ConfigError(f"{where} must have a string 'text' (and a string 'title'), or a string "
                      f"'contents' whose first line is the title; got {_short(row)}.")


def read_question(row: Any, where: str = "question") -> QAItem:
    """A :class:`QAItem` from a mapping with ``question`` and its answers.

    The answers are ``answers`` (a list), ``answer`` (a string) or ``golden_answers`` (a list).
    """
    if isinstance(row, QAItem):
        return row
    if isinstance(row, Mapping):
        question = row.get("question")
        answers = _answers_of(row)
        if isinstance(question, str) and question.strip() and answers:
            return QAItem(question.strip(), answers, str(row.get("kind", "custom")))
    raise ConfigError(f"{where} must have a non-empty string 'question' and its gold answers as "
                      f"'answers' (a list of strings), 'answer' (a string) or 'golden_answers'; "
                      f"got {_short(row)}.")


def _answers_of(row: Mapping[str, Any]) -> tuple[str, ...]:
    for key in ("answers", "golden_answers"):
        value = row.get(key)
        if isinstance(value, list | tuple):
            found = tuple(item.strip() for item in value if isinstance(item, str) and item.strip())
            if found and len(found) == len(value):
                return found
            return ()
    value = row.get("answer")
    if isinstance(value, str) and value.strip():
        return (value.strip(),)
    return ()


def _read_jsonl(path: str | Path) -> Iterator[tuple[str, Any]]:
    """(``"file:line"``, parsed object) for every non-blank line of a JSONL file."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"No such file: {str(file)!r}. Give the path of a JSONL file.")
    with file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{file.name}:{number}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as error:
                raise ConfigError(f"{where} is not valid JSON ({error.msg}); each line must "
                                  "be one JSON object.") from error


def load_corpus(path: str | Path) -> Corpus:
    """Read a corpus from a JSONL file (one ``{"title", "text"}`` object a line)."""
    passages = [read_passage(row, f"{where}") for where, row in _read_jsonl(path)]
    if not passages:
        raise ConfigError(f"{str(path)!r} holds no passages; write one JSON object a line.")
    return Corpus(passages)


def load_questions(path: str | Path) -> list[QAItem]:
    """Read questions from a JSONL file (``{"question", "answers": [...]}`` a line)."""
    items = [read_question(row, f"{where}") for where, row in _read_jsonl(path)]
    if not items:
        raise ConfigError(f"{str(path)!r} holds no questions; write one JSON object a line.")
    return items


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
