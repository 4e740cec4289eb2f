"""Ask a model server whether it answers before a rollout plays against it.

A dead ``--base-url`` would otherwise fail every episode, one timeout after
another, and end in a table of failures. ``GET {base_url}/models`` with a
short timeout tells at once whether something answers, whether it takes the
API key, and which models it serves; ``POST /tokenize`` (vLLM's, the built-in
server's) how it tokenizes a conversation, to compare with our tokenizer.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Sequence
from urllib.parse import urlsplit

from agentgym.errors import ServerRequestError
from agentgym.net import is_loopback

__all__ = ["check_servers", "probe_server", "tokenize_on_server"]

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback never goes through a proxy
_PROXIED = urllib.request.build_opener()


def probe_server(base_url: str, *, api_key: str = "EMPTY",
                 timeout: float = 5.0) -> tuple[str | None, list[str]]:
    """``(problem, models)``: what is wrong with the server at ``base_url`` (None: it answers)
    and the model names its ``/models`` lists (empty when it lists none)."""
    url = base_url.rstrip("/") + "/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"})
    opener = _DIRECT if is_loopback(urlsplit(url).hostname or "") else _PROXIED
    try:
        with opener.open(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return f"{base_url} refused the API key ({exc.code}): pass the server's key with --api-key.", []
        return (f"GET {url} answered {exc.code}: is {base_url} an OpenAI-compatible server, "
                "and does the URL end in /v1?"), []
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ConnectionRefusedError):
            why = "connection refused"
        elif isinstance(reason, (TimeoutError, socket.timeout)):
            why = f"no answer within {timeout:g} s"
        else:
            why = str(reason)
        return (f"nothing answers at {base_url} ({why}): start the server (e.g. vllm serve MODEL) "
                "or fix --base-url."), []
    try:
        listed = json.loads(body).get("data", [])
        models = [entry["id"] for entry in listed if isinstance(entry, dict) and "id" in entry]
    except (ValueError, AttributeError, TypeError):
        models = []  # it answers; a server that lists no models is left to the requests
    return None, models


def check_servers(base_urls: Sequence[str], *, model: str, api_key: str = "EMPTY",
                  timeout: float = 5.0) -> list[str]:
    """Raise :class:`ServerRequestError` unless one of ``base_urls`` answers; return, for
    the caller to show as warnings, the problems of those that do not (the pool skips
    them) and of those that list other models than ``model`` (some servers, vLLM among
    them, refuse a request for a model they do not serve; others serve any name)."""
    problems: list[str] = []
    answered = 0
    for base_url in base_urls:
        problem, models = probe_server(base_url, api_key=api_key, timeout=timeout)
        if problem is not None:
            problems.append(problem)
            continue
        answered += 1
        if models and model not in models:
            served = ", ".join(repr(name) for name in models[:5])
            problems.append(f"{base_url} lists {served}, not {model!r}: if its requests fail, "
                            "pass one of those as --model.")
    if not answered:
        raise ServerRequestError(problems[0] if len(problems) == 1 else
                                 f"none of the {len(problems)} servers answers: " + " ".join(problems))
    return problems


def tokenize_on_server(base_url: str, messages: list[dict[str, str]], *, model_name: str,
                       api_key: str = "EMPTY", timeout: float = 10.0) -> list[int] | None:
    """The ids the server at ``base_url`` renders ``messages`` into with its chat template, with the
    assistant header (``POST /tokenize`` at its root, beside ``/v1``); None when it has no such route,
    refuses, or does not answer."""
    root = base_url.rstrip("/").removesuffix("/v1")
    body = json.dumps({"model": model_name, "messages": messages, "add_generation_prompt": True}).encode()
    request = urllib.request.Request(root + "/tokenize", data=body, method="POST", headers={
        "Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
    opener = _DIRECT if is_loopback(urlsplit(root).hostname or "") else _PROXIED
    try:
        with opener.open(request, timeout=timeout) as response:
            tokens = json.loads(response.read()).get("tokens")
    except (urllib.error.URLError, OSError, ValueError, AttributeError):  # HTTPError is a URLError
        return None
    return tokens if isinstance(tokens, list) and all(isinstance(token, int) for token in tokens) else None
