"""Find the code in what a model wrote.

The code is the *last* thing in the reply that holds code:

- a fenced block labelled ``python``, ``py`` or ``python3`` (any case), or with
  no label at all; blocks labelled with another language (```` ```bash ````,
  ```` ```text ````) are skipped. A block left open at the end of the reply
  (a server stopped on the closing fence) runs to the end;
- or the content of an ``<answer>...</answer>`` tag (a fenced block inside it
  is, being later, the one taken).

So a model may think aloud with code blocks and still have its final block
graded. ``None`` (never an exception) when there is no code.

>>> extract_code("First try:\\n```python\\nx = 1\\n```\\nBetter:\\n```python\\nx = 2\\n```")
'x = 2'
>>> extract_code("<answer>print(42)</answer>")
'print(42)'
"""

from __future__ import annotations

import re
import textwrap

__all__ = ["PYTHON_LABELS", "extract_code"]

#: Fence labels read as Python (lower-cased); an empty label counts too.
PYTHON_LABELS = frozenset({"", "python", "py", "python3"})
_FENCE = re.compile(r"```[ \t]*([^\s`]*)[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)
_ANSWER = re.compile(r"<\s*answer\s*>(.*?)(?:<\s*/\s*answer\s*>|\Z)", re.IGNORECASE | re.DOTALL)


def extract_code(text: str) -> str | None:
    """The last fenced Python block or ``<answer>`` content of ``text``, dedented, without
    blank lines at its ends; ``None`` when there is none or it is blank."""
    if not isinstance(text, str):
        return None
    # (position, preference, code): a fence that opens an answer's content wins the tie.
    found: list[tuple[int, int, str]] = [
        (match.start(), 1, match.group(2))
        for match in _FENCE.finditer(text)
        if match.group(1).lower() in PYTHON_LABELS
    ]
    found += [(match.start(1), 0, match.group(1)) for match in _ANSWER.finditer(text)]
    if not found:
        return None
    code = max(found, key=lambda item: item[:2])[2]
    code = textwrap.dedent(code).strip("\r\n").rstrip()
    return code if code.strip() else None
