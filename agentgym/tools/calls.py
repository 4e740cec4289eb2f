"""Find tool calls in what a model wrote, in the two formats models use.

1. JSON in ``<tool_call>`` tags (Hermes, Qwen, and vLLM's tool parsers)::

       <tool_call>{"name": "python", "arguments": {"code": "print(1 + 1)"}}</tool_call>

   ``arguments`` may also be a JSON string holding the object (as OpenAI sends
   it) or be called ``parameters`` (Llama 3); one tag may hold a list of calls.
2. A tag named after the tool, whose content fills its ``tag_argument``::

       <python>print(1 + 1)</python>        <search>capital of Peru</search>

   Only the names of the given tools are read as tags, so ``<answer>`` stays
   the env's. A Markdown code fence inside the tag is unwrapped.

The text is untrusted: :func:`parse_tool_calls` never raises on any ``str``.
What cannot be used (bad JSON, an unknown tool, a missing argument) becomes a
:class:`CallProblem` whose message tells the agent how to fix the call. As in
:mod:`agentgym.parsing`, a tag left open runs to the end of the text (servers
that stop on ``</python>`` strip the stop string).

>>> from agentgym.tools import PythonTool
>>> parsed = parse_tool_calls("Let me check. <python>print(6 * 7)</python>", [PythonTool()])
>>> parsed.calls[0].name, parsed.calls[0].arguments
('python', {'code': 'print(6 * 7)'})
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym.tools.base import Tool

__all__ = ["TOOL_CALL_TAG", "CallProblem", "ParsedCalls", "ToolCall", "parse_tool_calls",
           "strip_code_fence"]

#: The tag that holds a JSON tool call.
TOOL_CALL_TAG = "tool_call"

_DECODER = json.JSONDecoder(strict=False)  # models write raw newlines inside JSON strings
_FENCE = re.compile(r"^[ \t]*```[^\n`]*\n(.*?)(?:^[ \t]*```|\Z)", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call that can be made: a known tool and arguments that fit its schema."""

    name: str
    arguments: dict[str, Any]
    #: "json" for a ``<tool_call>``, "tag" for ``<name>...</name>``
    style: Literal["json", "tag"]
    #: offset of the call's opening tag in the action (calls run in this order)
    start: int = 0


@dataclass(frozen=True, slots=True)
class CallProblem:
    """A tool call that cannot be made, and what the agent should do about it."""

    message: str
    #: the tool it was meant for, when that much could be read
    name: str | None = None
    start: int = 0


@dataclass(slots=True)
class ParsedCalls:
    """The calls found in an action and the problems with the ones that cannot be made."""

    calls: list[ToolCall] = field(default_factory=list)
    problems: list[CallProblem] = field(default_factory=list)

    def __bool__(self) -> bool:
        """True when the action tried to call a tool at all (well or badly)."""
        return bool(self.calls or self.problems)

    def in_order(self) -> list[ToolCall | CallProblem]:
        """Calls and problems in the order they appear in the action."""
        return sorted([*self.calls, *self.problems], key=lambda item: item.start)


def strip_code_fence(text: str) -> str:
    """The code inside Markdown fences (```python ... ```), or ``text`` when it has none.

    Several fenced blocks are joined; prose around them is dropped.
    """
    blocks = _FENCE.findall(text)
    if not blocks:
        return text
    return "\n".join(block.rstrip() for block in blocks).strip("\n")


def parse_tool_calls(text: str, tools: Iterable[Tool] | Mapping[str, Tool]) -> ParsedCalls:
    """Every tool call in ``text`` for ``tools``, in order, and the problems with bad ones."""
    by_name = _index(tools)
    parsed = ParsedCalls()
    if not isinstance(text, str) or not by_name:
        return parsed
    names = sorted({TOOL_CALL_TAG, *by_name}, key=len, reverse=True)  # longest first: no prefix wins
    opening = re.compile(rf"<\s*({'|'.join(map(re.escape, names))})\s*>", re.IGNORECASE)
    position = 0
    while (match := opening.search(text, position)) is not None:
        tag = match.group(1).lower()
        closing = re.compile(rf"<\s*/\s*{re.escape(tag)}\s*>", re.IGNORECASE).search(text, match.end())
        content = text[match.end(): closing.start() if closing else len(text)]
        position = closing.end() if closing else len(text)
        if tag == TOOL_CALL_TAG:
            _read_json_call(content, by_name, match.start(), parsed)
        else:
            _read_tag_call(content, by_name[tag], match.start(), parsed)
    return parsed


def _index(tools: Iterable[Tool] | Mapping[str, Tool]) -> dict[str, Tool]:
    """Tools by lower-cased name (tags and names match case-insensitively)."""
    values = tools.values() if isinstance(tools, Mapping) else tools
    return {tool.name.lower(): tool for tool in values}


def _read_tag_call(content: str, tool: Tool, start: int, parsed: ParsedCalls) -> None:
    value = textwrap.dedent(strip_code_fence(content)).strip()
    if not value:
        parsed.problems.append(CallProblem(
            f"<{tool.name}></{tool.name}> is empty: put the {tool.tag_argument} between the tags.",
            tool.name, start))
        return
    _add_call(tool, {tool.tag_argument: value}, "tag", start, parsed)


def _add_call(tool: Tool, arguments: Any, style: Literal["json", "tag"], start: int,
              parsed: ParsedCalls) -> None:
    problem = tool.check(arguments)
    if problem is None:
        parsed.calls.append(ToolCall(tool.name, arguments, style, start))
        return
    if style == "tag":
        example = json.dumps({"name": tool.name, "arguments": {}}).replace("{}", "{...}")
        problem += (f" A tag fills only {tool.tag_argument!r}; write the call as "
                    f"<{TOOL_CALL_TAG}>{example}</{TOOL_CALL_TAG}>.")
    parsed.problems.append(CallProblem(problem, tool.name, start))


def _decode(content: str) -> tuple[Any, str | None]:
    """The JSON value of ``content`` or why it is not JSON. Never raises."""
    try:
        value, end = _DECODER.raw_decode(content)
    except json.JSONDecodeError as exc:
        return None, f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    # Hostile JSON: nesting deeper than the recursion limit, or an integer
    # longer than Python will convert.
    except (ValueError, RecursionError) as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:80]}"
    if content[end:].strip():
        return None, f"extra text after the JSON value at column {end + 1}"
    return value, None


def _read_json_call(content: str, by_name: dict[str, Tool], start: int, parsed: ParsedCalls) -> None:
    body = strip_code_fence(content).strip()
    example = f'<{TOOL_CALL_TAG}>{{"name": "...", "arguments": {{...}}}}</{TOOL_CALL_TAG}>'
    if not body:
        parsed.problems.append(CallProblem(f"<{TOOL_CALL_TAG}> is empty; write {example}.", None, start))
        return
    value, error = _decode(body)
    if error is not None:
        parsed.problems.append(CallProblem(
            f"<{TOOL_CALL_TAG}> does not hold valid JSON ({error}); write {example}.", None, start))
        return
    for item in value if isinstance(value, list) else [value]:
        _read_json_item(item, by_name, start, parsed, example)
    if isinstance(value, list) and not value:
        parsed.problems.append(CallProblem(f"<{TOOL_CALL_TAG}> holds an empty list; write {example}.",
                                           None, start))


def _read_json_item(item: Any, by_name: dict[str, Tool], start: int, parsed: ParsedCalls,
                    example: str) -> None:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        parsed.problems.append(CallProblem(
            f"A tool call is a JSON object with a \"name\" string and an \"arguments\" object; "
            f"write {example}.", None, start))
        return
    tool = by_name.get(item["name"].strip().lower())
    if tool is None:
        known = ", ".join(sorted(tool.name for tool in by_name.values()))
        parsed.problems.append(CallProblem(
            f"There is no tool {_clip(item['name'])!r}; the tools are: {known}.", None, start))
        return
    arguments = item.get("arguments", item.get("parameters", {}))
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):  # OpenAI sends the arguments as a JSON string
        arguments, error = _decode(arguments.strip()) if arguments.strip() else ({}, None)
        if error is not None:
            parsed.problems.append(CallProblem(
                f"The arguments of {tool.name} are a string that is not a JSON object ({error}).",
                tool.name, start))
            return
    _add_call(tool, arguments, "json", start, parsed)


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
