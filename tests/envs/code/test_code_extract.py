"""Finding the code in a reply: the last fenced Python block or answer wins."""

from __future__ import annotations

import pytest

from agentgym.envs.code import extract_code

FENCE = "```"


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (f"{FENCE}python\nx = 1\n{FENCE}", "x = 1"),
        (f"{FENCE}Python3\nx = 1\n{FENCE}", "x = 1"),
        (f"{FENCE}py\nx = 1\n{FENCE}", "x = 1"),
        (f"{FENCE}\nx = 1\n{FENCE}", "x = 1"),
        (f"draft:\n{FENCE}python\nx = 1\n{FENCE}\nfinal:\n{FENCE}python\nx = 2\n{FENCE}", "x = 2"),
        (f"{FENCE}python\nx = 1\n{FENCE}\n{FENCE}bash\nls\n{FENCE}", "x = 1"),
        (f"{FENCE}text\nnot code\n{FENCE}", None),
        ("<answer>print(42)</answer>", "print(42)"),
        ("<ANSWER>\n    def f():\n        return 1\n</answer>", "def f():\n    return 1"),
        (f"<answer>{FENCE}python\ndef f(): pass\n{FENCE}</answer>", "def f(): pass"),
        (f"{FENCE}python\nx = 1\n{FENCE} then <answer>x = 2</answer>", "x = 2"),
        (f"<answer>x = 2</answer> and later {FENCE}python\nx = 3\n{FENCE}", "x = 3"),
        (f"cut off by the server:\n{FENCE}python\ndef f():\n    return 1", "def f():\n    return 1"),
        ("<answer>print(1)", "print(1)"),
        ("I am not sure what to do here.", None),
        ("def f(): return 1", None),  # raw code is not read: the format says fences or tags
        ("<answer>   </answer>", None),
        (f"{FENCE}python\n\n\n{FENCE}", None),
        ("", None),
    ],
)
def test_extract_code(text: str, code: str | None) -> None:
    assert extract_code(text) == code


def test_extract_code_takes_any_text_without_raising() -> None:
    for text in ["x" * 200_000, "\ud800", FENCE * 1000, "<answer>" * 500, None, 3]:
        extract_code(text)  # type: ignore[arg-type]
