"""Where a run's numbers go: the console (a rich progress bar), JSONL, TensorBoard, W&B.

``metrics.jsonl`` gets one JSON object per step (``{"step": 3, "success":
0.5, "reward": ..., ...}``) and is what ``agentgym report`` reads;
``samples.jsonl`` keeps a few episodes per step as conversations, and
``episodes.jsonl`` one line per episode played (its id, seed, reward, success
and turns: a run and its control pair episode by episode); ``warmup.jsonl``
the format warm-up's loss at each of its steps. TensorBoard
and W&B are optional imports, used only when enabled, and a missing package
is a :class:`~agentgym.errors.MissingDependencyError` naming what to install.
Every file, TensorBoard and W&B number the steps from 1, as the console does
(``step 40/40`` is ``"step": 40``); the loop counts from 0 and gives that index.
On resume, lines of steps after the resumed step are dropped first (a
crash may have logged steps after the last checkpoint).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from agentgym.errors import MissingDependencyError
from agentgym.rollout.rows import TrajectoryRow, first_rows
from agentgym.trainers.settings import TrainConfig

__all__ = ["EPISODES_FILE", "METRICS_FILE", "SAMPLES_FILE", "WARMUP_FILE", "MetricsLogger", "read_jsonl",
           "step_line"]

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
EPISODES_FILE = "episodes.jsonl"
WARMUP_FILE = "warmup.jsonl"

#: what the console line and the progress bar show, in order (when present)
_SHOWN = (("reward", "reward {:.3f}"), ("success", "success {:.0%}"), ("loss", "loss {:.4f}"),
          ("kl", "kl {:.4f}"), ("entropy", "entropy {:.2f}"), ("train_tokens_per_s", "{:,.0f} tok/s"))


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every JSON object of a JSONL file (a torn last line, from a crash, is skipped)."""
    records = []
    file = Path(path)
    if not file.exists():
        return records
    for line in file.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _truncate(path: Path, steps_done: int) -> None:
    """Keep only the records of steps 1 to ``steps_done`` (the steps a resumed run does not play again)."""
    if path.exists():
        kept = [r for r in read_jsonl(path) if int(r.get("step", 0)) <= steps_done]
        path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")


def step_line(step: int, total: int, metrics: dict[str, float]) -> str:
    """One readable line of a step's main numbers."""
    parts = [f"step {step + 1}/{total}"]
    parts += [fmt.format(metrics[name]) for name, fmt in _SHOWN if name in metrics]
    timing = [f"{name.removeprefix('time/')} {metrics[name]:.1f}s" for name in
              ("time/rollout", "time/waiting", "time/train", "time/sync") if name in metrics]
    return "  ".join(parts + ([f"({', '.join(timing)})"] if timing else []))


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: write null instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLogger:
    """Logs each step to every enabled sink. Only rank 0 should make one with ``enabled=True``.

    Args:
        out: the run folder.
        config: the run's config (for TensorBoard/W&B and the progress total).
        start_step: the steps done before this process (after a resume; the loop's first index).
        console: where the progress bar and step lines go (None: quiet).
    """

    def __init__(self, out: Path, config: TrainConfig, *, start_step: int = 0, enabled: bool = True,
                 console: Console | None = None) -> None:
        self.out = out
        self.config = config
        self.enabled = enabled
        self.console = console
        self._tensorboard: Any = None
        self._wandb: Any = None
        self._progress: Progress | None = None
        if not enabled:
            return
        out.mkdir(parents=True, exist_ok=True)
        _truncate(out / METRICS_FILE, start_step)
        _truncate(out / SAMPLES_FILE, start_step)
        _truncate(out / EPISODES_FILE, start_step)
        if config.run.tensorboard:
            self._tensorboard = self._open_tensorboard()
        if config.run.wandb:
            self._wandb = self._open_wandb()
        if console is not None:
            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[stats]}"), TimeElapsedColumn(),
                                      TimeRemainingColumn(), console=console, transient=False)
            self._task = self._progress.add_task("train", total=config.run.steps, completed=start_step, stats="")
            self._progress.start()

    def _open_tensorboard(self) -> Any:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise MissingDependencyError(
                f"--tensorboard needs the tensorboard package: "
                f"{MissingDependencyError.install_hint('tensorboard', 'tensorboard')}.") from exc
        return SummaryWriter(log_dir=str(self.out / "tensorboard"))

    def _open_wandb(self) -> Any:
        try:
            import wandb
        except ImportError as exc:
            raise MissingDependencyError(
                f"--wandb needs the wandb package: {MissingDependencyError.install_hint('wandb', 'wandb')}.") from exc
        # One run id per folder, so a resumed run continues the same W&B run.
        id_file = self.out / "wandb_id"
        run_id = id_file.read_text().strip() if id_file.exists() else wandb.util.generate_id()
        id_file.write_text(run_id)
        return wandb.init(project=self.config.run.wandb_project, id=run_id, resume="allow",
                          dir=str(self.out), config=self.config.model_dump(mode="json"))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record the metrics of the loop's step ``step`` (its index: step ``step + 1``) everywhere, and
        advance the bar."""
        if not self.enabled:
            return
        record = {"step": step + 1, **{k: _finite(v) for k, v in metrics.items()}}
        with (self.out / METRICS_FILE).open("a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")
        numeric = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        if self._tensorboard is not None:
            for name, value in numeric.items():
                self._tensorboard.add_scalar(name, value, step + 1)
            self._tensorboard.flush()
        if self._wandb is not None:
            self._wandb.log(numeric, step=step + 1)
        if self._progress is not None:
            stats = "  ".join(fmt.format(metrics[n]) for n, fmt in _SHOWN[:3] if n in metrics)
            self._progress.update(self._task, completed=step + 1, stats=stats)
            self._progress.console.print(step_line(step, self.config.run.steps, metrics))

    def stage(self, label: str) -> None:
        """What the run is doing before its steps (starting the server, the warm-up): the bar's label,
        "train" again once the steps begin."""
        if self._progress is not None:
            self._progress.update(self._task, description=label)

    def note(self, message: str) -> None:
        """A line of text for the reader (above the bar)."""
        if self.enabled and self.console is not None:
            (self._progress.console if self._progress else self.console).print(message)

    def log_warmup(self, losses: Sequence[float]) -> None:
        """The format warm-up's loss at each of its steps (``agentgym report`` draws the curve); a run
        that warms up again (resumed before its first checkpoint) writes the file afresh."""
        if self.enabled:
            (self.out / WARMUP_FILE).write_text(
                "".join(json.dumps({"step": i + 1, "loss": _finite(loss)}) + "\n" for i, loss in enumerate(losses)),
                encoding="utf-8")

    def log_samples(self, step: int, rows: Sequence[TrajectoryRow]) -> None:
        """Keep the first ``sample_episodes`` episodes of the step as conversations."""
        if not self.enabled or self.config.run.sample_episodes == 0:
            return
        episodes = first_rows(rows)[: self.config.run.sample_episodes]
        with (self.out / SAMPLES_FILE).open("a", encoding="utf-8") as file:
            for row in episodes:
                file.write(json.dumps({
                    "step": step + 1, "episode_id": row.episode_id, "reward": row.reward, "success": row.success,
                    "stop_reason": row.stop_reason, "messages": [m.model_dump() for m in row.messages],
                }) + "\n")

    def log_episodes(self, step: int, rows: Sequence[TrajectoryRow]) -> None:
        """One line per episode of the step. Episode ids name the level and the place in its group,
        which with ``--seed`` fixes the sampling seed too, so a run and its ``--lr 0`` control play
        the same episode under the same id: ``scripts/compare_runs.py`` pairs them by it."""
        if not self.enabled or not self.config.run.log_episodes:
            return
        with (self.out / EPISODES_FILE).open("a", encoding="utf-8") as file:
            for row in first_rows(rows):
                file.write(json.dumps({
                    "step": step + 1, "episode_id": row.episode_id, "seed": row.seed, "reward": _finite(row.reward),
                    "success": row.success, "turns": row.num_turns, "stop_reason": row.stop_reason,
                }) + "\n")

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
