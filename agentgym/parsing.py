"""Pull an action out of what a model wrote.

Models wrap answers in tags, box them, put several moves in one turn, shout
them in capitals or pad them with spaces. These helpers accept all of that and
return ``None`` (never raise) when nothing usable is there, so an env can turn
``None`` into feedback. Every function takes any ``str``.

>>> extract_answer("I think <answer>Left</answer> no, <ANSWER> up </answer>")
'up'
>>> extract_boxed(r"so x = \\boxed{\\frac{1}{2}}.")
'\\\\frac{1}{2}'
>>> split_moves("Up || left ||  || Down")
['Up', 'left', 'Down']
>>> match_choice(" LEFT. ", {"left": 2, "l": 2})
2
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import accumulate, repeat
from operator import indexOf
from typing import TypeVar

__all__ = [
    "MOVE_SEPARATOR",
    "extract_answer",
    "extract_boxed",
    "extract_tag",
    "match_choice",
    "normalize",
    "read_int",
    "split_moves",
]

_T = TypeVar("_T")

#: Separator of several moves in one turn, as RAGEN writes them.
MOVE_SEPARATOR = "||"

_TAG_CACHE: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] = {}


def _tag_patterns(tag: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The opening and the closing ``tag`` tag (cached)."""
    patterns = _TAG_CACHE.get(tag)
    if patterns is None:
        name = re.escape(tag)
        patterns = (re.compile(rf"<\s*{name}\s*>", re.IGNORECASE),
                    re.compile(rf"<\s*/\s*{name}\s*>", re.IGNORECASE))
        _TAG_CACHE[tag] = patterns
    return patterns


def extract_tag(text: str, tag: str) -> str | None:
    """Content of the last ``<tag>...</tag>`` in ``text``, stripped; ``None`` if absent.

    Tag names match case-insensitively and may carry spaces (``< answer >``).
    Elements are read left to right, each from an opening tag to the next
    closing one (an opening tag inside is content). A final opening tag with
    no closing tag runs to the end of the text: servers that stop on
    ``"</answer>"`` strip the stop string itself.
    """
    if not isinstance(text, str):
        return None
    opening, closing = _tag_patterns(tag)
    # Searching for the tags, never matching the text between them (as a lazy
    # ``<tag>(.*?)</tag>`` does, a character at a time), keeps long text fast.
    content, position = None, 0
    while (start := opening.search(text, position)) is not None:
        end = closing.search(text, start.end())
        if end is None:
            return text[start.end():].strip()
        content, position = (start.end(), end.start()), end.end()
    return None if content is None else text[content[0]:content[1]].strip()


def extract_answer(text: str) -> str | None:
    """Content of the last ``<answer>...</answer>``; ``None`` when there is none."""
    return extract_tag(text, "answer")


_BOXED_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_DEPTH_STEP = {"{": 1, "}": -1}


def extract_boxed(text: str) -> str | None:
    r"""Content of the last ``\boxed{...}`` (or ``\fbox{...}``), braces balanced.

    Returns ``None`` when there is no box whose braces close (a last box
    left open gives way to the box before it).
    """
    if not isinstance(text, str):
        return None
    starts = [m.end() for m in _BOXED_OPEN.finditer(text)]
    # From the last box back. A box closes before the next box opens, or not
    # at all once the next box is left open (that box's brace would be closed
    # first), so each box reads only its own stretch: linear, not quadratic.
    end = len(text)
    for start in reversed(starts):
        close = _closing_brace(text, start, end)
        if close is not None:
            return text[start:close].strip()
        end = start - 1
    return None


def _closing_brace(text: str, start: int, end: int) -> int | None:
    """Where the brace just before ``start`` closes, if it closes before ``end``."""
    if text.find("}", start, end) < 0:
        return None
    # The depth after each character, up to the first 0, all in C (no Python
    # step per character).
    depths = accumulate(map(_DEPTH_STEP.get, text[start:end], repeat(0)), initial=1)
    try:
        return start + indexOf(depths, 0) - 1
    except ValueError:
        return None


def split_moves(text: str, separator: str = MOVE_SEPARATOR) -> list[str]:
    """Split several moves written in one turn; empty pieces are dropped."""
    return [piece.strip() for piece in text.split(separator) if piece.strip()]


_PUNCTUATION_EDGES = " \t\r\n.,;:!?\"'`()[]{}*_"


def normalize(text: str) -> str:
    """Lower-case, collapse whitespace, strip punctuation from both ends."""
    # str.split is several times faster than a regex over long text, and
    # splits on the same (Unicode) whitespace as ``\s``.
    return " ".join(text.split()).strip(_PUNCTUATION_EDGES).lower()


def match_choice(text: str, choices: Mapping[str, _T]) -> _T | None:
    """Look ``text`` up in ``choices`` (keys lower-case) after :func:`normalize`."""
    return choices.get(normalize(text))


_INTEGER = re.compile(r"[+-]?\d{1,18}")


def read_int(text: str) -> int | None:
    """``text`` as an integer if it is one (sign allowed, up to 18 digits), else None.

    Unlike ``int()`` it never raises: not on words, not on a 5,000-digit
    number (``int`` refuses strings over 4,300 digits).
    """
    stripped = text.strip()
    return int(stripped) if _INTEGER.fullmatch(stripped) else None
