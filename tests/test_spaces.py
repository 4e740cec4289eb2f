from __future__ import annotations

import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from agentgym.spaces import TextSpace


@pytest.mark.parametrize("text", ["", "hello world", "Up, then left!\n", "中文 Ωλ 😀", "\x00\t"])
def test_any_str_within_length_is_contained(text: str) -> None:
    assert text in TextSpace(max_length=20)


def test_length_bounds_and_type_are_checked() -> None:
    space = TextSpace(max_length=5, min_length=2)
    assert "abcde" in space
    assert "abcdef" not in space
    assert "a" not in space
    assert b"abc" not in space
    assert 123 not in space


def test_gymnasium_text_would_reject_what_textspace_accepts() -> None:
    assert "hello world" not in spaces.Text(100)
    assert "hello world" in TextSpace(100)


def test_sample_is_seeded_short_and_contained() -> None:
    first, second = TextSpace(seed=3), TextSpace(seed=3)
    samples = [first.sample() for _ in range(20)]
    assert samples == [second.sample() for _ in range(20)]
    assert all(sample in first and len(sample) <= 64 for sample in samples)


def test_batches_as_a_tuple_of_text_spaces() -> None:
    batched = batch_space(TextSpace(10), 3)
    assert isinstance(batched, spaces.Tuple)
    assert ("a b", "", "c\n") in batched


def test_equality_depends_on_bounds() -> None:
    assert TextSpace(10) == TextSpace(10)
    assert TextSpace(10) != TextSpace(11)
    assert TextSpace(10) != spaces.Text(10)
