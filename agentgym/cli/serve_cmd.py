"""``agentgym serve``: an OpenAI-compatible server for a model, built-in or vLLM."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from agentgym.cli.common import MODEL_PANEL, console, fail
from agentgym.errors import AgentGymError
from agentgym.net import is_loopback

__all__ = ["BUILTIN_PANEL", "NETWORK_PANEL", "EngineName", "serve_command"]

class EngineName(str, Enum):
    builtin = "builtin"
    vllm = "vllm"


# The groups of serve's --help (typer's rich_help_panel), beside rollout's "The model".
NETWORK_PANEL, BUILTIN_PANEL = "Where it listens", "The built-in engine"


def serve_command(
    model: Annotated[str, typer.Option(
        metavar="MODEL", help="A folder, a hub id, or a name from agentgym list-models (tiny, smollm2-135m).", rich_help_panel=MODEL_PANEL)],
    served_model_name: Annotated[str | None, typer.Option(
        metavar="NAME", help="Model name clients send (default: --model as given).", rich_help_panel=MODEL_PANEL)] = None,
    engine: Annotated[EngineName, typer.Option(
        metavar="ENGINE", help="builtin (transformers) or vllm.", rich_help_panel=MODEL_PANEL)] = EngineName.builtin,
    max_model_len: Annotated[int | None, typer.Option(
        metavar="N", help="Prompt + completion tokens per request (default: the model's max positions).",
        rich_help_panel=MODEL_PANEL)] = None,
    host: Annotated[str, typer.Option(
        metavar="HOST", help="Interface to bind; anything but loopback is reachable by others: set --api-key then.",
        rich_help_panel=NETWORK_PANEL)] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", help="TCP port.", rich_help_panel=NETWORK_PANEL)] = 8000,
    api_key: Annotated[str | None, typer.Option(
        metavar="KEY", help="Require 'Authorization: Bearer KEY'.", rich_help_panel=NETWORK_PANEL)] = None,
    device: Annotated[str, typer.Option(
        metavar="DEVICE", help="Where the model runs: auto (the GPU when torch sees one), cpu, cuda or cuda:N.",
        rich_help_panel=BUILTIN_PANEL)] = "auto",
    dtype: Annotated[str, typer.Option(
        metavar="DTYPE", help="Weights' dtype: float32, bfloat16 or float16 (keep float32 on the CPU, where the "
        "others are slow).", rich_help_panel=BUILTIN_PANEL)] = "float32",
    threads: Annotated[int | None, typer.Option(
        metavar="N", help="Torch threads (default: all cores but one).", rich_help_panel=BUILTIN_PANEL)] = None,
    prefix_cache_mib: Annotated[int, typer.Option(
        metavar="MIB", help="Memory that keeps finished requests' KV, so a prompt that continues one (the next "
        "turn of a conversation) prefills only its new tokens; 0 turns it off.",
        rich_help_panel=BUILTIN_PANEL)] = 1024,
    engine_process: Annotated[bool, typer.Option(
        "--engine-process", help="Run the model in a process of its own, sharing no GIL with the HTTP loop "
        "(default: a thread of the server's process).", rich_help_panel=BUILTIN_PANEL)] = False,
    max_body_mib: Annotated[float, typer.Option(
        metavar="MIB", help="Largest request body read (413 beyond): a body is parsed and tokenized whole, at "
        "seconds per MiB.", rich_help_panel=BUILTIN_PANEL)] = 8.0,
) -> None:
    """Serve a model over the OpenAI API (with vLLM's token-id extensions) until Ctrl-C."""
    if port < 1 or port > 65535:
        raise fail(f"--port must be between 1 and 65535, got {port}.")
    if prefix_cache_mib < 0:
        raise fail(f"--prefix-cache-mib must be 0 (off) or more, got {prefix_cache_mib}.")
    if not max_body_mib > 0:
        raise fail(f"--max-body-mib must be more than 0, got {max_body_mib:g}.")
    if api_key is not None and not api_key.strip():
        raise fail("--api-key is empty; give a real key or leave it out (loopback only).")
    if not is_loopback(host) and not api_key:
        raise fail(f"Refusing to bind {host} without --api-key: anyone who can reach it could use "
                   "the model and replace its weights. Pass --api-key KEY, or bind 127.0.0.1.")
    from agentgym.models import resolve_model

    try:
        resolve_model(model)  # a mistyped path: one line now, not a traceback once the server starts
    except AgentGymError as exc:
        raise fail(str(exc)) from None
    name = served_model_name or model
    if engine is EngineName.vllm:
        from agentgym.serve.vllm import serve_vllm

        code = serve_vllm(model=model, host=host, port=port, served_model_name=name,
                          max_model_len=max_model_len, api_key=api_key)
        raise typer.Exit(code)
    import secrets

    from agentgym.allocator import preloaded_allocator
    from agentgym.serve.launch import serve_builtin

    console.print(f"Serving {model} as {name!r} at http://{host}:{port}/v1 (built-in engine; "
                  f"memory allocator: {preloaded_allocator()}).")
    # The control routes always want a key: code in a local sandbox reaches loopback too.
    control_key = None if api_key else secrets.token_urlsafe(24)
    if control_key:
        console.print(f"Control routes (/update_weights, LoRA, /reset_prefix_cache) want "
                      f"'Authorization: Bearer {control_key}'; inference is open.", soft_wrap=True)
    try:
        serve_builtin(model, host=host, port=port, api_key=api_key, control_key=control_key,
                      served_model_name=name,
                      max_model_len=max_model_len, torch_threads=threads,
                      prefix_cache_mib=prefix_cache_mib, device=device, dtype=dtype,
                      max_body_mib=max_body_mib, engine_process=engine_process)
    except AgentGymError as exc:
        raise fail(str(exc)) from exc
