"""Loading user corpora and question sets from JSONL; answer scoring."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.envs.retrieval import (Corpus, Passage, QAItem, exact_match, f1_score,
                                     load_corpus, load_questions, normalize_answer)
from agentgym.errors import ConfigError
from fakes import write_jsonl


def test_a_corpus_loads_from_title_and_text_lines(tmp_path: Path) -> None:
    file = write_jsonl(tmp_path / "corpus.jsonl", [
        {"title": "Eskerford", "text": "Eskerford is a city.", "id": 7},
        "",  # blank lines are skipped
        {"text": "A passage with no title."},
    ])
    corpus = load_corpus(file)
    assert list(corpus) == [Passage("Eskerford", "Eskerford is a city."),
                            Passage("", "A passage with no title.")]
    assert load_corpus(str(file)).fingerprint == corpus.fingerprint


def test_a_corpus_loads_from_search_r1_contents_lines(tmp_path: Path) -> None:
    file = write_jsonl(tmp_path / "wiki.jsonl", [
        {"id": "0", "contents": '"Eskerford"\nEskerford is a city in Tessaria.'},
    ])
    assert list(load_corpus(file)) == [Passage("Eskerford", "Eskerford is a city in Tessaria.")]


def test_questions_load_with_any_of_the_answer_fields(tmp_path: Path) -> None:
    file = write_jsonl(tmp_path / "qa.jsonl", [
        {"question": "Where is Eskerford?", "answers": ["Tessaria", "in Tessaria"]},
        {"question": "Who founded it?", "answer": " Mira Tolven "},
        {"question": "When?", "golden_answers": ["1902"], "kind": "year"},
    ])
    assert load_questions(file) == [
        QAItem("Where is Eskerford?", ("Tessaria", "in Tessaria")),
        QAItem("Who founded it?", ("Mira Tolven",)),
        QAItem("When?", ("1902",), "year"),
    ]


@pytest.mark.parametrize(("row", "message"), [
    ('{"title": "a", "text": ', r"corpus.jsonl:2 is not valid JSON"),
    ('{"title": "a"}', r"corpus.jsonl:2 must have a string 'text'"),
    ('["a", "b"]', r"corpus.jsonl:2 must have a string 'text'"),
    ('{"title": 3, "text": "x"}',
     r"corpus.jsonl:2 must have a string 'text' \(and a string 'title'\)"),
])
def test_a_bad_corpus_line_is_named(tmp_path: Path, row: str, message: str) -> None:
    file = write_jsonl(tmp_path / "corpus.jsonl", [{"title": "ok", "text": "ok"}, row])
    with pytest.raises(ConfigError, match=message):
        load_corpus(file)


@pytest.mark.parametrize(("row", "message"), [
    ({"question": "Where?"},
     r"qa.jsonl:1 must have a non-empty string 'question' and its gold answers"),
    ({"question": "", "answer": "x"}, r"qa.jsonl:1 must have a non-empty string 'question'"),
    ({"question": "Where?", "answers": []}, r"qa.jsonl:1 .*'answers' \(a list of strings\)"),
    ({"question": "Where?", "answers": ["x", 3]}, r"qa.jsonl:1 .*'answers' \(a list of strings\)"),
])
def test_a_bad_question_line_is_named(tmp_path: Path, row: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_questions(write_jsonl(tmp_path / "qa.jsonl", [row]))


def test_missing_and_empty_files_say_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file: .*nothing.jsonl.*JSONL file"):
        load_corpus(tmp_path / "nothing.jsonl")
    with pytest.raises(ConfigError, match="holds no passages"):
        load_corpus(write_jsonl(tmp_path / "empty.jsonl", [""]))
    with pytest.raises(ConfigError, match="holds no questions"):
        load_questions(write_jsonl(tmp_path / "empty_qa.jsonl", []))


def test_a_corpus_must_hold_passages() -> None:
    with pytest.raises(ConfigError, match="The corpus is empty"):
        Corpus([])
    with pytest.raises(ConfigError, match="item 0 is dict. Use read_passage"):
        Corpus([{"title": "a", "text": "b"}])  # type: ignore[list-item]


def test_the_fingerprint_tells_apart_texts_that_concatenate_alike() -> None:
    assert Corpus([Passage("ab", "c")]).fingerprint != Corpus([Passage("a", "bc")]).fingerprint
    assert Corpus([Passage("a", "b")]).fingerprint == Corpus([Passage("a", "b")]).fingerprint


@pytest.mark.parametrize(("answer", "golds", "em", "f1"), [
    ("Eskerford", ["Eskerford"], True, 1.0),
    ("  eskerford. ", ["Eskerford"], True, 1.0),
    ("The Halvard Institute", ["Halvard Institute"], True, 1.0),
    ("halvard institute!", ["the Halvard Institute"], True, 1.0),
    ("Mira", ["Mira Tolven"], False, 2 / 3),
    ("Mira Tolven of Eskerford", ["Mira Tolven"], False, 2 / 3),
    ("Brinholm", ["Eskerford"], False, 0.0),
    ("1902", ["1874", "1902"], True, 1.0),
    ("", ["Eskerford"], False, 0.0),
    ("the", ["Eskerford"], False, 0.0),
    ("ＥＳＫＥＲＦＯＲＤ", ["Eskerford"], True, 1.0),  # full-width letters
    ("\ud800", ["Eskerford"], False, 0.0),
])
def test_exact_match_and_f1(answer: str, golds: list[str], em: bool, f1: float) -> None:
    assert exact_match(answer, golds) is em
    assert f1_score(answer, golds) == pytest.approx(f1)


def test_normalize_answer() -> None:
    assert normalize_answer("  The  Halvard-Institute, (Brinholm)  ") == "halvardinstitute brinholm"
    assert normalize_answer("A an THE") == ""
