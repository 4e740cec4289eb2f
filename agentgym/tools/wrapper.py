"""Give any text env tools: a Gymnasium wrapper that runs the tool calls in an action.

    env = ToolWrapper(agentgym.make("Math-LLM-v0"), [PythonTool()], max_calls=4)
    observation, info = env.reset(seed=0)
    env.step("<python>print(17 * 23)</python>")        # -> '<tool_response name="python">\\n391\\n...'
    env.step("<answer>391</answer>")                    # -> the env reads the answer

The rules, which the instructions also tell the agent:

- An action holding a tool call (in either format of :mod:`agentgym.tools.calls`)
  is a *tool turn*: the calls run in order, their outputs are the next
  observation, the reward is 0, and the episode goes on. The env never sees
  that action, so an answer written next to a tool call is not read.
- An action with no tool call goes to the env unchanged.
- A call that cannot be made (bad JSON, unknown tool, wrong arguments) is
  feedback: ``info["action_valid"] = False`` and the env's format penalty.
- Each call or attempted call uses one of ``max_calls`` per episode. Calls past
  the cap are refused with feedback. Once every call is spent, an action with
  tool calls goes to the env like any other (usually an unreadable answer)
  with a note saying its calls were not run.
- Tool turns do not count towards the env's ``max_turns``; only env turns do.
  An episode therefore lasts at most ``max_calls + max_turns`` steps, and the
  rollout manager's ``max_turns`` (the env's) bounds it through that sum.

Like :class:`~agentgym.core.TextEnv`, the wrapper reads at most the env's
``max_action_chars`` of an action (the rest is cut, with a note at the start of
the observation and ``info["action_cut"]``), and it hands on and returns only
valid UTF-8 (a lone surrogate becomes U+FFFD), so a tool never sees text that
cannot be encoded.

``info`` gains ``tool_calls`` (calls used in the episode) on every step, and on
tool turns ``tool_turn=True`` and ``tool_results`` (one dict per call: name,
status "ok" / "invalid" / "refused", arguments, output). A tool's own failure
(its sandbox is gone) raises: it is not the agent's doing.

The wrapper adds the tool descriptions to the env's instructions; read them
with ``env.get_wrapper_attr("instructions")`` (the rollout manager does), as
``env.unwrapped.instructions`` is the bare env's. It closes its tools on close.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym

from agentgym.core import (
    MAX_ACTION_CHARS,
    MAX_OBSERVATION_CHARS,
    check_number,
    cut_action,
    utf8_safe,
)
from agentgym.errors import ConfigError, EnvUsageError, ResetNeeded
from agentgym.tools.base import Tool
from agentgym.tools.calls import TOOL_CALL_TAG, CallProblem, ParsedCalls, parse_tool_calls

__all__ = ["ToolWrapper", "describe_tools"]


def describe_tools(tools: Sequence[Tool], max_calls: int) -> str:
    """The part of the instructions that explains the tools and both ways to call them."""
    first = tools[0]
    tag_example = f"<{first.name}>{first.tag_argument}</{first.name}>"
    json_example = json.dumps({"name": first.name, "arguments": {first.tag_argument: "..."}})
    lines = [
        "# Tools",
        ("You can call tools before you answer. A message with a tool call is a tool turn: "
         "the calls run in order, their outputs come back as the next message, and nothing "
         "else in that message is read (write your answer in a later message). "
         f"You have at most {max_calls} tool calls in an episode; tool turns do not count "
         "towards the turn limit."),
        "",
        "Call a tool in either of two ways:",
        f"- a tag named after the tool, holding its main argument: {tag_example}",
        (f"- JSON inside <{TOOL_CALL_TAG}></{TOOL_CALL_TAG}>, with all its arguments: "
         f"<{TOOL_CALL_TAG}>{json_example}</{TOOL_CALL_TAG}>"),
        (f'Each output comes back as <tool_response name="{first.name}">...</tool_response>; '
         "a call that cannot be made comes back as <tool_error>...</tool_error>."),
        "",
        "The tools:",
    ]
    lines += [f"- {tool.name} (tag: <{tool.name}>{tool.tag_argument}</{tool.name}>): "
              f"{tool.description}" for tool in tools]
    lines.append("Their JSON schemas:\n<tools>")
    lines += [json.dumps(tool.openai_schema(), ensure_ascii=False) for tool in tools]
    lines.append("</tools>")
    return "\n".join(lines)


def _check_tools(tools: Sequence[Tool]) -> dict[str, Tool]:
    if isinstance(tools, Tool) or not tools:
        raise ConfigError("ToolWrapper needs a list of at least one Tool, "
                          f"got {tools!r}; e.g. ToolWrapper(env, [PythonTool()]).")
    by_name: dict[str, Tool] = {}
    for tool in tools:
        if not isinstance(tool, Tool):
            raise ConfigError(f"ToolWrapper takes Tool instances, got {type(tool).__name__}; "
                              "wrap a function with FunctionTool(function).")
        tool.validate()
        key = tool.name.lower()
        if key in by_name or key == TOOL_CALL_TAG:
            raise ConfigError(f"Two tools are named {tool.name!r} (names are case-insensitive, "
                              f"and {TOOL_CALL_TAG!r} is taken); give each tool its own name.")
        by_name[key] = tool
    return by_name


def _clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, keeping its start and its end (where errors are)."""
    if len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} characters cut ...]\n"
    keep = max(limit - len(marker), 0)
    return text[: keep - keep // 2] + marker + text[len(text) - keep // 2:]


def _utf8_safe_json(value: Any) -> Any:
    """``value`` (parsed JSON) with every string made valid UTF-8.

    JSON arguments can spell a lone surrogate in plain ASCII (``"\\ud800"``),
    so cleaning the action's text is not enough.
    """
    if isinstance(value, str):
        return utf8_safe(value)
    if isinstance(value, dict):
        return {_utf8_safe_json(key): _utf8_safe_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_utf8_safe_json(item) for item in value]
    return value


class ToolWrapper(gym.Wrapper[str, str, str, str]):
    """Runs the tool calls in an action and returns their output; see the module docstring.

    Args:
        env: a text env (its ``instructions`` are extended with the tools).
        tools: the tools, with different names; the wrapper owns and closes them.
        max_calls: tool calls (made or attempted) allowed per episode.
        max_output_chars: longest output kept of one call; the middle of a
            longer one is cut (the start and the end, with any error, stay).
        format_penalty: reward of a turn with a call that cannot be made, as
            a penalty; None: the env's own ``format_penalty`` (0 if it has none).
    """

    def __init__(self, env: gym.Env[str, str], tools: Sequence[Tool], *, max_calls: int = 8,
                 max_output_chars: int = 4000, format_penalty: float | None = None) -> None:
        super().__init__(env)
        check_number("max_calls", max_calls, minimum=1)
        check_number("max_output_chars", max_output_chars, minimum=100)
        if format_penalty is None:
            try:
                format_penalty = float(env.get_wrapper_attr("format_penalty"))
            except AttributeError:
                format_penalty = 0.0
        check_number("format_penalty", format_penalty, minimum=0, integer=False)
        self.tools = _check_tools(tools)
        self.max_calls = max_calls
        self.max_output_chars = max_output_chars
        self.format_penalty = float(format_penalty)
        self.calls_used = 0
        self._playing = False
        self._success = False
        self._turn = 0

    @property
    def instructions(self) -> str:
        """The env's instructions followed by the tools and how to call them."""
        base = self.env.get_wrapper_attr("instructions")
        return f"{base}\n\n{describe_tools(list(self.tools.values()), self.max_calls)}"

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self.calls_used = 0
        self._playing = True
        self._success = bool(info.get("success", False))
        self._turn = info.get("turn", 0)
        return observation, {**info, "tool_calls": 0}

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if not self._playing:
            raise ResetNeeded("ToolWrapper.step() needs reset() first, and again after an episode ends.")
        if not isinstance(action, str):
            raise EnvUsageError(f"Actions are text: step() needs a str, got {type(action).__name__}.")
        length = len(action)
        action, cut_note = cut_action(action, self._max_action_chars())
        parsed = parse_tool_calls(action, self.tools)
        if not parsed:
            result = self._env_step(action)
        elif self.calls_used >= self.max_calls:
            note = (f"[Your tool calls were not run: all {self.max_calls} tool calls of this "
                    "episode are used, so your message was read as an answer.]")
            result = self._env_step(action, note=note)
        else:
            result = self._tool_turn(parsed)
        if cut_note is None:
            return result
        observation, reward, terminated, truncated, info = result
        return (self._cap(f"{cut_note}\n{observation}"), reward, terminated, truncated,
                {**info, "action_cut": length})

    def close(self) -> None:
        for tool in self.tools.values():
            tool.close()
        super().close()

    # -- the two kinds of turn ---------------------------------------------------

    def _env_step(self, action: str, note: str | None = None
                  ) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._playing = not (terminated or truncated)
        self._success = bool(info.get("success", False))
        self._turn = info.get("turn", self._turn)
        if note is not None:
            observation = f"{note}\n{observation}"
        return self._cap(observation), reward, terminated, truncated, {**info, "tool_calls": self.calls_used}

    def _tool_turn(self, parsed: ParsedCalls) -> tuple[str, float, bool, bool, dict[str, Any]]:
        blocks: list[str] = []
        results: list[dict[str, Any]] = []
        for item in parsed.in_order():
            if self.calls_used >= self.max_calls:
                message = (f"Not run: the {self.max_calls} tool calls of this episode are used "
                           "up. Answer now.")
                blocks.append(f"<tool_error>{message}</tool_error>")
                results.append({"name": item.name, "status": "refused", "output": message})
                continue
            self.calls_used += 1
            if isinstance(item, CallProblem):
                blocks.append(f"<tool_error>{item.message}</tool_error>")
                results.append({"name": item.name, "status": "invalid", "output": item.message})
                continue
            arguments = _utf8_safe_json(item.arguments)
            output = self.tools[item.name.lower()].call(**arguments)
            output = utf8_safe(_clip(output, self.max_output_chars))
            blocks.append(f'<tool_response name="{item.name}">\n{output}\n</tool_response>')
            results.append({"name": item.name, "status": "ok", "arguments": arguments,
                            "output": output})
        if self.calls_used >= self.max_calls:
            blocks.append(f"You have used all {self.max_calls} tool calls: your next message "
                          "must be your answer.")
        valid = all(result["status"] == "ok" for result in results)
        info = {"action_valid": valid, "success": self._success, "turn": self._turn,
                "tool_turn": True, "tool_calls": self.calls_used, "tool_results": results}
        reward = 0.0 if valid else -self.format_penalty
        return self._cap("\n".join(blocks)), reward, False, False, info

    def _cap(self, text: str) -> str:
        limit = getattr(self.observation_space, "max_length", MAX_OBSERVATION_CHARS)
        return utf8_safe(_clip(text, limit))

    def _max_action_chars(self) -> int:
        try:
            return int(self.env.get_wrapper_attr("max_action_chars"))
        except AttributeError:  # an env that is not a TextEnv
            return MAX_ACTION_CHARS
