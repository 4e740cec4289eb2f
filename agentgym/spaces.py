"""A text space that holds any ``str`` up to a length.

Gymnasium's :class:`~gymnasium.spaces.Text` only holds its ``charset`` (62
alphanumerics by default), so a space, a newline or punctuation is "not in the
space" and the env checker rejects ordinary prose. :class:`TextSpace` keeps
``Text`` as its base, so Gymnasium's vector utilities batch it like ``Text``
(a ``Tuple`` of strings), but its ``contains`` only checks the type and length.
Sampling draws from printable ASCII plus whitespace and a few non-Latin
characters, which is what fuzzing an env's parser wants.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["TextSpace", "SAMPLE_CHARSET"]

#: Characters :meth:`TextSpace.sample` draws from: printable ASCII (with space
#: and newline), some accented Latin, Greek, CJK and an emoji.
SAMPLE_CHARSET: str = string.printable + "éüßñΩλжя中文字😀"


class TextSpace(spaces.Text):
    """Any ``str`` whose length is between ``min_length`` and ``max_length``.

    >>> space = TextSpace(max_length=100)
    >>> "Up, then <answer>Left</answer>!\\n" in space
    True
    >>> "x" * 101 in space
    False
    """

    def __init__(
        self,
        max_length: int = 65_536,
        *,
        min_length: int = 0,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(
            max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed
        )

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is None and probability is None:
            # Short strings: Text would pick a length up to max_length (65k chars).
            length = int(self.np_random.integers(self.min_length, min(self.max_length, 64) + 1))
            return super().sample(mask=(length, None))
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"TextSpace(min_length={self.min_length}, max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TextSpace)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )
