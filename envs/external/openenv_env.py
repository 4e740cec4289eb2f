"""``openenv:URL``: an env served by a running OpenEnv server, as an agentgym text env.

    env = agentgym.make("openenv:http://127.0.0.1:8000")
    env = gym.make("agentgym:OpenEnv-LLM-v0", base_url="http://127.0.0.1:8000")
    agentgym rollout --env openenv:http://127.0.0.1:8000 -k action_field=message ...

An OpenEnv environment is typed; this env maps its models to text both ways, from the
server's ``/schema``:

- **action**: the agent's message fills the action's one string field (``message``,
  ``code``, ``llm_response``...); ``-k action_field=NAME`` picks one among several. With
  ``-k json_actions=true`` the agent writes the whole action as a JSON object instead
  (for actions with numbers, choices, several fields).
- **observation**: a single string field is the text; otherwise each non-empty field
  becomes ``name: value`` (strings as they are, the rest as JSON); ``-k
  observation_field=NAME`` keeps one. agentgym's own servers send ``text``,
  ``instructions``, ``info``, ``terminated`` and ``truncated``
  (:mod:`agentgym.interop.textwire`), used as such: such an env plays as it does in
  process.
- **reward**: the observation's; ``done`` ends the episode (``terminated``).

What has no text form (no string field in the action and no ``json_actions``, a field
the action requires that text cannot fill, an observation that is not an object, a
reward that is not a number) raises :class:`~agentgym.errors.RemoteEnvError` naming the
field: the episode fails with that reason, and so does a dropped WebSocket, a timeout
or a reply that is not UTF-8 JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentgym.envs.external.openenv_wire import OpenEnvSession, get_json, http_url
from agentgym.envs.external.remote import RemoteStep, RemoteTextEnv

from agentgym.core import check_number, utf8_safe
from agentgym.errors import ConfigError, RemoteEnvError
from agentgym.interop import textwire

__all__ = ["OpenEnvEnv", "TextMapping", "map_schema", "observation_text"]

# Fields OpenEnv keeps out of the observation it sends, and the ones agentgym's server adds.
_BASE_ACTION_FIELDS = frozenset({"metadata"})
_WIRE_FIELDS = frozenset({textwire.INSTRUCTIONS_FIELD, textwire.INFO_FIELD,
                          textwire.TERMINATED_FIELD, textwire.TRUNCATED_FIELD})


@dataclass(frozen=True, slots=True)
class TextMapping:
    """How text becomes this server's action and its observation becomes text."""

    #: the action field the agent's message fills (None: the message is the JSON action)
    action_field: str | None
    #: the one observation field shown (None: every field)
    observation_field: str | None = None


def _types(schema: dict[str, Any]) -> set[str]:
    """The JSON types a property schema allows (``anyOf`` of ``Optional[str]`` included)."""
    found = set()
    for option in [schema, *schema.get("anyOf", []), *schema.get("oneOf", [])]:
        kind = option.get("type") if isinstance(option, dict) else None
        found.update([kind] if isinstance(kind, str) else kind or [])
    return found


def map_schema(schema: Any, *, action_field: str | None = None, json_actions: bool = False,
               observation_field: str | None = None) -> TextMapping:
    """The text mapping of a server's ``/schema``; :class:`RemoteEnvError` names what cannot map."""
    if not isinstance(schema, dict) or not isinstance(schema.get("action"), dict) \
            or not isinstance(schema.get("observation"), dict):
        raise RemoteEnvError(f"/schema answered {str(schema)[:120]!r}, not OpenEnv's "
                             '{"action": {...}, "observation": {...}}.')
    observation = schema["observation"]
    if observation.get("type", "object") != "object":
        raise RemoteEnvError(f"The observation is a JSON {observation.get('type')}, not an object: "
                             "agentgym maps observation fields to text, and this one has none.")
    if observation_field is not None and observation_field not in observation.get("properties", {}):
        raise RemoteEnvError(f"The observation has no field {observation_field!r}; it has "
                             f"{', '.join(observation.get('properties', {})) or 'none'}.")
    if json_actions:
        return TextMapping(None, observation_field)
    return TextMapping(_action_field(schema["action"], action_field), observation_field)


def _action_field(action: dict[str, Any], chosen: str | None) -> str:
    properties = {name: value for name, value in action.get("properties", {}).items()
                  if name not in _BASE_ACTION_FIELDS and isinstance(value, dict)}
    texts = sorted(name for name, value in properties.items() if "string" in _types(value))
    described = ", ".join(f"{name} ({'/'.join(sorted(_types(value))) or 'any'})"
                          for name, value in properties.items()) or "no fields"
    if chosen is not None:
        if chosen not in texts:
            raise RemoteEnvError(f"action_field={chosen!r} is not a text field of the action; it has "
                                 f"{described}.")
        field = chosen
    elif len(texts) == 1:
        field = texts[0]
    elif not texts:
        raise RemoteEnvError(f"The action has no text field to put the agent's message in (it has "
                             f"{described}): play it with -k json_actions=true, the agent then "
                             "writing the action as JSON.")
    else:
        raise RemoteEnvError(f"The action has several text fields ({', '.join(texts)}): choose the "
                             "one the agent's message fills with -k action_field=NAME, or use "
                             "-k json_actions=true.")
    others = [name for name in action.get("required", []) if name != field and name not in _BASE_ACTION_FIELDS]
    if others:
        raise RemoteEnvError(f"The action also requires {', '.join(others)}, which a text message "
                             "cannot fill: play it with -k json_actions=true.")
    return field


def observation_text(observation: Any, mapping: TextMapping) -> str:
    """The text the agent reads of an observation (its fields but agentgym's wire ones)."""
    if not isinstance(observation, dict):
        raise RemoteEnvError(f"The server sent an observation that is a {type(observation).__name__}, "
                             "not an object.")
    if mapping.observation_field is not None:
        return _render(observation.get(mapping.observation_field, ""))
    shown = {name: value for name, value in observation.items()
             if name not in _WIRE_FIELDS and value not in (None, "", [], {})}
    if len(shown) == 1 and isinstance(next(iter(shown.values())), str):
        return next(iter(shown.values()))
    if textwire.OBSERVATION_FIELD in observation and not shown:
        return ""
    return "\n".join(_line(name, value) for name, value in shown.items())


def _render(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _line(name: str, value: Any) -> str:
    text = _render(value)
    return f"{name}:\n{text}" if "\n" in text else f"{name}: {text}"


class OpenEnvEnv(RemoteTextEnv):
    """An episode on an OpenEnv server, over one WebSocket session per env.

    Args:
        base_url: the server, ``http://HOST:PORT`` (or ``ws://``).
        action_field, json_actions, observation_field: the text mapping (module docs).
        instructions: the system prompt (default: agentgym's server sends its env's; for
            others, the server's ``/metadata`` description and how a message is sent).
        reset_args: more keyword arguments for the server env's ``reset`` (besides ``seed``).
        timeout: seconds each answer of the server may take.
        max_turns: cut the episode off after this many moves (None: the server ends it).
    """

    def __init__(self, base_url: str, *, action_field: str | None = None, json_actions: bool = False,
                 observation_field: str | None = None, instructions: str | None = None,
                 reset_args: dict[str, Any] | None = None, timeout: float = 60.0,
                 max_turns: int | None = None) -> None:
        super().__init__(max_turns=max_turns)
        self.base_url = http_url(base_url)
        check_number("timeout", timeout, minimum=0.001, integer=False)
        if reset_args is not None and not isinstance(reset_args, dict):
            raise ConfigError(f"reset_args must be a mapping of reset() arguments, got {reset_args!r}.")
        self.options = {"action_field": action_field, "json_actions": bool(json_actions),
                        "observation_field": observation_field}
        self.given_instructions = instructions
        self.reset_args = dict(reset_args or {})
        self.timeout = float(timeout)
        self.mapping: TextMapping | None = None
        self._session = OpenEnvSession(self.base_url, timeout=self.timeout)

    def _start(self, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any], str]:
        if self.mapping is None:
            self.mapping = map_schema(get_json(self.base_url, "/schema", self.timeout), **self.options)
        data = {**self.reset_args, **({"seed": seed} if seed is not None else {}),
                **({"options": options} if options else {})}
        observation, _, _, _, info = self._read(self._session.request({"type": "reset", "data": data}))
        instructions = observation.get(textwire.INSTRUCTIONS_FIELD) if isinstance(observation, dict) else None
        if self.given_instructions is not None:
            instructions = self.given_instructions
        elif not isinstance(instructions, str) or not instructions:
            instructions = self._default_instructions()
        return observation_text(observation, self.mapping), info, utf8_safe(instructions)

    def _move(self, action: str) -> RemoteStep:
        assert self.mapping is not None  # set by reset, which step needs first
        payload = self._action(action)
        if isinstance(payload, str):  # JSON the agent got wrong: feedback, nothing sent
            return RemoteStep(payload, info={"action_valid": False})
        observation, reward, terminated, truncated, info = self._read(
            self._session.request({"type": "step", "data": payload}))
        return RemoteStep(observation_text(observation, self.mapping), reward, terminated, truncated, info)

    def _action(self, text: str) -> dict[str, Any] | str:
        """The action to send, or (JSON actions) the feedback for text that is not one."""
        assert self.mapping is not None
        if self.mapping.action_field is not None:
            return {self.mapping.action_field: text}
        start, end = text.find("{"), text.rfind("}")
        try:
            action = json.loads(text[start:end + 1]) if start >= 0 else None
        except json.JSONDecodeError as exc:
            return f"Your action is not valid JSON ({exc.msg}): write one JSON object."
        if not isinstance(action, dict):
            return "Write your action as one JSON object, e.g. {\"field\": value}."
        return action

    def _read(self, data: dict[str, Any]) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """(observation, reward, terminated, truncated, info) of an answer's ``data``."""
        observation = data.get("observation")
        reward = data.get("reward")
        if reward is None:
            reward = 0.0
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise RemoteEnvError(f"The server's reward {reward!r} is not a number.")
        fields = observation if isinstance(observation, dict) else {}
        info = fields.get(textwire.INFO_FIELD)
        info = dict(info) if isinstance(info, dict) else {}
        if isinstance(fields.get("success"), bool):
            info.setdefault("success", fields["success"])
        done = bool(data.get("done", False))
        truncated = fields.get(textwire.TRUNCATED_FIELD) is True
        terminated = fields[textwire.TERMINATED_FIELD] is True if textwire.TERMINATED_FIELD in fields \
            else done and not truncated
        return observation, float(reward), terminated, truncated, info

    def _default_instructions(self) -> str:
        try:
            metadata = get_json(self.base_url, "/metadata", self.timeout)
        except RemoteEnvError:
            metadata = {}
        about = metadata.get("description") if isinstance(metadata, dict) else None
        assert self.mapping is not None
        how = (f"Your whole message is sent to the environment as its `{self.mapping.action_field}`."
               if self.mapping.action_field else
               "Write each action as one JSON object with the fields the environment's action has.")
        return f"{about or 'An OpenEnv environment.'}\n\n{how}"

    def close(self) -> None:
        self._session.close()
