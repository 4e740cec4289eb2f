"""What a ``--model`` name means: a tiny model, a named real model, a folder, or a hub id."""

from __future__ import annotations

from pathlib import Path

from agentgym.errors import ConfigError
from agentgym.models.named import NAMED_MODELS, resolve_named
from agentgym.models.tiny import build_tiny_model, cache_root, tiny_spec

__all__ = ["check_model_name", "resolve_model"]


def resolve_model(name: str, *, option: str = "--model") -> str:
    """A folder for a ``tiny`` name (built on first use); for a named real model (``smollm2-135m``,
    :data:`~agentgym.models.named.NAMED_MODELS`) its hub id or agentgym's copy of it; a model folder
    or a hub id unchanged.

    A name written as a path (``/x``, ``./x``, ``~/x``, ``a/b/c``) that does not exist is a
    :class:`ConfigError` here, not a transformers traceback later; its message names ``option``,
    the flag or setting the name came from.
    """
    named = resolve_named(name)
    if named is not None:
        return named
    spec = tiny_spec(name)
    if spec is None:
        check_model_name(name, option=option)
        return name
    folder = cache_root() / "models" / spec.folder_name
    if not (folder / "config.json").exists():
        build_tiny_model(folder, spec)
    return str(folder)


def check_model_name(name: str, *, option: str = "--model") -> None:
    """The :class:`ConfigError` :func:`resolve_model` would raise for ``name``, without building or
    loading anything: a bad ``tiny-HxL`` size, or a path that does not exist (``option`` named)."""
    if name in NAMED_MODELS or tiny_spec(name) is not None:  # tiny_spec raises on a bad size
        return
    path = Path(name).expanduser()
    first = name.split("/", 1)[0]
    looks_local = (name.startswith(("/", ".", "~")) or name.count("/") > 1
                   or ("/" in name and Path(first).is_dir()))  # runs/x: a run folder here, not a hub org
    if looks_local and not path.exists():
        raise ConfigError(f"{option} {name!r} does not exist. Give a folder a run saved (e.g. runs/x/final), "
                          "'tiny' or another name agentgym list-models shows, or a Hugging Face hub id such as "
                          "Qwen/Qwen2.5-0.5B-Instruct.")
