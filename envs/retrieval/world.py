"""A knowledge base of a fictional world, generated from a seed, with questions about it.

People, cities, countries and organisations, each described in a short
document, plus event reports that mention them without giving their facts
(distractors), and organisations named after people they have nothing to do
with. Every fact is stated in exactly one kind of document, so a question
about a relation of relations needs one search per hop::

    world = generate_world(seed=0)
    world.corpus[0]   # Passage(title='Yannick Fennis', text='Yannick Fennis was a painter ...')
    q = next(q for q in world.questions if q.kind == "founder_birthplace")
    q.question        # 'In which city was the founder of the Ashick Orchestra born?'
    q.hops            # (Hop(query='Ashick Orchestra', title='Ashick Orchestra',
                      #      answer='Signe Ashstad'),
                      #  Hop(query='Signe Ashstad', title='Signe Ashstad', answer='Frostwick'))

Names come from invented syllables, so a model cannot know the answers
without searching. The same seed and size give the same world on any machine
(only ``random.Random.random`` is used, whose sequence Python guarantees).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from agentgym.core import check_number
from agentgym.errors import ConfigError

from agentgym.envs.retrieval import names as N
from agentgym.envs.retrieval.data import Corpus, Hop, Passage, QAItem

__all__ = ["World", "default_world", "generate_world"]

_T = TypeVar("_T")


@dataclass(slots=True)
class _Person:
    name: str
    female: bool
    born: int
    died: int
    city: str
    occupation: str
    employer: str | None = None
    founded: str | None = None


@dataclass(slots=True)
class _Org:
    name: str
    kind: str
    city: str
    founder: str
    year: int
    staff: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _City:
    name: str
    country: str
    year: int
    river: str | None
    orgs: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class World:
    """A generated knowledge base: its documents and the questions they answer."""

    seed: int
    corpus: Corpus
    questions: tuple[QAItem, ...]


class _Names:
    """Draws names no other entity of the world has."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.taken: set[str] = set()

    def compound(self, heads: Sequence[str], tails: Sequence[str]) -> str:
        # Two parts while they last, then a middle syllable: the space grows tenfold.
        for attempt in range(10_000):
            middle = _pick(self.rng, N.MIDDLES) if attempt >= 50 else ""
            name = (_pick(self.rng, heads) + middle + _pick(self.rng, tails)).capitalize()
            if _readable(name) and self.claim(name):
                return name
        raise ConfigError(f"Ran out of unused names after {len(self.taken)}; "
                          "generate a smaller world.")

    def claim(self, name: str) -> bool:
        key = name.lower()
        if key in self.taken:
            return False
        self.taken.add(key)
        return True


def _readable(name: str) -> bool:
    """No letter three times in a row ("Mottter")."""
    lower = name.lower()
    return not any(a == b == c for a, b, c in zip(lower, lower[1:], lower[2:]))


def _pick(rng: random.Random, items: Sequence[_T]) -> _T:
    return items[int(rng.random() * len(items))]


def _between(rng: random.Random, low: int, high: int) -> int:
    """An integer in [low, high]."""
    return low + int(rng.random() * (high - low + 1))


def _sample(rng: random.Random, items: Sequence[_T], count: int) -> list[_T]:
    """``count`` different items (all of them when there are fewer), in random order."""
    count = min(count, len(items))
    if count * 4 < len(items):
        # A few from many: redraw the rare repeat instead of copying a big list.
        picked: dict[int, None] = {}
        while len(picked) < count:
            picked[int(rng.random() * len(items))] = None
        return [items[index] for index in picked]
    pool = list(items)
    for i in range(count):  # the first ``count`` steps of a Fisher-Yates shuffle
        j = i + int(rng.random() * (len(pool) - i))
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:count]


def generate_world(seed: int = 0, people: int = 150, *, with_questions: bool = True) -> World:
    """Generate a world of ``people`` people, with about 1.7 documents per person.

    Sizes follow from ``people``: a third as many organisations, an eighth as
    many cities (4,000 at most), a country per twelve cities (4 to 200), and
    an event report per four people. A world has about 7 questions per
    person; ``with_questions=False`` skips them (a big corpus to benchmark).
    """
    check_number("seed", seed, minimum=0)
    check_number("people", people, minimum=8, maximum=200_000)
    rng = random.Random(seed)
    names = _Names(rng)
    countries = [names.compound(N.COUNTRY_HEADS, N.COUNTRY_TAILS)
                 for _ in range(min(max(4, people // 96), 200))]
    cities = _make_cities(rng, names, countries, min(max(8, people // 8), 4000))
    persons = _make_people(rng, names, list(cities), people)
    orgs = _make_orgs(rng, names, persons, cities, max(4, people // 3))
    capitals = {country: _pick(rng, [c.name for c in cities.values() if c.country == country])
                for country in countries}
    passages = [_person_doc(rng, p) for p in persons.values()]
    passages += [_org_doc(rng, o) for o in orgs.values()]
    passages += [_city_doc(rng, c, capitals) for c in cities.values()]
    passages += [_country_doc(rng, k, capitals[k], cities) for k in countries]
    passages += _event_docs(rng, names, persons, orgs, list(cities), people // 4)
    questions = _questions(persons, orgs, cities, capitals) if with_questions else []
    return World(seed, Corpus(passages), tuple(questions))


@functools.lru_cache(maxsize=4)
def default_world(seed: int = 0, people: int = 150) -> World:
    """:func:`generate_world`, generated once per process for each (seed, size)."""
    return generate_world(seed, people)


# -- entities ------------------------------------------------------------------


def _make_cities(rng: random.Random, names: _Names, countries: list[str],
                 count: int) -> dict[str, _City]:
    cities: dict[str, _City] = {}
    for index in range(count):
        # Every country gets a city before any gets a second, so each has a capital.
        country = countries[index] if index < len(countries) else _pick(rng, countries)
        name = names.compound(N.CITY_HEADS, N.CITY_TAILS)
        river = _pick(rng, N.RIVERS) if rng.random() < 0.5 else None
        cities[name] = _City(name, country, _between(rng, 900, 1700), river)
    return cities


def _make_people(rng: random.Random, names: _Names, cities: list[str],
                 count: int) -> dict[str, _Person]:
    people: dict[str, _Person] = {}
    surnames: list[str] = []
    while len(people) < count:
        female = rng.random() < 0.5
        given = _pick(rng, N.FEMALE_NAMES if female else N.MALE_NAMES)
        # Some share a surname with someone already there: namesakes a search must tell apart.
        # Big worlds share more, or they would run out of surnames.
        if surnames and rng.random() > min(0.75, 8000 / count):
            surname = _pick(rng, surnames)
        else:
            surname = names.compound(N.SURNAME_HEADS, N.SURNAME_TAILS)
            surnames.append(surname)
        name = f"{given} {surname}"
        if not names.claim(name):
            continue
        born = _between(rng, 1780, 1960)
        # Nobody dies after 2020: the world is historical.
        people[name] = _Person(name, female, born, born + _between(rng, 35, min(95, 2020 - born)),
                               _pick(rng, cities), _pick(rng, N.OCCUPATIONS))
    return people


def _make_orgs(rng: random.Random, names: _Names, people: dict[str, _Person],
               cities: dict[str, _City], count: int) -> dict[str, _Org]:
    founders = _sample(rng, list(people), count)
    surnames = [name.split(" ", 1)[1] for name in people]
    orgs: dict[str, _Org] = {}
    for founder in founders:
        person = people[founder]
        while True:
            # Half are named after a surname of the world: the Tolven Press was not founded by a
            # Tolven. Only the whole name must be new, so the stem is not claimed.
            stem = (_pick(rng, surnames) if rng.random() < 0.5 else
                    _pick(rng, N.SURNAME_HEADS) + _pick(rng, N.MIDDLES + ("",) * 10)
                    + _pick(rng, N.SURNAME_TAILS)).capitalize()
            word, kind = _pick(rng, N.ORG_KINDS)
            if _readable(stem) and names.claim(f"{stem} {word}"):
                break
        year = _between(rng, person.born + 22, min(person.died, person.born + 70))
        org = _Org(f"{stem} {word}", kind, _pick(rng, list(cities)), founder, year)
        orgs[org.name] = org
        person.founded = org.name
        cities[org.city].orgs.append(org.name)
    org_names = list(orgs)
    for person in people.values():
        if rng.random() < 0.6:
            employer = _pick(rng, org_names)
            if orgs[employer].founder != person.name:
                person.employer = employer
                orgs[employer].staff.append(person.name)
    return orgs


# -- documents -----------------------------------------------------------------


def _person_doc(rng: random.Random, p: _Person) -> Passage:
    she, her = ("She", "her") if p.female else ("He", "his")
    article = "an" if p.occupation[0] in "aeiou" else "a"
    sentences = [_pick(rng, (
        f"{p.name} was {article} {p.occupation} born in {p.city} in {p.born}.",
        f"Born in {p.city} in {p.born}, {p.name} became {article} {p.occupation}.",
        f"{p.name} (born {p.born}) was {article} {p.occupation} from the city of {p.city}.",
    ))]
    if p.employer:
        sentences.append(_pick(rng, (
            f"{she} worked for the {p.employer} for many years.",
            f"{she} spent most of {her} career at the {p.employer}.",
        )))
    if p.founded:
        sentences.append(_pick(rng, (
            f"{she} founded the {p.founded}.",
            f"{she} is remembered as the founder of the {p.founded}.",
        )))
    sentences.append(_pick(rng, (
        f"{she} wrote several books about {_pick(rng, N.TOPICS)}.",
        f"{she} travelled widely and kept diaries about {_pick(rng, N.TOPICS)}.",
        f"In later life {she.lower()} taught a course on {_pick(rng, N.TOPICS)}.",
    )))
    sentences.append(f"{she} died in {p.died}.")
    return Passage(p.name, " ".join(sentences))


def _org_doc(rng: random.Random, o: _Org) -> Passage:
    sentences = [_pick(rng, (
        f"The {o.name} is a {o.kind} based in {o.city}. It was founded in {o.year} by {o.founder}.",
        f"Founded by {o.founder} in {o.year}, the {o.name} is a {o.kind} in {o.city}.",
        (f"The {o.name}, a {o.kind} with its seat in {o.city}, was established by "
         f"{o.founder} in {o.year}."),
    ))]
    if o.staff:
        sentences.append(f"People who worked there include {_and(o.staff[:3])}.")
    sentences.append(_pick(rng, (
        "Its archives are open to visitors on weekdays.",
        f"It is known for its work on {_pick(rng, N.TOPICS)}.",
        f"It has about {_between(rng, 2, 60) * 10} members.",
    )))
    return Passage(o.name, " ".join(sentences))


def _city_doc(rng: random.Random, c: _City, capitals: dict[str, str]) -> Passage:
    where = "the capital of" if capitals[c.country] == c.name else "a city in"
    river = f", on the river {c.river}" if c.river else ""
    sentences = [f"{c.name} is {where} {c.country}{river}.",
                 f"{c.name} was founded in {c.year}."]
    if c.orgs:
        sentences.append(f"It is home to the {_and(c.orgs[:2])}.")
    sentences.append(_pick(rng, (
        f"{c.name} is known for its {_pick(rng, ('market', 'harbour', 'old bridge', 'abbey'))}.",
        f"Its people are fond of {_pick(rng, N.TOPICS)}.",
    )))
    return Passage(c.name, " ".join(sentences))


def _country_doc(rng: random.Random, country: str, capital: str,
                 cities: dict[str, _City]) -> Passage:
    others = [c.name for c in cities.values() if c.country == country and c.name != capital]
    sentences = [f"{country} is a country whose capital is {capital}."]
    if others:
        sentences.append(f"Its other cities include {_and(_sample(rng, others, 3))}.")
    return Passage(country, " ".join(sentences))


def _event_docs(rng: random.Random, names: _Names, people: dict[str, _Person],
                orgs: dict[str, _Org], cities: list[str], count: int) -> list[Passage]:
    """Reports that name people, places and organisations together but state none of their facts."""
    docs = []
    person_names, org_names = list(people), list(orgs)
    while len(docs) < count:
        city, year = _pick(rng, cities), _between(rng, 1800, 2000)
        kind = _pick(rng, N.EVENT_KINDS)
        title = f"{year} {city} {kind}"
        if not names.claim(title):
            continue
        guests = _sample(rng, person_names, 3)
        hosts = _sample(rng, org_names, 1)
        # The city is named in the title only: a report must not outrank the city's own page.
        docs.append(Passage(title, (
            f"The {kind.lower()} of {year} brought together {_and(guests)}. The {hosts[0]} "
            f"sent a delegation, and the talks were about {_pick(rng, N.TOPICS)}."
        )))
    return docs


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# -- questions -----------------------------------------------------------------


def _questions(people: dict[str, _Person], orgs: dict[str, _Org], cities: dict[str, _City],
               capitals: dict[str, str]) -> list[QAItem]:
    def person(name: str, fact: str) -> Hop:
        return Hop(name, name, fact)

    def city(name: str) -> Hop:
        return Hop(name, name, cities[name].country)

    found: list[QAItem] = []

    def add(question: str, answer: str, kind: str, *hops: Hop) -> None:
        found.append(QAItem(question, (answer,), kind, hops))

    for p in people.values():
        add(f"In which city was {p.name} born?", p.city, "birthplace", person(p.name, p.city))
        add(f"In what year was {p.name} born?", str(p.born), "birth_year",
            person(p.name, str(p.born)))
        add(f"What was {p.name}'s occupation?", p.occupation, "occupation",
            person(p.name, p.occupation))
        add(f"In which country was {p.name} born?", cities[p.city].country, "birth_country",
            person(p.name, p.city), city(p.city))
        country = cities[p.city].country
        add(f"What is the capital of the country in which {p.name} was born?", capitals[country],
            "birth_capital", person(p.name, p.city), city(p.city),
            Hop(country, country, capitals[country]))
        if p.employer:
            o = orgs[p.employer]
            add(f"Who founded the organisation that {p.name} worked for?", o.founder,
                "employer_founder", person(p.name, o.name), Hop(o.name, o.name, o.founder))
            add(f"In which city is the organisation that {p.name} worked for based?", o.city,
                "employer_city", person(p.name, o.name), Hop(o.name, o.name, o.city))
    for o in orgs.values():
        founder = people[o.founder]
        org_hop = Hop(o.name, o.name, o.founder)
        add(f"Who founded the {o.name}?", o.founder, "founder", org_hop)
        add(f"In which city is the {o.name} based?", o.city, "org_city",
            Hop(o.name, o.name, o.city))
        add(f"In what year was the {o.name} founded?", str(o.year), "org_year",
            Hop(o.name, o.name, str(o.year)))
        add(f"In which city was the founder of the {o.name} born?", founder.city,
            "founder_birthplace", org_hop, person(founder.name, founder.city))
        add(f"In what year was the founder of the {o.name} born?", str(founder.born),
            "founder_birth_year", org_hop, person(founder.name, str(founder.born)))
        add(f"In which country is the {o.name} based?", cities[o.city].country, "org_country",
            Hop(o.name, o.name, o.city), city(o.city))
        add(f"In which country was the founder of the {o.name} born?",
            cities[founder.city].country, "founder_birth_country", org_hop,
            person(founder.name, founder.city), city(founder.city))
    for c in cities.values():
        add(f"In which country is {c.name}?", c.country, "city_country", city(c.name))
    for country, capital in capitals.items():
        add(f"What is the capital of {country}?", capital, "capital",
            Hop(country, country, capital))
    return found
