"""Incremental text: stop strings cut the text, streamed deltas add up to it."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from agentgym.serve.text import TextTracker


def _chars(ids: Sequence[int]) -> str:
    return "".join(map(chr, ids))


def _stream(text: str, stop: tuple[str, ...], cuts: list[int]) -> tuple[str, str, str | None]:
    """Feed ``text`` one chunk at a time; the concatenated deltas, the final text, the stop hit."""
    tracker = TextTracker(_chars, stop)
    ids = [ord(char) for char in text]
    streamed, hit = "", None
    for end in sorted(set(cuts)) + [len(ids)]:
        delta, hit = tracker.feed(ids[:end])
        streamed += delta
        if hit is not None:
            break
    return streamed + tracker.flush(), tracker.text, hit


def test_the_text_stops_before_the_first_stop_string() -> None:
    streamed, text, hit = _stream("I push <answer>Up</answer> then more", ("</answer>", "then"), [3, 20, 25])
    assert (streamed, text, hit) == ("I push <answer>Up", "I push <answer>Up", "</answer>")


def test_a_possible_stop_string_is_held_back_until_it_is_decided() -> None:
    tracker = TextTracker(_chars, ("END",))
    assert tracker.feed([ord(c) for c in "abcEN"]) == ("abc", None)  # "EN" may start "END"
    assert tracker.feed([ord(c) for c in "abcENx"]) == ("ENx", None)


def test_a_partial_utf8_character_is_held_back() -> None:
    def decode(ids: Sequence[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    tracker = TextTracker(decode)
    snowman = "☃".encode()
    assert tracker.feed(list(b"a" + snowman[:2])) == ("a", None)
    assert tracker.feed(list(b"a" + snowman)) == ("☃", None)


@given(text=st.text(alphabet="ab</>xy", max_size=40), stop=st.sampled_from(["</a>", "xy", "b"]),
       cuts=st.lists(st.integers(0, 40), max_size=10))
def test_streamed_deltas_always_add_up_to_the_final_text(text: str, stop: str, cuts: list[int]) -> None:
    streamed, final, hit = _stream(text, (stop,), cuts)
    assert streamed == final
    assert final == (text[:text.index(stop)] if stop in text else text)
    assert hit == (stop if stop in text else None)


class _CountingDict(dict[str, int]):
    lookups = 0

    def __contains__(self, key: object) -> bool:
        type(self).lookups += 1
        return super().__contains__(key)


def _lookups(stop_count: int) -> tuple[int, str, str | None]:
    """Set lookups the stop scan made over 64 fed characters, with the text and the hit."""
    stops = [f"{index:05d}" + "z" * 95 for index in range(stop_count)]
    tracker = TextTracker(_chars, stops + ["END"])
    _CountingDict.lookups = 0
    tracker._stop = _CountingDict(tracker._stop)  # count the scan's work
    text = "abcdefgh" * 8 + "END"
    ids = [ord(char) for char in text]
    hit = None
    for end in range(1, len(ids) + 1):
        _, hit = tracker.feed(ids[:end])
    return _CountingDict.lookups, tracker.text, hit


def test_the_stop_scan_costs_the_same_for_many_stop_strings() -> None:
    few, many = _lookups(10), _lookups(10_000)
    assert few[1:] == many[1:] == ("abcdefgh" * 8, "END")
    assert few[0] == many[0]  # one lookup per new character and distinct stop length
    assert many[0] <= 2 * len("abcdefgh" * 8 + "END")


@given(text=st.text(alphabet="abxy", max_size=30),
       stops=st.lists(st.text(alphabet="abxy", min_size=1, max_size=4), min_size=1, max_size=5),
       cuts=st.lists(st.integers(0, 30), max_size=10))
def test_with_many_stop_strings_the_text_ends_before_one(text: str, stops: list[str], cuts: list[int]) -> None:
    streamed, final, hit = _stream(text, tuple(stops), cuts)
    assert streamed == final
    assert text.startswith(final)
    if hit is None:
        assert final == text and not any(stop in text for stop in stops)
    else:
        assert hit in stops and text[len(final):].startswith(hit)
        assert not any(stop in final for stop in stops)  # no earlier stop was missed
