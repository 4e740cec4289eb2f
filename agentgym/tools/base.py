"""A tool: a name, a JSON schema of its arguments, and a call that returns text.

Subclass :class:`Tool`, set the four attributes and implement :meth:`Tool.run`;
:meth:`Tool.call` checks the arguments against the schema first, so ``run``
only ever sees arguments of the right names and types::

    class Upper(Tool):
        name = "upper"
        description = "Write a text in capitals."
        parameters = {"type": "object",
                      "properties": {"text": {"type": "string", "description": "the text"}},
                      "required": ["text"]}
        tag_argument = "text"                  # <upper>...</upper> fills "text"

        def run(self, *, text: str) -> str:
            return text.upper()

    Upper().call(text="hi")     # 'HI'
    Upper().call(txt="hi")      # 'Error: upper got an unknown argument ...' (never raises)

Agent input is never an exception: bad arguments, or a :class:`ToolInputError`
raised by ``run``, come back as an ``"Error: ..."`` text. A tool's own failure
(its sandbox or index is gone) does raise: that is not the agent's fault.
:class:`FunctionTool` turns a plain function into a tool.
"""

from __future__ import annotations

import abc
import asyncio
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

from agentgym.errors import ConfigError, ToolInputError

__all__ = ["FunctionTool", "Tool", "check_arguments"]

# Tool names become tags (<python>) and JSON names: keep them simple.
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}


def _type_ok(value: Any, expected: str | list[str]) -> bool:
    names = [expected] if isinstance(expected, str) else list(expected)
    for name in names:
        if name in ("integer", "number") and isinstance(value, bool):
            continue  # JSON true is not a number, though Python's bool is an int
        if isinstance(value, _JSON_TYPES.get(name, object)):
            return True
    return False


def check_arguments(schema: Mapping[str, Any], arguments: Any, *, tool: str = "the tool") -> str | None:
    """Why ``arguments`` do not fit the object ``schema``, in one sentence; ``None`` when they do.

    Checks what a tool call gets wrong in practice: not an object, a missing
    required argument, an unknown argument (unless ``additionalProperties`` is
    true), a wrong JSON type, a value outside ``enum``. Nested schemas are not
    descended into.
    """
    if not isinstance(arguments, dict):
        return f"{tool} takes its arguments as a JSON object, got {type(arguments).__name__}."
    properties: Mapping[str, Any] = schema.get("properties", {})
    unknown = [key for key in arguments if key not in properties]
    if unknown and schema.get("additionalProperties") is not True:
        known = ", ".join(repr(key) for key in properties) or "none"
        return f"{tool} got an unknown argument {_short(unknown[0])}; its arguments are: {known}."
    for key in schema.get("required", []):
        if key not in arguments:
            return f"{tool} needs the argument {key!r} ({_describe_property(properties.get(key, {}))})."
    for key, value in arguments.items():
        spec = properties.get(key, {})
        if "type" in spec and not _type_ok(value, spec["type"]):
            return (f"{tool}: argument {key!r} must be of type {spec['type']}, "
                    f"got {type(value).__name__} {_short(value)}.")
        if "enum" in spec and value not in spec["enum"]:
            return f"{tool}: argument {key!r} must be one of {spec['enum']}, got {_short(value)}."
    return None


def _describe_property(spec: Mapping[str, Any]) -> str:
    kind = spec.get("type", "any type")
    return f"{kind}: {spec['description']}" if spec.get("description") else str(kind)


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Tool(abc.ABC):
    """Something an agent can call by name with JSON arguments, getting text back.

    Attributes (class or instance attributes):
        name: what the agent calls it, also its tag (``<name>...</name>``).
        description: one or two sentences for the agent: what it does and returns.
        parameters: JSON schema (``"type": "object"``) of its keyword arguments.
        tag_argument: the argument that the content of a tag call fills.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    tag_argument: str

    @abc.abstractmethod
    def run(self, **arguments: Any) -> str:
        """Do the work with checked arguments; return text for the agent.

        Raise :class:`ToolInputError` for input the schema cannot catch (an
        empty query); anything else that goes wrong is the tool's own failure.
        """

    async def arun(self, **arguments: Any) -> str:
        """``run`` without blocking the event loop (a thread unless a tool does better)."""
        return await asyncio.to_thread(self.run, **arguments)

    def check(self, arguments: Any) -> str | None:
        """Why ``arguments`` cannot be passed to this tool; ``None`` when they can."""
        return check_arguments(self.parameters, arguments, tool=self.name)

    def call(self, **arguments: Any) -> str:
        """Check the arguments and run; bad input gives ``"Error: ..."``, never an exception."""
        problem = self.check(arguments)
        if problem is not None:
            return f"Error: {problem}"
        try:
            return self.run(**arguments)
        except ToolInputError as exc:
            return f"Error: {exc}"

    async def acall(self, **arguments: Any) -> str:
        """The asynchronous twin of :meth:`call`."""
        problem = self.check(arguments)
        if problem is not None:
            return f"Error: {problem}"
        try:
            return await self.arun(**arguments)
        except ToolInputError as exc:
            return f"Error: {exc}"

    def openai_schema(self) -> dict[str, Any]:
        """The tool as an OpenAI function tool (``tools=[...]`` of a chat request)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description,
                         "parameters": self.parameters},
        }

    def validate(self) -> None:
        """Raise :class:`ConfigError` when the tool's own definition is unusable."""
        cls = type(self).__name__
        for attribute in ("name", "description", "parameters", "tag_argument"):
            if not hasattr(self, attribute):
                raise ConfigError(f"{cls} must set `{attribute}` (see agentgym.tools.Tool).")
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(f"{cls}.name must be letters, digits, '_' or '-' starting with a "
                              f"letter (it becomes a tag), got {self.name!r}.")
        if not isinstance(self.parameters, dict) or self.parameters.get("type") != "object":
            raise ConfigError(f"{cls}.parameters must be a JSON schema with \"type\": \"object\", "
                              f"got {self.parameters!r}.")
        if self.tag_argument not in self.parameters.get("properties", {}):
            raise ConfigError(f"{cls}.tag_argument {self.tag_argument!r} is not one of its "
                              f"parameters' properties {list(self.parameters.get('properties', {}))}.")

    def close(self) -> None:
        """Release what the tool holds (a sandbox, a browser). Safe to call twice."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={getattr(self, 'name', '?')!r})"


_PY_TO_JSON: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                               list: "array", dict: "object"}


class FunctionTool(Tool):
    """A plain function as a tool.

    The name is the function's, the description its docstring's first
    paragraph, and the schema is read from its signature (``str``, ``int``,
    ``float``, ``bool``, ``list``, ``dict`` parameters; a default makes one
    optional). Give ``parameters`` to describe anything richer. The result is
    turned into text with ``str``.

    >>> def add(a: int, b: int) -> int:
    ...     '''Add two integers.'''
    ...     return a + b
    >>> FunctionTool(add).call(a=2, b=3)
    '5'
    """

    def __init__(self, function: Callable[..., Any], *, name: str | None = None,
                 description: str | None = None, parameters: dict[str, Any] | None = None,
                 tag_argument: str | None = None) -> None:
        self.function = function
        self.name = name or function.__name__
        doc = inspect.getdoc(function) or ""
        self.description = description or doc.split("\n\n")[0].strip() or f"The function {self.name}."
        self.parameters = parameters if parameters is not None else _schema_of(function)
        properties = list(self.parameters.get("properties", {}))
        self.tag_argument = tag_argument or (properties[0] if properties else "")
        self.validate()

    def run(self, **arguments: Any) -> str:
        result = self.function(**arguments)
        return result if isinstance(result, str) else str(result)


def _schema_of(function: Callable[..., Any]) -> dict[str, Any]:
    """The JSON schema of a function's keyword arguments, from its annotations."""
    hints = typing.get_type_hints(function)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            raise ConfigError(f"FunctionTool needs named parameters; {function.__name__} has "
                              f"{parameter}. Give `parameters=` or wrap it in a function.")
        kind = _PY_TO_JSON.get(typing.get_origin(hints.get(parameter.name)) or hints.get(parameter.name))
        if kind is None:
            raise ConfigError(f"FunctionTool cannot describe parameter {parameter.name!r} of "
                              f"{function.__name__} (annotation {hints.get(parameter.name)!r}); "
                              "annotate it with str, int, float, bool, list or dict, or give `parameters=`.")
        properties[parameter.name] = {"type": kind}
        if parameter.default is parameter.empty:
            required.append(parameter.name)
    return {"type": "object", "properties": properties, "required": required}
