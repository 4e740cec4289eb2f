"""BM25 retrieval: ranking, caching in memory and on disk, hostile queries."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import pytest

from agentgym.envs.retrieval import BM25Retriever, Corpus, Passage, get_retriever
from agentgym.envs.retrieval.index import (DISK_CACHE_MIN_PASSAGES, DenseRetriever,
                                           clear_retriever_cache, tokenize)
from agentgym.errors import ConfigError, MissingDependencyError

CORPUS = Corpus([
    Passage("Mira Tolven", "Mira Tolven was a botanist born in Eskerford in 1874."),
    Passage("Halvard Institute", "The Halvard Institute is a research institute in Brinholm. "
            "It was founded in 1902 by Mira Tolven."),
    Passage("Eskerford", "Eskerford is a city in Tessaria. Eskerford lies on the river Lune."),
    Passage("Brinholm", "Brinholm is the capital of Tessaria."),
    Passage("Arno Tolven", "Arno Tolven was an engineer who built bridges in Brinholm."),
])


def titles(hits: list) -> list[str]:
    return [hit.passage.title for hit in hits]


def test_the_best_match_comes_first_with_its_title() -> None:
    retriever = BM25Retriever(CORPUS, cache_dir=False)
    hits = retriever.search("Who founded the Halvard Institute?", k=2)
    assert titles(hits)[0] == "Halvard Institute"
    assert hits[0].index == 1 and hits[0].passage is CORPUS[1]
    assert hits[0].score > 0
    assert titles(retriever.search("Mira Tolven", k=1)) == ["Mira Tolven"]


def test_a_title_word_alone_finds_its_passage() -> None:
    # Titles are indexed with the text.
    corpus = Corpus([Passage("Lune", "A river."), Passage("Dove", "Another river.")])
    assert titles(BM25Retriever(corpus, cache_dir=False).search("lune", k=1)) == ["Lune"]


def test_words_are_stemmed_and_stop_words_dropped() -> None:
    assert tokenize("The cities of the world") == tokenize("city world")
    retriever = BM25Retriever(CORPUS, cache_dir=False)
    assert titles(retriever.search("cities", k=1)) == ["Eskerford"]


def test_only_matching_passages_come_back_and_k_caps_them() -> None:
    retriever = BM25Retriever(CORPUS, cache_dir=False)
    found = retriever.search("Tolven", k=10)
    assert titles(found) == ["Mira Tolven", "Arno Tolven", "Halvard Institute"]
    assert found[0].score >= found[1].score >= found[2].score > 0
    assert len(retriever.search("Tolven", k=1)) == 1
    assert retriever.search("zebra", k=3) == []
    assert retriever.search("the of and", k=3) == []  # only stop words
    assert retriever.search("", k=3) == []


def test_results_are_the_same_every_time_ties_broken_by_position() -> None:
    corpus = Corpus([Passage(f"Copy {i}", "the same words here") for i in range(6)])
    retriever = BM25Retriever(corpus, cache_dir=False)
    first = titles(retriever.search("same words", k=3))
    assert first == ["Copy 0", "Copy 1", "Copy 2"]
    assert all(titles(retriever.search("same words", k=3)) == first for _ in range(5))


@pytest.mark.parametrize("query", ["\ud800 Tolven", "\x00\x01", "Tolven " * 5000, "🙂 Brinholm",
                                   "<search>Tolven</search>", "Ärzte naïve", "1902"])
def test_any_query_text_is_searched_without_error(query: str) -> None:
    hits = BM25Retriever(CORPUS, cache_dir=False).search(query, k=3)
    assert len(hits) <= 3


def test_get_retriever_builds_once_and_shares_the_index() -> None:
    clear_retriever_cache()
    first = get_retriever(CORPUS, cache_dir=False)
    same_text = Corpus(list(CORPUS))  # another object, the same passages
    assert get_retriever(same_text, cache_dir=False) is first
    other = Corpus([*CORPUS, Passage("Extra", "One more passage.")])
    assert get_retriever(other, cache_dir=False) is not first


def test_the_index_is_saved_on_disk_and_loaded_back(tmp_path: Path) -> None:
    built = BM25Retriever(CORPUS, cache_dir=tmp_path)
    assert not built.loaded_from_cache
    folders = [path for path in tmp_path.iterdir()]
    assert len(folders) == 1 and folders[0].name.startswith("bm25-" + CORPUS.fingerprint[:32])
    loaded = BM25Retriever(CORPUS, cache_dir=tmp_path)
    assert loaded.loaded_from_cache
    for query in ["Tolven", "capital of Tessaria", "river"]:
        assert loaded.search(query, 3) == built.search(query, 3)


def test_an_unreadable_cached_index_is_rebuilt(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    BM25Retriever(CORPUS, cache_dir=tmp_path)
    (folder,) = tmp_path.iterdir()
    for file in folder.iterdir():
        file.write_text("not an index")
    with caplog.at_level(logging.WARNING):
        rebuilt = BM25Retriever(CORPUS, cache_dir=tmp_path)
    assert not rebuilt.loaded_from_cache
    assert "rebuilding" in caplog.text
    assert titles(rebuilt.search("Halvard", 1)) == ["Halvard Institute"]
    assert BM25Retriever(CORPUS, cache_dir=tmp_path).loaded_from_cache  # saved again, readable


def test_small_corpora_stay_off_the_default_disk_cache(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    BM25Retriever(CORPUS)
    assert not (tmp_path / "retrieval").exists()
    big = Corpus(Passage(f"Doc {i}", f"word{i} shared text")
                 for i in range(DISK_CACHE_MIN_PASSAGES))
    BM25Retriever(big)
    assert len(list((tmp_path / "retrieval").iterdir())) == 1
    assert BM25Retriever(big).loaded_from_cache


def test_get_retriever_says_what_it_needs() -> None:
    with pytest.raises(ConfigError, match="needs a Corpus, got list"):
        get_retriever([Passage("a", "b")])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="retriever must be 'bm25' or 'dense', got 'tfidf'"):
        get_retriever(CORPUS, "tfidf")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="model= is for dense retrieval"):
        get_retriever(CORPUS, model="some-model")


@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is not None,
                    reason="sentence-transformers is installed here")
def test_dense_retrieval_without_sentence_transformers_names_the_fix() -> None:
    with pytest.raises(MissingDependencyError, match="pip install sentence-transformers"):
        DenseRetriever(CORPUS, model="all-MiniLM-L6-v2")
    with pytest.raises(MissingDependencyError, match="sentence-transformers"):
        get_retriever(CORPUS, "dense", model="all-MiniLM-L6-v2")
