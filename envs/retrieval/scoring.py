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

__all__ = ["exact_match", "f1_score", "normalize_answer"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and articles, collapse whitespace."""
    # NFKC folds look-alike forms (full-width letters, ligatures) into one spelling.
    text = unicodedata.normalize("NFKC", text).lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(answer: str, golds: Iterable[str]) -> bool:
    """Whether ``answer`` equals one of ``golds`` after :func:`normalize_answer`."""
    mine = normalize_answer(answer)
    return any(mine == normalize_answer(gold) for gold in golds)


def f1_score(answer: str, golds: Iterable[str]) -> float:
    """The best token-level F1 of ``answer`` against any of ``golds`` (0.0 to 1.0)."""
    mine = normalize_answer(answer).split()
    counts = Counter(mine)  # once, not per gold: an answer can be long
    best = 0.0
    for gold in golds:
        theirs = normalize_answer(gold).split()
        common = sum((counts & Counter(theirs)).values())
        if common == 0:
            continue
        precision, recall = common / len(mine), common / len(theirs)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best
