from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym.parsing import (
    extract_answer,
    extract_boxed,
    extract_tag,
    match_choice,
    normalize,
    split_moves,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>Left</answer>", "Left"),
        ("<answer>a</answer> then <answer> b </answer>", "b"),
        ("<ANSWER>Up</Answer>", "Up"),
        ("< answer >Up</ answer >", "Up"),
        ("thinking... <answer>Up || Left", "Up || Left"),
        ("<answer>\n  multi\nline \n</answer>", "multi\nline"),
        ("no tags here", None),
        ("", None),
        ("<answer></answer>", ""),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


def test_extract_tag_other_names() -> None:
    assert extract_tag("<python>print(1)</python>", "python") == "print(1)"
    assert extract_tag("<search>x</search>", "python") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\boxed{42}", "42"),
        (r"first \boxed{1} then \boxed{2}", "2"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed { x^{2} }", "x^{2}"),
        (r"\fbox{7}", "7"),
        (r"\boxed{unclosed", None),
        (r"\boxed{3} and \boxed{broken", "3"),
        ("nothing", None),
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


def test_split_moves_strips_and_drops_empty_pieces() -> None:
    assert split_moves(" Up ||left|| ||Down ") == ["Up", "left", "Down"]
    assert split_moves("") == []
    assert split_moves("a;b", separator=";") == ["a", "b"]


def test_normalize_and_match_choice_are_case_and_space_tolerant() -> None:
    assert normalize("  Move   LEFT!! ") == "move left"
    choices = {"left": "L", "move left": "L"}
    assert match_choice("LEFT.", choices) == "L"
    assert match_choice("\tmove\n left ", choices) == "L"
    assert match_choice("right", choices) is None


@given(st.text())
def test_parsers_never_raise_on_any_text(text: str) -> None:
    for result in (extract_answer(text), extract_boxed(text)):
        assert result is None or isinstance(result, str)
    assert all(isinstance(move, str) for move in split_moves(text))
    assert isinstance(normalize(text), str)


def test_non_str_input_gives_none() -> None:
    assert extract_answer(None) is None  # type: ignore[arg-type]
    assert extract_boxed(b"\\boxed{1}") is None  # type: ignore[arg-type]
