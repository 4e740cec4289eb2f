"""Exact match and token F1 of a short answer against gold answers (SQuAD's rules).

Both compare normalised text: lower case, punctuation removed, the articles
"a", "an", "the" dropped, whitespace collapsed, as SQuAD's evaluation script
and Search-R1's reward do. Scores take the best gold answer.

>>> exact_match("The Halvard Institute.", ["Halvard Institute"])
True
>>> round(f1_score("Halvard Institute of Art", ["the Halvard Institute"]), 3)
0.667
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable

__all__ = ["exact_match", "f1_score", "normalize_answer", "score_answer"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and articles, collapse whitespace."""
    # NFKC folds look-alike forms (full-width letters, ligatures) into one spelling.
    text = unicodedata.normalize("NFKC", text).lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(answer: str, golds: Iterable[str]) -> bool:
    """Whether ``answer`` equals one of ``golds`` after :func:`normalize_answer`."""
    return score_answer(answer, golds)[0]


def f1_score(answer: str, golds: Iterable[str]) -> float:
    """The best token-level F1 of ``answer`` against any of ``golds`` (0.0 to 1.0)."""
    return score_answer(answer, golds)[1]


def score_answer(answer: str, golds: Iterable[str]) -> tuple[bool, float]:
    """:func:`exact_match` and :func:`f1_score` together, normalising each text once.

    >>> score_answer("the Halvard Institute", ["Halvard Institute", "Halvard"])
    (True, 1.0)
    """
    mine = normalize_answer(answer)
    tokens = mine.split()
    counts = Counter(tokens)  # once, not per gold: an answer can be long
    exact, best = False, 0.0
    for gold in golds:
        theirs = normalize_answer(gold)
        exact = exact or mine == theirs
        their_tokens = theirs.split()
        common = sum((counts & Counter(their_tokens)).values())
        if common == 0:
            continue
        precision, recall = common / len(tokens), common / len(their_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return exact, best
