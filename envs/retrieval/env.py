"""``SearchQA-LLM-v0``: answer a question by searching a knowledge base (Search-R1 style).

The agent searches as often as it needs (``<search>query</search>``, or an
OpenAI-style ``<tool_call>``), reads the passages that come back, then answers
``<answer>...</answer>``. The reward is 1 for an exact match with a gold
answer after normalisation (case, punctuation and articles ignored, as in
SQuAD), else 0; ``info["f1"]`` reports token F1 as well, and ``info["em"]``
the exact match::

    env = gym.make("SearchQA-LLM-v0")                              # generated world, 1-2 hops
    env = gym.make("SearchQA-LLM-v0", hops=(2, 3), max_calls=6)
    env = gym.make("SearchQA-LLM-v0", corpus="wiki.jsonl", questions="nq.jsonl")

How it is built: :class:`SearchQAEnv` is the question and the scoring, and
knows nothing of searching; :func:`make_search_qa_env` (the registered entry
point) wraps it in :class:`agentgym.tools.ToolWrapper` with a
:class:`~agentgym.envs.retrieval.tool.SearchTool` over the same corpus. So
searches follow the wrapper's rules: a search turn returns
``<tool_response name="search">Doc 1 (Title: ...) ...</tool_response>``
(Search-R1 writes ``<information>``), costs no answer turn, and ``max_calls``
caps them per episode; only a message without a tool call is read as the
answer. ``env.unwrapped`` is the bare env, a closed-book QA task.

Default data: a fictional world generated from ``world_seed``
(:mod:`agentgym.envs.retrieval.world`), whose questions need 1 to 3 searches.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from agentgym.core import Outcome, TextEnv, check_number
from agentgym.errors import ConfigError
from agentgym.parsing import extract_answer
from agentgym.tools import ToolWrapper

from agentgym.envs.retrieval.data import (Corpus, QAItem, load_corpus, load_questions,
                                          read_passage, read_question)
from agentgym.envs.retrieval.index import get_retriever, require_bm25s
from agentgym.envs.retrieval.scoring import score_answer
from agentgym.envs.retrieval.tool import SearchTool
from agentgym.envs.retrieval.world import default_world

__all__ = ["SearchQAEnv", "make_search_qa_env"]

_SHOWN_CHARS = 80
_HOPS = (1, 2, 3)
_CorpusSource = Corpus | str | Path | Sequence[Any]
_QuestionSource = str | Path | Sequence[Any]


class SearchQAEnv(TextEnv):
    """A question with gold answers; reward 1 for an exact (normalised) match.

    Args:
        corpus: the knowledge base: a :class:`Corpus`, a JSONL path (see
            :func:`~agentgym.envs.retrieval.data.load_corpus`) or a list of
            passages / ``{"title", "text"}`` dicts. None: the generated world.
        questions: the questions, given with ``corpus``: a JSONL path or a list
            of :class:`QAItem` / ``{"question", "answers"}`` dicts.
        world_seed: the seed of the generated world (the same world for every episode).
        world_size: people in the generated world (about 1.7 documents each).
        hops: which generated questions to ask, by the searches they need
            (1, 2 or 3; default 1 and 2); each episode draws a hop count, then a question.
        max_turns: answers allowed; after a wrong one the agent is told so
            (not what is right) and may try again.
        format_penalty, render_mode: see :class:`~agentgym.core.TextEnv`.

    ``reset(options={"index": i})`` asks ``questions[i]``;
    ``reset(options={"question": {"question": ..., "answers": [...]}})`` asks a given one.
    """

    action_format = "<answer>...</answer>"

    def __init__(
        self,
        *,
        corpus: _CorpusSource | None = None,
        questions: _QuestionSource | None = None,
        world_seed: int = 0,
        world_size: int = 150,
        hops: Sequence[int] | int | None = None,
        max_turns: int = 1,
        format_penalty: float = 0.1,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_turns=max_turns, format_penalty=format_penalty,
                         render_mode=render_mode)
        if (corpus is None) != (questions is None):
            raise ConfigError("Give corpus= and questions= together (your own data), or "
                              "neither (the generated world).")
        self.generated = corpus is None
        if self.generated:
            check_number("world_seed", world_seed, minimum=0)
            check_number("world_size", world_size, minimum=8, maximum=20_000)
            world = default_world(world_seed, world_size)
            self.corpus, self.questions = world.corpus, world.questions
            self.hops = _read_hops((1, 2) if hops is None else hops)
        else:
            if hops is not None:
                raise ConfigError("hops= chooses among generated questions; your own questions "
                                  "have no hop count. Drop hops= or filter them yourself.")
            self.corpus, self.questions = _read_corpus(corpus), _read_questions(questions)
            self.hops = ()
        # Questions grouped by hop count, to draw a hop count first, then a question.
        self._pools = (_hop_pools(world_seed, world_size, self.hops) if self.generated
                       else (range(len(self.questions)),))
        self.item = self.questions[0]
        self._given: list[str] = []

    # -- episode ---------------------------------------------------------------

    def _new_episode(self, options: dict[str, Any] | None) -> str:
        self.item = self._choose(options or {})
        self._given = []
        return f"Question: {self.item.question}\n\nAnswer with <answer>...</answer>."

    def _choose(self, options: Mapping[str, Any]) -> QAItem:
        if "question" in options:
            return read_question(options["question"], 'options["question"]')
        if "index" in options:
            check_number('options["index"]', options["index"], minimum=0,
                         maximum=len(self.questions) - 1)
            return self.questions[options["index"]]
        pool = self._pools[int(self.np_random.integers(len(self._pools)))]
        return self.questions[pool[int(self.np_random.integers(len(pool)))]]

    def _reset_info(self) -> dict[str, Any]:
        return {"kind": self.item.kind, "hops": self.item.num_hops}

    # -- a turn ----------------------------------------------------------------

    def _play(self, action: str) -> Outcome:
        answer = extract_answer(action)
        if not answer:
            why = "Your answer is empty." if answer is not None else "No answer found."
            return Outcome(f"{why} Write your final answer as <answer>...</answer>, e.g. "
                           "<answer>Eskerford</answer>: only the name, place or year.",
                           action_valid=False)
        shown = _shorten(answer)
        correct, f1 = score_answer(answer, self.item.answers)
        info = {"em": correct, "f1": f1, "answer": answer}
        if correct:
            return Outcome(f"Correct: {shown}.", 1.0, terminated=True, success=True, info=info)
        self._given.append(shown)
        more = " Try again." if self.turn < self.max_turns else ""
        return Outcome(f"{shown!r} is not correct.{more}", 0.0, info=info)

    # -- text ------------------------------------------------------------------

    def render_text(self) -> str:
        lines = [f"Question: {self.item.question}"]
        lines += [f"Wrong answer: {shown}" for shown in self._given]
        return "\n".join(lines)

    def _describe(self) -> str:
        if self.generated:
            data = ("The questions are about a fictional world: people, cities, countries and "
                    "organisations that exist only in a knowledge base of short documents, so "
                    "look facts up rather than guess. Some questions need several searches: "
                    "find the first fact (e.g. who founded an organisation), then search for "
                    "it (e.g. where that person was born).")
        else:
            data = "Answer the question using the documents of the knowledge base."
        retry = ("After a wrong answer you are told it is wrong (not what is right) and may try "
                 "again." if self.max_turns > 1 else "You answer once.")
        return (
            f"Question answering with search. {data} If you have a search tool, call it as "
            "often as you need before answering.\n"
            "Give your final answer inside answer tags, as short as possible (only the name, "
            f"place, year or word asked for), e.g. <answer>Eskerford</answer>. {retry}\n"
            "Rewards: 1 when your answer matches a correct answer exactly, ignoring case, "
            "punctuation and the words 'a', 'an', 'the'; otherwise 0."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        # Right a third of the time, so random play also sees successes.
        if rng.random() < 1 / 3:
            return self.format_action(self.item.answers[0])
        return self.format_action(self.corpus[int(rng.integers(len(self.corpus)))].title)


def make_search_qa_env(*, max_calls: int = 4, k: int = 3,
                       retriever: Literal["bm25", "dense"] = "bm25", dense_model: str | None = None,
                       cache_dir: str | Path | Literal[False] | None = None,
                       **env_options: Any) -> ToolWrapper:
    """``ToolWrapper(SearchQAEnv(**env_options), [SearchTool(...)], max_calls=max_calls)``.

    Args:
        max_calls: searches (tool calls) allowed per episode.
        k: passages a search returns unless the agent asks for more (up to 10).
        retriever: ``"bm25"`` (bm25s) or ``"dense"`` (sentence-transformers, with ``dense_model``).
        dense_model: the sentence-transformers model of dense retrieval.
        cache_dir: where indexes are cached on disk (see :func:`get_retriever`).
        env_options: :class:`SearchQAEnv`'s arguments.
    """
    if retriever == "bm25":
        require_bm25s()  # before building anything, with the install command
    env = SearchQAEnv(**env_options)
    index = get_retriever(env.corpus, retriever, model=dense_model, cache_dir=cache_dir)
    return ToolWrapper(env, [SearchTool(index, k=k)], max_calls=max_calls)


# -- reading options -------------------------------------------------------------


def _read_hops(hops: Sequence[int] | int) -> tuple[int, ...]:
    chosen = (hops,) if isinstance(hops, int) else tuple(hops)
    if not chosen or any(isinstance(h, bool) or h not in _HOPS for h in chosen):
        raise ConfigError(f"hops must be some of {_HOPS}, got {hops!r}.")
    return tuple(dict.fromkeys(chosen))


@functools.lru_cache(maxsize=16)
def _hop_pools(seed: int, size: int, hops: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Indices of the generated world's questions for each hop count (computed once)."""
    questions = default_world(seed, size).questions
    pools = (tuple(i for i, item in enumerate(questions) if item.num_hops == hop) for hop in hops)
    return tuple(pool for pool in pools if pool)


@functools.lru_cache(maxsize=8)
def _corpus_file(path: str, _mtime_ns: int, _size: int) -> Corpus:
    # Keyed by modification time and size too, so an edited file is read again.
    return load_corpus(path)


@functools.lru_cache(maxsize=8)
def _questions_file(path: str, _mtime_ns: int, _size: int) -> tuple[QAItem, ...]:
    return tuple(load_questions(path))


def _file_key(path: str | Path) -> tuple[str, int, int]:
    file = Path(path).resolve()
    try:
        stat = file.stat()
    except OSError as error:
        raise ConfigError(f"Cannot read {str(path)!r} ({error.strerror}). Give the path of a "
                          "JSONL file.") from error
    return str(file), stat.st_mtime_ns, stat.st_size


def _read_corpus(corpus: _CorpusSource) -> Corpus:
    # Reused objects matter: a Corpus fingerprints itself once, and indexes are found by it.
    if isinstance(corpus, Corpus):
        return corpus
    if isinstance(corpus, str | Path):
        return _corpus_file(*_file_key(corpus))
    if isinstance(corpus, Sequence):
        return Corpus(read_passage(row, f"corpus[{i}]") for i, row in enumerate(corpus))
    raise ConfigError(f"corpus must be a Corpus, a JSONL path or a list of passages, "
                      f"got {type(corpus).__name__}.")


def _read_questions(questions: _QuestionSource | None) -> tuple[QAItem, ...]:
    if isinstance(questions, str | Path):
        return _questions_file(*_file_key(questions))
    if isinstance(questions, Sequence) and questions:
        return tuple(read_question(row, f"questions[{i}]") for i, row in enumerate(questions))
    raise ConfigError(f"questions must be a JSONL path or a non-empty list of questions, "
                      f"got {questions!r:.100}.")


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."
