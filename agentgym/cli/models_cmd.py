"""``agentgym list-models``: the models known by name, and what the model cache holds."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.table import Table

from agentgym.cli.common import console, fail
from agentgym.errors import AgentGymError

__all__ = ["list_models_command"]


def list_models_command() -> None:
    """List the models known by name (--model NAME) and the model folders in the cache."""
    from agentgym.models import NAMED_MODELS, TinySpec, cache_root
    from agentgym.models.named import SOURCE_VARIABLE, uses_hub

    cached = _cached_folders(cache_root() / "models")
    table = Table(title="models by name (--model NAME)")
    for column in ("name", "model", "comes from", "cached"):
        table.add_column(column, overflow="fold")
    tiny = TinySpec()
    table.add_row("tiny", f"random weights, hidden {tiny.hidden_size}, {tiny.num_layers} layers",
                  "built here", _size_of(cached.get(tiny.folder_name)))
    table.add_row("tiny-HxL", "hidden H (a multiple of 64), L layers", "built here", "-")
    for model in NAMED_MODELS.values():
        try:
            hub = uses_hub(model)
        except AgentGymError as exc:
            raise fail(str(exc)) from None
        origin = (f"the hub: {model.hub_id}" if hub else
                  f"a dequantized {model.source.quantization} copy from PyPI's {model.source.requirement}")
        size = "in the hub's cache" if hub else _size_of(cached.get(model.folder_name))
        table.add_row(*(escape(text) for text in (model.name, model.description, origin, size)))
    console.print(table)
    for model in NAMED_MODELS.values():
        console.print(f"Where the hub is reachable, --model {escape(model.hub_id)} gives {escape(model.name)}'s "
                      "original weights.")
    console.print(f"{SOURCE_VARIABLE}=hub or =build chooses where a name comes from.")
    root = cache_root() / "models"
    if not cached:
        console.print(f"Nothing cached in {escape(str(root))} yet: a name is built on first use.")
        return
    console.print(f"Model folders cached in {escape(str(root))}:")  # a long path would wrap as a title
    folders = Table()
    folders.add_column("folder", overflow="fold")
    folders.add_column("size", justify="right")
    for name, size in sorted(cached.items()):
        folders.add_row(escape(name), _size_of(size))
    console.print(folders)


def _cached_folders(root: Path) -> dict[str, int]:
    """Each model folder in ``root`` and its size on disk in bytes (builds under way, hidden, left out)."""
    if not root.is_dir():
        return {}
    return {folder.name: sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
            for folder in root.iterdir() if folder.is_dir() and not folder.name.startswith(".")}


def _size_of(size: int | None) -> str:
    if size is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
