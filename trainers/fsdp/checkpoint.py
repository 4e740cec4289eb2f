"""Resumable checkpoints of the FSDP trainer: model, optimiser, scheduler, step, RNG, loop state.

Layout, one folder per saved step::

    OUT/checkpoints/step-000010/
        trainer.pt    full (unsharded) model and optimiser state, scheduler, versions
        rng.pt        every rank's torch RNG state
        state.json    the loop's own state (next step, data position, ...); written last

Full state dicts are gathered on rank 0 and written once, so a checkpoint
loads into any number of ranks (or one plain process). A folder is written
under a temporary name and renamed, so a crash never leaves a half checkpoint
that looks complete. Only the newest ``keep`` checkpoints are kept.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from agentgym.errors import ConfigError
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.fsdp.trainer import FSDPTrainer

__all__ = ["CHECKPOINT_DIR", "export_checkpoint", "find_checkpoint", "latest_checkpoint", "list_checkpoints",
           "load_checkpoint", "save_checkpoint"]

CHECKPOINT_DIR = "checkpoints"
_STATE = "state.json"


def list_checkpoints(out: str | Path) -> list[Path]:
    """Complete checkpoint folders of a run, oldest first."""
    root = Path(out) / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("step-*") if (p / _STATE).exists())


def latest_checkpoint(out: str | Path) -> Path | None:
    found = list_checkpoints(out)
    return found[-1] if found else None


def _options(trainer: FSDPTrainer) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # LoRA: the frozen base weights are the model folder's; only the adapters are saved.
    return StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=trainer.config.lora)


def _rng_state(trainer: FSDPTrainer) -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if trainer.dist.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(trainer.dist.device)
    return state


def save_checkpoint(trainer: FSDPTrainer, out: str | Path, step: int, loop_state: dict[str, Any],
                    keep: int = 2) -> Path | None:
    """Save everything needed to go on after ``step`` steps. Every rank must call it.

    Returns the folder on rank 0 (None elsewhere).
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    options = _options(trainer)
    model_state = get_model_state_dict(trainer.model, options=options)
    optimizer_state = get_optimizer_state_dict(trainer.model, trainer.optimizer, options=options)
    rng = [_rng_state(trainer)]
    if trainer.dist.sharded:
        rng = [None] * trainer.dist.world_size
        dist.all_gather_object(rng, _rng_state(trainer))
    folder = None
    if trainer.dist.is_main:
        folder = Path(out) / CHECKPOINT_DIR / f"step-{step:06d}"
        staging = folder.with_name(f".staging-{folder.name}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        torch.save({"model": model_state, "optimizer": optimizer_state,
                    "scheduler": trainer.scheduler.state_dict(), "version": trainer.version,
                    "optimizer_steps": trainer.optimizer_steps, "world_size": trainer.dist.world_size},
                   staging / "trainer.pt")
        torch.save(rng, staging / "rng.pt")
        (staging / _STATE).write_text(json.dumps({"step": step, **loop_state}, indent=1), encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
        for old in list_checkpoints(out)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    if trainer.dist.sharded:
        dist.barrier()
    return folder


def load_checkpoint(trainer: FSDPTrainer, folder: str | Path) -> dict[str, Any]:
    """Restore ``trainer`` from ``folder``; returns the loop state saved with it. Every rank calls it."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    folder = Path(folder)
    try:
        saved = torch.load(folder / "trainer.pt", map_location="cpu", weights_only=True)
        rng = torch.load(folder / "rng.pt", map_location="cpu", weights_only=True)
        loop_state = json.loads((folder / _STATE).read_text(encoding="utf-8"))
    except (OSError, RuntimeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"Could not read the checkpoint {str(folder)!r}: {exc}. Delete it to resume "
                          "from the one before, or start a new run with another --out.") from exc
    options = _options(trainer)
    set_model_state_dict(trainer.model, saved["model"], options=options)
    set_optimizer_state_dict(trainer.model, trainer.optimizer, saved["optimizer"], options=options)
    trainer.scheduler.load_state_dict(saved["scheduler"])
    trainer.version = int(saved["version"])
    trainer.optimizer_steps = int(saved["optimizer_steps"])
    # Same number of ranks: each gets its own RNG back; otherwise rank 0's seeds them all.
    mine = rng[trainer.dist.rank] if len(rng) == trainer.dist.world_size else rng[0]
    torch.set_rng_state(mine["cpu"])
    if "cuda" in mine and trainer.dist.device.type == "cuda":
        torch.cuda.set_rng_state(mine["cuda"], trainer.dist.device)
    return loop_state


def find_checkpoint(path: str | Path, step: int | None = None) -> Path:
    """The checkpoint folder ``path`` names: itself, or a run's (step ``step``, else its newest)."""
    path = Path(path)
    if (path / _STATE).exists() and (path / "trainer.pt").exists():
        return path
    found = list_checkpoints(path)
    if not found:
        raise ConfigError(f"{str(path)!r} is neither a checkpoint folder (with trainer.pt) nor the --out "
                          f"folder of an `agentgym train --backend fsdp` run with checkpoints in it.")
    if step is None:
        return found[-1]
    wanted = path / CHECKPOINT_DIR / f"step-{step:06d}"
    if wanted not in found:
        steps = ", ".join(str(int(p.name.removeprefix("step-"))) for p in found)
        raise ConfigError(f"{str(path)!r} has no checkpoint of step {step}; it has step(s) {steps} "
                          "(only the newest -s keep_checkpoints are kept).")
    return wanted


def export_checkpoint(folder: str | Path, out: str | Path, *, device: str = "cpu") -> Path:
    """Write a checkpoint's model as a transformers folder (LoRA merged in), loadable by any command.

    The run's ``config.yaml`` (two folders up) says which model the run started
    from; a LoRA checkpoint holds only the adapters, which are merged into it.
    """
    import yaml

    folder = Path(folder)
    path = folder.parent.parent / "config.yaml"
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"Could not read {str(path)!r}, the config of the checkpoint's run, which says "
                          f"what model it started from: {exc}") from exc
    # Only the model matters here: no reference model (it is not saved), no level list to read.
    config = TrainConfig.from_dict({**values, "kl_coef": 0.0, "level_seeds": None})
    trainer = FSDPTrainer(config, device=device)
    load_checkpoint(trainer, folder)
    return trainer.save_pretrained(out)
