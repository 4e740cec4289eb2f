from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym.tools import FunctionTool, PythonTool, Tool, parse_tool_calls
from agentgym.tools.calls import CallProblem, ToolCall, strip_code_fence


def search(query: str, k: int = 3) -> str:
    """Search the notes."""
    return f"{k} results for {query}"


TOOLS: list[Tool] = [PythonTool(), FunctionTool(search)]


def calls(text: str) -> list[tuple[str, dict, str]]:
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed.problems == []
    return [(call.name, call.arguments, call.style) for call in parsed.calls]


def problems(text: str) -> list[str]:
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed.calls == []
    return [problem.message for problem in parsed.problems]


# -- the tag format --------------------------------------------------------------


def test_a_tag_fills_the_tools_tag_argument() -> None:
    assert calls("Let me compute. <python>print(6 * 7)</python>") == [
        ("python", {"code": "print(6 * 7)"}, "tag")]
    assert calls("<search> capital of Peru </search>") == [("search", {"query": "capital of Peru"}, "tag")]


def test_tags_match_case_and_spaces_and_run_to_the_end_when_left_open() -> None:
    assert calls("< Python >print(1)</ PYTHON >") == [("python", {"code": "print(1)"}, "tag")]
    # A server that stops on "</python>" strips the stop string.
    assert calls("<python>\nx = 2\nprint(x)") == [("python", {"code": "x = 2\nprint(x)"}, "tag")]


def test_a_fenced_block_inside_a_python_tag_is_unwrapped() -> None:
    text = "<python>\nHere is the code:\n```python\nfor i in range(2):\n    print(i)\n```\n</python>"
    assert calls(text) == [("python", {"code": "for i in range(2):\n    print(i)"}, "tag")]


def test_indented_code_is_dedented() -> None:
    text = "<python>\n    if True:\n        print(1)\n</python>"
    assert calls(text) == [("python", {"code": "if True:\n    print(1)"}, "tag")]


def test_other_tags_are_not_tool_calls() -> None:
    assert not parse_tool_calls("<answer>42</answer> <think>hmm</think> <pythonic>x</pythonic>", TOOLS)
    assert not parse_tool_calls("I could use python or search, but no.", TOOLS)


def test_tags_inside_a_call_belong_to_that_call() -> None:
    text = '<python>print("<search>x</search>")</python>'
    assert calls(text) == [("python", {"code": 'print("<search>x</search>")'}, "tag")]


def test_an_empty_tag_is_a_problem() -> None:
    (message,) = problems("<python>  \n </python>")
    assert "empty" in message and "code" in message


def test_a_tag_cannot_fill_a_second_required_argument() -> None:
    def lookup(table: str, key: str) -> str:
        return ""

    parsed = parse_tool_calls("<lookup>users</lookup>", [FunctionTool(lookup)])
    (problem,) = parsed.problems
    assert problem.name == "lookup"
    assert "needs the argument 'key'" in problem.message and "<tool_call>" in problem.message


# -- the JSON format ---------------------------------------------------------------


def test_a_json_call_with_an_arguments_object() -> None:
    text = 'Searching.\n<tool_call>\n{"name": "search", "arguments": {"query": "Lima", "k": 5}}\n</tool_call>'
    assert calls(text) == [("search", {"query": "Lima", "k": 5}, "json")]


def test_arguments_may_be_a_json_string_or_called_parameters() -> None:
    as_string = json.dumps({"name": "python", "arguments": json.dumps({"code": "print(1)"})})
    assert calls(f"<tool_call>{as_string}</tool_call>") == [("python", {"code": "print(1)"}, "json")]
    llama = '<tool_call>{"name": "search", "parameters": {"query": "x"}}</tool_call>'
    assert calls(llama) == [("search", {"query": "x"}, "json")]


def test_raw_newlines_in_json_strings_and_fences_are_tolerated() -> None:
    text = '<tool_call>```json\n{"name": "python", "arguments": {"code": "x = 1\nprint(x)"}}\n```</tool_call>'
    assert calls(text) == [("python", {"code": "x = 1\nprint(x)"}, "json")]


def test_one_tag_may_hold_a_list_of_calls() -> None:
    text = json.dumps([{"name": "search", "arguments": {"query": q}} for q in "ab"])
    text = f"<tool_call>{text}</tool_call>"
    assert [arguments["query"] for _, arguments, _ in calls(text)] == ["a", "b"]


def test_calls_of_both_formats_come_in_the_order_written() -> None:
    text = ('<search>first</search> then <tool_call>{"name": "python", "arguments": {"code": "2"}}'
            '</tool_call> and <python>3</python>')
    parsed = parse_tool_calls(text, TOOLS)
    assert [(c.name, c.style) for c in parsed.in_order()] == [  # type: ignore[union-attr]
        ("search", "tag"), ("python", "json"), ("python", "tag")]


@pytest.mark.parametrize(("text", "expected"), [
    ("<tool_call>{not json}</tool_call>", "does not hold valid JSON (Expecting property name"),
    ("<tool_call></tool_call>", "<tool_call> is empty"),
    ("<tool_call>[]</tool_call>", "holds an empty list"),
    ('<tool_call>{"name": "python"} and more</tool_call>', "extra text after the JSON value"),
    ('<tool_call>["python"]</tool_call>', 'JSON object with a "name" string'),
    ('<tool_call>{"arguments": {}}</tool_call>', 'JSON object with a "name" string'),
    ('<tool_call>{"name": "browser", "arguments": {}}</tool_call>',
     "There is no tool 'browser'; the tools are: python, search."),
    ('<tool_call>{"name": "python", "arguments": {}}</tool_call>',
     "python needs the argument 'code' (string: the Python 3 program to run)."),
    ('<tool_call>{"name": "python", "arguments": {"code": 1}}</tool_call>',
     "argument 'code' must be of type string, got int 1"),
    ('<tool_call>{"name": "python", "arguments": {"code": "1", "lang": "c"}}</tool_call>',
     "python got an unknown argument 'lang'; its arguments are: 'code'."),
    ('<tool_call>{"name": "search", "arguments": {"query": "x", "k": true}}</tool_call>',
     "argument 'k' must be of type integer, got bool True"),
    ('<tool_call>{"name": "python", "arguments": "{code: 1}"}</tool_call>',
     "The arguments of python are a string that is not a JSON object"),
    ('<tool_call>{"name": "python", "arguments": [1]}</tool_call>',
     "python takes its arguments as a JSON object, got list."),
    ("<tool_call>" + "[" * 100_000 + "</tool_call>", "does not hold valid JSON"),
    ('<tool_call>{"name": "python", "arguments": {"code": ' + "9" * 5000 + "}}</tool_call>",
     "does not hold valid JSON"),
])
def test_malformed_json_calls_are_problems_that_say_what_to_do(text: str, expected: str) -> None:
    (message,) = problems(text)
    assert expected in message


def test_good_and_bad_calls_in_one_action_are_both_reported() -> None:
    parsed = parse_tool_calls('<python>print(1)</python><tool_call>{"name": "x"}</tool_call>', TOOLS)
    assert [call.name for call in parsed.calls] == ["python"]
    assert len(parsed.problems) == 1 and parsed.problems[0].start > parsed.calls[0].start


def test_strip_code_fence() -> None:
    assert strip_code_fence("print(1)") == "print(1)"
    assert strip_code_fence("```\nprint(1)\n```") == "print(1)"
    assert strip_code_fence("a\n```py\nx = 1\n```\nand\n```python\nprint(x)\n```") == "x = 1\nprint(x)"
    assert strip_code_fence("```python\nprint(2)") == "print(2)"  # left open


# -- untrusted text never raises -----------------------------------------------------

_PIECES = st.sampled_from([
    "<python>", "</python>", "<tool_call>", "</tool_call>", "<search>", "</search>", "<answer>",
    "{", "}", "[", "]", '"name"', '"arguments"', ":", ",", '"python"', '"search"', '"code"',
    '"query"', "```", "```python\n", "\n", " ", "null", "1e999", "\\", '"', "\x00", "\ud800", "9" * 50,
])
_HOSTILE = st.one_of(
    st.text(max_size=200),
    st.lists(st.one_of(_PIECES, st.text(max_size=5)), max_size=40).map("".join),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                     st.sampled_from(["name", "arguments", "parameters", "code", "query", "k"]),
                     inner, max_size=3),
                 max_leaves=10).map(lambda value: f"<tool_call>{json.dumps(value)}</tool_call>"),
)


@given(text=_HOSTILE)
def test_any_text_parses_without_raising(text: str) -> None:
    parsed = parse_tool_calls(text, TOOLS)
    for item in parsed.in_order():
        assert isinstance(item, (ToolCall, CallProblem))
        assert 0 <= item.start < len(text)
    for call in parsed.calls:
        # What the parser lets through, the tool accepts.
        assert call.name in ("python", "search")
        assert next(t for t in TOOLS if t.name == call.name).check(call.arguments) is None
    for problem in parsed.problems:
        assert problem.message.strip()


def test_huge_and_odd_text_is_quick_to_reject() -> None:
    assert not parse_tool_calls("x" * 1_000_000, TOOLS)
    assert not parse_tool_calls("<" * 100_000 + " " * 100_000, TOOLS)
    assert not parse_tool_calls("", TOOLS)
    assert not parse_tool_calls("<python>1</python>", [])
