"""Turning sampled ids into text as they come: stop strings and streamed deltas.

A choice's text is ``decode(ids)`` cut before the first stop string (the stop
string itself is not part of the text, as with vLLM and OpenAI). The token
that completed a stop string stays in ``token_ids``: the ids are what was
sampled, the text is what the client should show.

While streaming, a delta never ends in half a UTF-8 character (a byte-level
token can carry part of one) or in what may be the start of a stop string,
so the concatenated deltas always equal the final text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["TextTracker"]

_REPLACEMENT = "\ufffd"  # what a decoder gives for an incomplete UTF-8 sequence


class TextTracker:
    """Decodes one choice incrementally; finds stop strings; hands out safe deltas.

    Each ``feed`` looks only at the text's tail that the new ids can have
    completed (the longest stop string's length back from the new characters),
    with one set lookup per distinct stop length: its cost does not grow with
    the number of stop strings, so a request with many cannot slow its batch.

    >>> tracker = TextTracker(lambda ids: "".join(map(chr, ids)), stop=("!",))
    >>> tracker.feed([104, 105]), tracker.feed([104, 105, 33, 33])
    (('hi', None), ('', '!'))
    >>> tracker.text
    'hi'
    """

    def __init__(self, decode: Callable[[Sequence[int]], str], stop: Sequence[str] = ()) -> None:
        self._decode = decode
        self._stop = {text: order for order, text in reversed(list(enumerate(stop))) if text}
        self._lengths = sorted({len(text) for text in self._stop}, reverse=True)
        self._longest_stop = max(self._lengths, default=0)
        # Hashes of the stop strings' proper prefixes: whether a tail may start one. A collision
        # only holds text back a little longer; stops themselves are matched exactly.
        self._prefixes = frozenset(hash(text[:size]) for text in self._stop for size in range(1, len(text)))
        self._full = ""
        self._searched = 0  # every stop string ending at or before this offset of _full was looked for
        self._emitted = 0
        self.stopped_by: str | None = None

    @property
    def text(self) -> str:
        """The choice's text so far (cut before the stop string once one was found)."""
        return self._full

    def feed(self, ids: Sequence[int]) -> tuple[str, str | None]:
        """Decode all of ``ids`` (the choice's ids so far): the new safe delta and the stop hit."""
        if self.stopped_by is not None:
            return "", self.stopped_by
        self._full = self._decode(ids)
        hit = self._find_stop()
        if hit is not None:
            cut, self.stopped_by = hit
            self._full = self._full[:cut]
            return self._take(len(self._full)), self.stopped_by
        return self._take(self._safe_end()), None

    def flush(self) -> str:
        """Everything not yet handed out (at the end of the choice)."""
        return self._take(len(self._full))

    def _take(self, end: int) -> str:
        end = max(end, self._emitted)
        delta = self._full[self._emitted:end]
        self._emitted = end
        return delta

    def _find_stop(self) -> tuple[int, str] | None:
        """The stop string that starts first (first given on a tie) among those ending in new text."""
        if not self._stop:
            return None
        full = self._full
        best: tuple[int, int, str] | None = None
        for end in range(self._searched + 1, len(full) + 1):
            for size in self._lengths:  # longest first: the earliest start at this end
                if size <= end and (text := full[end - size:end]) in self._stop:
                    found = (end - size, self._stop[text], text)
                    best = found if best is None or found < best else best
                    break
        self._searched = len(full.rstrip(_REPLACEMENT))
        return None if best is None else (best[0], best[2])

    def _safe_end(self) -> int:
        """Where the next delta may end: before a partial character or partial stop string."""
        end = len(self._full.rstrip(_REPLACEMENT))
        for keep in range(min(self._longest_stop - 1, end), 0, -1):
            if hash(self._full[end - keep:end]) in self._prefixes:
                return end - keep
        return end
