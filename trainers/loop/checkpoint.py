"""Resumable checkpoints of a run, whatever its learner and backend: the learner's state, RNG, loop state.

Layout, one folder per saved step::

    OUT/checkpoints/step-000010/
        trainer.pt    the learner's state: full (unsharded) model and optimiser state, scheduler, versions
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
from agentgym.trainers.engines.distributed import Dist
from agentgym.trainers.learners.base import Learner

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


def _rng_state(info: Dist) -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if info.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(info.device)
    return state


def save_checkpoint(learner: Learner, out: str | Path, step: int, loop_state: dict[str, Any],
                    keep: int = 2) -> Path | None:
    """Save everything needed to go on after ``step`` steps. Every rank must call it.

    Returns the folder on rank 0 (None elsewhere).
    """
    info = learner.engine.dist
    state = learner.state()
    rng = [_rng_state(info)]
    if info.sharded:
        rng = [None] * info.world_size
        dist.all_gather_object(rng, _rng_state(info))
    folder = None
    if info.is_main:
        folder = Path(out) / CHECKPOINT_DIR / f"step-{step:06d}"
        staging = folder.with_name(f".staging-{folder.name}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        torch.save({**state, "world_size": info.world_size}, staging / "trainer.pt")
        torch.save(rng, staging / "rng.pt")
        (staging / _STATE).write_text(json.dumps({"step": step, **loop_state}, indent=1), encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
        for old in list_checkpoints(out)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    if info.sharded:
        dist.barrier()
    return folder


def load_checkpoint(learner: Learner, folder: str | Path) -> dict[str, Any]:
    """Restore ``learner`` from ``folder``; returns the loop state saved with it. Every rank calls it."""
    info = learner.engine.dist
    folder = Path(folder)
    try:
        saved = torch.load(folder / "trainer.pt", map_location="cpu", weights_only=True)
        rng = torch.load(folder / "rng.pt", map_location="cpu", weights_only=True)
        loop_state = json.loads((folder / _STATE).read_text(encoding="utf-8"))
    except (OSError, RuntimeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"Could not read the checkpoint {str(folder)!r}: {exc}. Delete it to resume "
                          "from the one before, or start a new run with another --out.") from exc
    learner.load_state(saved)
    # Same number of ranks: each gets its own RNG back; otherwise rank 0's seeds them all.
    mine = rng[info.rank] if len(rng) == info.world_size else rng[0]
    torch.set_rng_state(mine["cpu"])
    if "cuda" in mine and info.device.type == "cuda":
        torch.cuda.set_rng_state(mine["cuda"], info.device)
    return loop_state


def find_checkpoint(path: str | Path, step: int | None = None) -> Path:
    """The checkpoint folder ``path`` names: itself, or a run's (step ``step``, else its newest)."""
    path = Path(path)
    if (path / _STATE).exists() and (path / "trainer.pt").exists():
        return path
    found = list_checkpoints(path)
    if not found:
        raise ConfigError(f"{str(path)!r} is neither a checkpoint folder (with trainer.pt) nor the --out "
                          f"folder of an `agentgym train` run with checkpoints in it.")
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
    from agentgym.trainers.engines.distributed import init_distributed
    from agentgym.trainers.registry import build_engine
    from agentgym.trainers.settings import TrainConfig

    folder = Path(folder)
    path = folder.parent.parent / "config.yaml"
    saved = TrainConfig.from_yaml(path)
    # Only the model matters here: the same backend's engine, no reference model, no level list.
    config = saved.updated({"kl_coef": 0.0, "level_seeds": None, "out": str(Path(out).parent / ".export")})
    engine = build_engine(config, init_distributed(device))
    engine.load_state(torch.load(folder / "trainer.pt", map_location="cpu", weights_only=True))
    return engine.export(out)
