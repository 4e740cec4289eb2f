"""``verifiers:NAME``: a verifiers environment as an agentgym text env, scored by its rubric.

    env = agentgym.make("verifiers:reverse_text")                    # load_environment()
    env = agentgym.make("verifiers:my_env", num_examples=50)         # load_environment(num_examples=50)
    agentgym rollout --env verifiers:my_env -k num_examples=50 ...

``NAME`` is what ``verifiers.load_environment`` takes: an installed environment package
(module ``NAME``, ``-`` read as ``_``) with a ``load_environment`` function; the ``-k``
arguments go to it, but for this env's own (``split``, ``max_turns``, ``timeout``).

A verifiers environment drives its own loop: ``rollout`` asks a model client for each
turn, runs ``env_response`` between turns, and scores the finished rollout with its
rubric. Here that loop runs on a background event loop (one per process, shared by
every such env), with a client that waits for agentgym's next action instead of asking a
model. So ``reset`` starts a rollout on a row of the env's dataset (drawn with the reset
seed) and returns its prompt; ``step`` hands it the action and returns what the env
answered, or, at the end, its rubric's reward. Rubrics, async or not, run on that loop:
never on the rollout manager's, whose steps of such envs always go to its thread pool.

Text both ways: system messages are the instructions (with the env's tools described);
user and tool messages are the observation (a tool's output as
``<tool_response name="...">``); an action's ``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>`` tags become the message's tool calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import inspect
import json
import queue
import re
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from agentgym.envs.external.remote import RemoteStep, RemoteTextEnv

from agentgym.core import check_number
from agentgym.errors import ConfigError, MissingDependencyError, RemoteEnvError

__all__ = ["VerifiersEnv", "load_verifiers_env"]

_INSTALL_HINT = MissingDependencyError.install_hint("interop", "verifiers")
_SPLITS = ("train", "eval")
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_LOADED: dict[str, Any] = {}
_LOADED_LOCK = threading.Lock()
_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _verifiers() -> Any:
    try:
        import verifiers
    except ImportError as exc:
        raise MissingDependencyError(f"verifiers: envs need the verifiers package: {_INSTALL_HINT}.") from exc
    return verifiers


def load_verifiers_env(name: str, env_args: dict[str, Any]) -> Any:
    """``verifiers.load_environment(name, **env_args)``, once per process for the same
    arguments (a verifiers env plays many rollouts at once); a bad name or argument is a
    :class:`ConfigError` naming it."""
    vf = _verifiers()
    key = f"{name}:{json.dumps(env_args, sort_keys=True, default=str)}"
    with _LOADED_LOCK:
        if key not in _LOADED:
            _check_arguments(name, env_args)
            try:
                _LOADED[key] = vf.load_environment(name, **env_args)
            except (ValueError, RuntimeError, TypeError) as exc:
                raise ConfigError(f"verifiers could not load {name!r} with {env_args}: {exc}") from exc
        return _LOADED[key]


def _check_arguments(name: str, env_args: dict[str, Any]) -> None:
    """A missing package or an argument ``load_environment`` does not take, in one line."""
    module_name = name.replace("-", "_").split("/")[-1]  # as verifiers.load_environment reads it
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"No verifiers environment {name!r} here: no module {module_name!r} "
                          f"({exc}). Install the environment's package, or check the name.") from exc
    loader = getattr(module, "load_environment", None)
    if not callable(loader):
        raise ConfigError(f"{module_name!r} is not a verifiers environment: it has no load_environment().")
    parameters = inspect.signature(loader).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = [key for key in env_args if key not in parameters]
    if unknown:
        raise ConfigError(f"{name}'s load_environment takes no argument {unknown[0]!r}; it takes "
                          f"{', '.join(parameters) or 'none'}.")


def _background_loop() -> asyncio.AbstractEventLoop:
    """The event loop the verifiers rollouts of this process run on (started once)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agentgym-verifiers", daemon=True).start()
            _LOOP = loop
        return _LOOP


def _field(message: Any, name: str) -> Any:
    return message.get(name) if isinstance(message, dict) else getattr(message, name, None)


def _text(content: Any) -> str:
    """A message's content as text (the text parts of a multi-part one)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = [_field(part, "text") if _field(part, "type") == "text" else f"[{_field(part, 'type')}]"
             for part in content]
    return "\n".join(part or "" for part in parts)


def _tool_calls(text: str) -> list[dict[str, Any]]:
    """The ``<tool_call>`` JSON calls in an action (name and arguments), in order."""
    calls = []
    for block in _TOOL_CALL.findall(text):
        try:
            call = json.loads(block.strip())
        except json.JSONDecodeError:
            continue
        if isinstance(call, dict) and isinstance(call.get("name"), str):
            arguments = call.get("arguments", {})
            calls.append({"name": call["name"], "arguments": arguments if isinstance(arguments, str)
                          else json.dumps(arguments)})
    return calls


class _Bridge:
    """What stands in for the model in one verifiers rollout: each turn it hands the prompt to
    the Gymnasium side and waits for the action. Built as a ``verifiers.Client`` subclass
    (:func:`_bridge_client`), the interface verifiers asks every model client to implement."""

    def __init__(self) -> None:
        self.turns: queue.Queue[tuple[str, Any]] = queue.Queue()  # -> the Gymnasium side
        self.reply: asyncio.Future[str] | None = None  # <- its action, on the loop
        self.tool_names: dict[str, str] = {}  # tool call id -> tool name

    async def ask(self, prompt: Any) -> str:
        self.reply = asyncio.get_running_loop().create_future()
        self.turns.put(("ask", prompt))
        return await self.reply


def _bridge_client(vf: Any, bridge: _Bridge) -> Any:
    """A ``verifiers.Client`` whose every response is the agent's next action."""

    class GymnasiumClient(vf.Client):
        def setup_client(self, config: Any) -> Any:
            return bridge

        async def to_native_tool(self, tool: Any) -> Any:
            return tool

        async def to_native_prompt(self, messages: Any) -> tuple[Any, dict]:
            return messages, {}

        async def get_native_response(self, prompt: Any, model: str, sampling_args: Any,
                                      tools: Any = None, **kwargs: Any) -> Any:
            text = await bridge.ask(prompt)
            calls = _tool_calls(text) if tools else []
            tool_calls = [vf.ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", **call) for call in calls]
            bridge.tool_names.update((call.id, call.name) for call in tool_calls)
            message = vf.ResponseMessage(content=text, tool_calls=tool_calls or None, is_truncated=False,
                                         finish_reason="tool_calls" if tool_calls else "stop")
            return vf.Response(id=uuid.uuid4().hex, created=int(time.time()), model=model, message=message)

        async def raise_from_native_response(self, response: Any) -> None:
            return None

        async def from_native_response(self, response: Any) -> Any:
            return response

        async def close(self) -> None:
            return None

    return GymnasiumClient(bridge)


class VerifiersEnv(RemoteTextEnv):
    """A verifiers environment's rollouts, one per episode (see the module docs).

    Args:
        name: the environment (what ``verifiers.load_environment`` takes).
        split: ``train`` (its dataset) or ``eval`` (its eval dataset) to draw rows from.
        max_turns: cut an episode off after this many moves (its own limit applies too).
        timeout: seconds the environment may take to answer one move (its rubric included).
        **env_args: the arguments of its ``load_environment``.
    """

    def __init__(self, name: str, *, split: str = "train", max_turns: int | None = None,
                 timeout: float = 600.0, **env_args: Any) -> None:
        super().__init__(max_turns=max_turns)
        if split not in _SPLITS:
            raise ConfigError(f"split must be train or eval, got {split!r}.")
        check_number("timeout", timeout, minimum=0.001, integer=False)
        self.name, self.split, self.timeout = name, split, float(timeout)
        self.vf = _verifiers()
        self.vf_env = load_verifiers_env(name, env_args)
        self.dataset = self._dataset()
        self._bridge: _Bridge | None = None
        self._rollout: concurrent.futures.Future[Any] | None = None
        self._seen = 0  # messages of the conversation the agent has seen (its own included)
        self._prompt_length = 0  # messages of the first prompt

    def _dataset(self) -> Any:
        try:
            dataset = self.vf_env.get_dataset() if self.split == "train" else self.vf_env.get_eval_dataset()
        except ValueError as exc:
            other = "eval" if self.split == "train" else "train"
            raise ConfigError(f"{self.name} has no {self.split} dataset ({exc}): try -k split={other}.") from exc
        if len(dataset) == 0:
            raise ConfigError(f"{self.name}'s {self.split} dataset is empty.")
        return dataset

    def _start(self, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any], str]:
        self._cancel()
        index = (options or {}).get("index", int(self.np_random.integers(len(self.dataset))))
        check_number('options["index"]', index, minimum=0, maximum=len(self.dataset) - 1)
        row = dict(self.dataset[int(index)])
        self._bridge = bridge = _Bridge()
        client = _bridge_client(self.vf, bridge)
        coroutine = self.vf_env.run_rollout(row, client, "agentgym", {})
        self._rollout = asyncio.run_coroutine_threadsafe(coroutine, _background_loop())
        self._rollout.add_done_callback(lambda done: bridge.turns.put(("done", done)))
        self._seen = 0
        kind, payload = self._next()
        if kind != "ask":
            raise RemoteEnvError(f"{self.name} ended its rollout before the first turn: {self._failure(payload)}")
        self._prompt_length = len(payload)
        system = [_text(_field(m, "content")) for m in payload if _field(m, "role") == "system"]
        instructions = "\n\n".join([*system, *self._tools_text()]).strip() or "Answer the task."
        return self._new_text(payload), {"example_id": row.get("example_id", index)}, instructions

    def _move(self, action: str) -> RemoteStep:
        assert self._bridge is not None and self._bridge.reply is not None
        _background_loop().call_soon_threadsafe(self._bridge.reply.set_result, action)
        self._seen += 1  # the action's own message
        kind, payload = self._next()
        if kind == "ask":
            return RemoteStep(self._new_text(payload))
        output = self._output(payload)
        reward = float(output.get("reward") or 0.0)
        info = {"success": reward >= float(getattr(self.vf_env, "pass_threshold", 0.5)),
                "metrics": output.get("metrics") or {}, "stop_condition": output.get("stop_condition")}
        truncated = bool(output.get("is_truncated"))
        final = self._new_text(output.get("completion") or [], completion=True)
        return RemoteStep(final or f"The episode is over. Reward: {reward:g}.", reward,
                          terminated=not truncated, truncated=truncated, info=info)

    def _next(self) -> tuple[str, Any]:
        assert self._bridge is not None
        try:
            return self._bridge.turns.get(timeout=self.timeout)
        except queue.Empty:
            self._cancel()
            raise RemoteEnvError(f"{self.name} did not answer within {self.timeout:g} s "
                                 "(-k timeout=S waits longer).") from None

    def _output(self, done: concurrent.futures.Future[Any]) -> dict[str, Any]:
        try:
            output = done.result()
        except (concurrent.futures.CancelledError, Exception) as exc:
            raise RemoteEnvError(f"{self.name}'s rollout failed: {type(exc).__name__}: {exc}") from exc
        if output.get("error"):
            raise RemoteEnvError(f"{self.name}'s rollout failed: {self._failure(done)}")
        return output

    def _failure(self, done: Any) -> str:
        try:
            output = done.result()
        except BaseException as exc:  # noqa: BLE001  (reported, not raised)
            return f"{type(exc).__name__}: {exc}"
        error = output.get("error") if isinstance(output, dict) else None
        return str(_field(error, "message") or error or "no turn was asked")

    def _new_text(self, messages: Sequence[Any], *, completion: bool = False) -> str:
        """The messages the agent has not seen (the env's reply), as one text."""
        # A completion is the conversation after the first prompt; a prompt is all of it.
        start = self._seen - self._prompt_length if completion else self._seen
        new = list(messages)[max(start, 0):]
        if not completion:
            self._seen = len(messages)
        return "\n\n".join(self._message_text(m) for m in new if _field(m, "role") != "system")

    def _message_text(self, message: Any) -> str:
        content = _text(_field(message, "content"))
        if _field(message, "role") == "tool":
            assert self._bridge is not None
            name = self._bridge.tool_names.get(str(_field(message, "tool_call_id")), "tool")
            return f'<tool_response name="{name}">\n{content}\n</tool_response>'
        return content

    def _tools_text(self) -> list[str]:
        tools = getattr(self.vf_env, "tool_defs", None) or []
        if not tools:
            return []
        how = ('Call a tool by writing, in your message, <tool_call>{"name": "NAME", "arguments": {...}}'
               "</tool_call>. Its output comes back in the next message; a message with no tool call is "
               "your final answer.")
        lines = ["# Tools", how]
        for tool in tools:
            lines.append(f"- {_field(tool, 'name')}: {_field(tool, 'description')} Arguments (JSON "
                         f"schema): {json.dumps(_field(tool, 'parameters'))}")
        return ["\n".join(lines)]

    def _cancel(self) -> None:
        rollout, self._rollout = self._rollout, None
        if rollout is not None and not rollout.done():
            rollout.cancel()

    def close(self) -> None:
        self._cancel()
