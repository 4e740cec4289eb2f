"""The generated knowledge base: deterministic, consistent, every question answerable by search."""

from __future__ import annotations

import collections
import re

import pytest

from agentgym.envs.retrieval import generate_world, get_retriever
from agentgym.envs.retrieval.world import default_world
from agentgym.errors import ConfigError

KINDS_BY_HOPS = {
    1: {"birthplace", "birth_year", "occupation", "founder", "org_city", "org_year",
        "city_country", "capital"},
    2: {"birth_country", "employer_founder", "employer_city", "founder_birthplace",
        "founder_birth_year", "org_country"},
    3: {"birth_capital", "founder_birth_country"},
}


def test_the_same_seed_gives_the_same_world_and_other_seeds_differ() -> None:
    first, again, other = generate_world(7), generate_world(7), generate_world(8)
    assert list(first.corpus) == list(again.corpus)
    assert first.questions == again.questions
    assert first.corpus.fingerprint == again.corpus.fingerprint
    assert first.corpus.fingerprint != other.corpus.fingerprint
    assert {p.title for p in first.corpus} != {p.title for p in other.corpus}


def test_the_default_world_is_generated_once_per_process() -> None:
    assert default_world(0) is default_world(0)


def test_a_world_has_every_kind_of_entity_and_question() -> None:
    world = generate_world(0)
    assert 200 < len(world.corpus) < 400
    titles = [passage.title for passage in world.corpus]
    assert len(set(titles)) == len(titles), "titles are unique"
    kinds = collections.Counter(item.kind for item in world.questions)
    for hops, expected in KINDS_BY_HOPS.items():
        assert expected <= kinds.keys()
        assert all(item.num_hops == hops for item in world.questions if item.kind in expected)
    assert len({item.question for item in world.questions}) == len(world.questions)


def test_documents_read_as_prose_with_names_that_look_like_names() -> None:
    world = generate_world(3)
    for passage in world.corpus:
        assert passage.text.endswith(".") and passage.text[0].isupper()
        assert not re.search(r"(\w)\1\1", passage.title.lower()), passage.title
    years = [int(year) for passage in world.corpus
             for year in re.findall(r"\b(?:1\d{3}|20\d\d)\b", passage.text)]
    assert max(years) <= 2020


def _check_answerable(seed: int, people: int, every: int = 1) -> int:
    """Each hop's key phrase finds its gold document in the top 5, which states the hop's fact."""
    world = generate_world(seed, people)
    retriever = get_retriever(world.corpus, cache_dir=False)
    checked = 0
    for item in world.questions[::every]:
        assert item.hops and item.hops[-1].answer == item.answers[0]
        for hop in item.hops:
            titles = [hit.passage.title for hit in retriever.search(hop.query, 5)]
            assert hop.title in titles, (item.question, hop, titles)
            assert hop.answer in world.corpus.by_title[hop.title].text, (item.question, hop)
        checked += 1
    return checked


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_question_of_a_default_world_is_answerable_by_search(seed: int) -> None:
    assert _check_answerable(seed, 150) > 1000


def test_questions_of_a_bigger_world_stay_answerable() -> None:
    # 600 people: about 1,000 documents and 5,000 questions, one in five checked.
    assert _check_answerable(5, 600, every=5) > 1000


def test_a_multi_hop_question_needs_a_document_that_does_not_answer_it_alone() -> None:
    world = generate_world(0)
    item = next(q for q in world.questions if q.kind == "founder_birthplace")
    first, second = item.hops
    first_text = world.corpus.by_title[first.title].text
    assert first.answer in first_text and item.answers[0] not in first_text
    assert second.query == first.answer


def test_a_bad_size_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="people must be at least 8"):
        generate_world(0, people=3)
    with pytest.raises(ConfigError, match="seed must be an integer"):
        generate_world("zero")  # type: ignore[arg-type]
