from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentgym.errors import ConfigError, ToolInputError
from agentgym.tools import FunctionTool, Tool, check_arguments


class Upper(Tool):
    name = "upper"
    description = "Write a text in capitals."
    parameters = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "the text"},
            "times": {"type": "integer"},
            "style": {"type": "string", "enum": ["plain", "shout"]},
        },
        "required": ["text"],
    }
    tag_argument = "text"

    def run(self, *, text: str, times: int = 1, style: str = "plain") -> str:  # type: ignore[override]
        if not text.strip():
            raise ToolInputError("the text is blank; give some words.")
        return (text.upper() + ("!" if style == "shout" else "")) * times


def test_call_runs_the_tool_with_checked_arguments() -> None:
    assert Upper().call(text="hi") == "HI"
    assert Upper().call(text="hi", times=2, style="shout") == "HI!HI!"


@pytest.mark.parametrize(("arguments", "expected"), [
    ({}, "Error: upper needs the argument 'text' (string: the text)."),
    ({"txt": "hi"},
     "Error: upper got an unknown argument 'txt'; its arguments are: 'text', 'times', 'style'."),
    ({"text": 3}, "Error: upper: argument 'text' must be of type string, got int 3."),
    ({"text": "a", "times": 1.5},
     "Error: upper: argument 'times' must be of type integer, got float 1.5."),
    ({"text": "a", "times": False},
     "Error: upper: argument 'times' must be of type integer, got bool False."),
    ({"text": "a", "style": "loud"},
     "Error: upper: argument 'style' must be one of ['plain', 'shout'], got 'loud'."),
    ({"text": "  "}, "Error: the text is blank; give some words."),
])
def test_bad_arguments_are_error_text_never_an_exception(arguments: dict[str, Any], expected: str) -> None:
    assert Upper().call(**arguments) == expected
    assert asyncio.run(Upper().acall(**arguments)) == expected


def test_acall_runs_in_a_thread() -> None:
    assert asyncio.run(Upper().acall(text="ok")) == "OK"


def test_openai_schema() -> None:
    assert Upper().openai_schema() == {
        "type": "function",
        "function": {"name": "upper", "description": "Write a text in capitals.",
                     "parameters": Upper.parameters},
    }


def test_check_arguments_accepts_type_lists_and_extra_properties_when_allowed() -> None:
    schema = {"type": "object", "properties": {"n": {"type": ["integer", "null"]}},
              "additionalProperties": True}
    assert check_arguments(schema, {"n": None, "other": 1}) is None
    assert check_arguments(schema, {"n": 2.0}) is not None
    assert check_arguments(schema, ["n"]) == "the tool takes its arguments as a JSON object, got list."


def test_a_tool_that_fails_itself_raises() -> None:
    # Only agent input becomes text; the tool's own failure is the caller's to see.
    class Broken(Upper):
        def run(self, **arguments: Any) -> str:
            raise OSError("index file is gone")

    with pytest.raises(OSError, match="index file is gone"):
        Broken().call(text="x")


def test_validate_names_what_is_wrong_with_a_definition() -> None:
    class NoName(Upper):
        name = "two words"

    class BadTag(Upper):
        tag_argument = "txt"

    class NotObject(Upper):
        parameters = {"type": "string"}

    with pytest.raises(ConfigError, match="NoName.name must be letters"):
        NoName().validate()
    with pytest.raises(ConfigError, match=r"BadTag.tag_argument 'txt' is not one of .*'text'"):
        BadTag().validate()
    with pytest.raises(ConfigError, match='NotObject.parameters must be a JSON schema with "type": "object"'):
        NotObject().validate()


def test_function_tool_reads_the_signature_and_docstring() -> None:
    def add(a: int, b: int = 0, note: str = "") -> int:
        """Add two integers.

        More detail that the agent does not need.
        """
        return a + b

    tool = FunctionTool(add)
    assert (tool.name, tool.description, tool.tag_argument) == ("add", "Add two integers.", "a")
    assert tool.parameters == {"type": "object", "required": ["a"], "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}, "note": {"type": "string"}}}
    assert tool.call(a=2, b=3) == "5"
    assert tool.call(a="2").startswith("Error: add: argument 'a' must be of type integer")


def test_function_tool_refuses_what_it_cannot_describe() -> None:
    def anything(*values: int) -> int:
        return 0

    def untyped(x) -> int:  # type: ignore[no-untyped-def]
        return 0

    with pytest.raises(ConfigError, match=r"FunctionTool needs named parameters; anything has \*values"):
        FunctionTool(anything)
    with pytest.raises(ConfigError, match="cannot describe parameter 'x' of untyped"):
        FunctionTool(untyped)
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    assert FunctionTool(untyped, name="id", parameters=schema).call(x="a") == "0"
