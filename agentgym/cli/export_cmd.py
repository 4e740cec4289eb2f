"""``agentgym export``: a training checkpoint as a model folder that every command loads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from agentgym.cli.common import console, fail
from agentgym.errors import AgentGymError

__all__ = ["export_command"]


def export_command(
    checkpoint: Annotated[Path, typer.Argument(
        help="A checkpoint folder (RUN/checkpoints/step-000036) or a run's --out folder (its newest checkpoint).")],
    step: Annotated[int | None, typer.Option(help="With a run folder: the step whose checkpoint to export.")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Where to write the model (default: RUN/step-000036, beside RUN/final).")] = None,
) -> None:
    """Write a checkpoint of `agentgym train` as a transformers model folder.

    A LoRA checkpoint holds only the adapters: they are merged into the model the
    run started from (its config.yaml says which). The folder then goes to
    `agentgym eval --model`, `agentgym serve --model` or `--model` of another run.
    """
    from agentgym.trainers.loop.checkpoint import export_checkpoint, find_checkpoint

    try:
        folder = find_checkpoint(checkpoint, step)
        target = out if out is not None else folder.parent.parent / folder.name
        export_checkpoint(folder, target)
    except AgentGymError as exc:
        raise fail(str(exc)) from exc
    console.print(f"Model of {escape(str(folder))} written to {escape(str(target))} "
                  f"(use it as --model {escape(str(target))}).")
