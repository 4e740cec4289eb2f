"""``agentgym eval``: how well a model (or the random / expert policy) plays levels it never saw.

Plays ``--episodes`` episodes on seeds ``--seed-offset``, ``--seed-offset + 1``,
... (training and demonstrations use seeds from 0, so an offset of 100000
keeps them apart), greedily by default, and prints success rate, mean turns
and the invalid-action rate. With ``--out RUN_DIR``, or when ``--model`` is
the ``final`` (or a checkpoint) folder of an ``agentgym train`` run, the result
is added to ``RUN_DIR/eval.json``, which ``agentgym report`` shows. With
``--episodes-out FILE`` every episode is also written to Parquet, in the rows
of ``agentgym rollout`` (``agentgym view FILE`` replays them; two models'
files compare level by level). ``--failed-seeds-out FILE`` writes the seeds of the
levels the policy failed, one per line, for ``agentgym train -s level_seeds=FILE``
(RL on the levels the model still fails; use seeds apart from the eval's)::

    agentgym eval --env Sokoban-LLM-v0 --model runs/sft/final --episodes 200 --seed-offset 100000
    agentgym eval --env Sokoban-LLM-v0 --policy solver -k dim_room=[7,7] -k num_boxes=2
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from agentgym.cli.common import (
    MODEL_PANEL,
    OUTPUT_PANEL,
    PLAY_PANEL,
    ConcurrencyOption,
    EnvTimeoutOption,
    EpisodeTimeoutOption,
    MaxContextOption,
    MaxTokensOption,
    MaxTurnsOption,
    PlayEnvKwargOption,
    SUMMARY_COLUMNS,
    TurnBudgetOption,
    TurnTimeoutOption,
    all_failed,
    check_base_urls,
    console,
    fail,
    parse_env_kwargs,
    rows_written,
)
from agentgym.cli.rollout_cmd import Player, PolicyName, episode_progress, playing_with
from agentgym.errors import AgentGymError
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.rows import TrajectoryRow, first_rows
from agentgym.rollout.seeds import write_seeds
from agentgym.rollout.servers import parse_base_urls

__all__ = ["EVAL_FILE", "EvalResult", "add_result", "eval_command", "result_table", "run_dir_of",
           "summarize"]

EVAL_FILE = "eval.json"  # what `agentgym report` reads (agentgym.trainers.loop.report.EVAL_FILE)


@dataclass
class EvalResult:
    """What one evaluation measured (one entry of ``eval.json``)."""

    env_id: str
    env_kwargs: dict[str, Any]
    policy: str
    episodes: int
    seed_offset: int
    temperature: float
    success_rate: float
    mean_turns: float
    invalid_action_rate: float
    mean_reward: float
    failed: int
    seconds: float = 0.0

    def same_setting(self, other: dict[str, Any]) -> bool:
        """Whether ``other`` (an eval.json entry) measured the same thing (it is then replaced)."""
        keys = ("env_id", "env_kwargs", "policy", "episodes", "seed_offset", "temperature")
        return all(other.get(key) == getattr(self, key) for key in keys)


def summarize(rows: list[TrajectoryRow], **setting: Any) -> EvalResult:
    """The :class:`EvalResult` of an evaluation's rows (one per episode counts, its first row).

    The invalid-action rate is per turn: invalid actions over all turns played.
    """
    episodes = first_rows(rows)
    count = max(len(episodes), 1)
    turns = sum(row.num_turns for row in episodes)
    return EvalResult(
        **setting, episodes=len(episodes),
        success_rate=sum(row.success for row in episodes) / count,
        mean_turns=turns / count,
        invalid_action_rate=sum(row.invalid_actions for row in episodes) / max(turns, 1),
        mean_reward=sum(row.reward for row in episodes) / count,
        failed=sum(row.error is not None for row in episodes),
    )


def eval_command(
    env_id: Annotated[str, typer.Option("--env", metavar="ENV", help="Env id, e.g. Sokoban-LLM-v0.", rich_help_panel=PLAY_PANEL)],
    policy: Annotated[PolicyName, typer.Option(metavar="WHO", help="model, random or solver (expert).", rich_help_panel=PLAY_PANEL)] = PolicyName.model,
    episodes: Annotated[int, typer.Option(metavar="N", help="Episodes (one per seed).", rich_help_panel=PLAY_PANEL)] = 200,
    seed_offset: Annotated[int, typer.Option(metavar="N", help="First seed; keep apart from training's.", rich_help_panel=PLAY_PANEL)] = 100_000,
    max_turns: MaxTurnsOption = None,
    turn_budget: TurnBudgetOption = None,
    env_kwarg: PlayEnvKwargOption = [],  # noqa: B006
    model: Annotated[str, typer.Option(metavar="MODEL", help="A name from agentgym list-models (tiny, smollm2-135m), a folder (RUN/final) or a hub id.", rich_help_panel=MODEL_PANEL)] = "tiny",
    base_url: Annotated[list[str] | None, typer.Option(metavar="URL", help="OpenAI-compatible server(s), e.g. http://host:8000/v1.", rich_help_panel=MODEL_PANEL)] = None,
    api_key: Annotated[str, typer.Option(metavar="KEY", help="API key for --base-url.", rich_help_panel=MODEL_PANEL)] = "EMPTY",
    temperature: Annotated[float, typer.Option(metavar="T", help="Sampling temperature (0: greedy).", rich_help_panel=MODEL_PANEL)] = 0.0,
    max_tokens: MaxTokensOption = 32,
    max_context: MaxContextOption = 4096,
    sampling_seed: Annotated[int | None, typer.Option(min=0, metavar="N", help="Seed the sampler (default: --seed-offset).", rich_help_panel=MODEL_PANEL)] = None,
    out: Annotated[Path | None, typer.Option(metavar="RUN_DIR", help="Add the result to RUN_DIR/eval.json.", rich_help_panel=OUTPUT_PANEL)] = None,
    episodes_out: Annotated[Path | None, typer.Option(
        "--episodes-out", metavar="FILE", help="Also write the episodes to Parquet.", rich_help_panel=OUTPUT_PANEL)] = None,
    failed_seeds_out: Annotated[Path | None, typer.Option(
        "--failed-seeds-out", metavar="FILE", help="Write the failed levels' seeds (train -s level_seeds=FILE).", rich_help_panel=OUTPUT_PANEL)] = None,
    concurrency: ConcurrencyOption = 32,
    episode_timeout: EpisodeTimeoutOption = RolloutConfig.episode_timeout,
    turn_timeout: TurnTimeoutOption = RolloutConfig.turn_timeout,
    env_timeout: EnvTimeoutOption = RolloutConfig.env_timeout,
) -> None:
    """Play unseen seeds and print success rate, mean turns and invalid-action rate."""
    for path, flag in ((episodes_out, "--episodes-out"), (failed_seeds_out, "--failed-seeds-out")):
        if path is not None and path.exists():  # never overwrite what an earlier eval wrote
            raise fail(f"{path} already exists: choose another {flag}, or remove it.")
    try:
        config = RolloutConfig(
            env_id=env_id, env_kwargs=parse_env_kwargs(env_kwarg), episodes=episodes, group_size=1,
            concurrency=concurrency, max_turns=max_turns, turn_budget=turn_budget, max_context_tokens=max_context,
            max_tokens_per_turn=max_tokens, seed=seed_offset,
            sampling_seed=seed_offset if sampling_seed is None else sampling_seed,
            episode_timeout=episode_timeout,
            turn_timeout=turn_timeout, env_timeout=env_timeout,
        )
        urls = tuple(parse_base_urls(base_url)) if base_url else None
        if policy is PolicyName.model:
            check_base_urls(urls, model, api_key)  # a dead server fails now, not once per episode
        # rollout's player: a model behind --base-url or the built-in server; a model-free policy keeps no ids
        player = Player(policy, model, base_url=urls, api_key=api_key, temperature=temperature)
        started = time.monotonic()
        rows = asyncio.run(_play(config, player, episodes_out))
    except AgentGymError as exc:
        raise fail(str(exc)) from exc
    who = model if policy is PolicyName.model else policy.value
    result = summarize(rows, env_id=env_id, env_kwargs=config.env_kwargs, policy=who,
                       seed_offset=seed_offset, temperature=temperature)
    result.seconds = round(time.monotonic() - started, 1)
    console.print(result_table(result))
    if episodes_out is not None:
        console.print(rows_written(episodes_out, rows), soft_wrap=True)  # a path the terminal wraps, unbroken
    if failed_seeds_out is not None:
        _write_failed_seeds(failed_seeds_out, rows, who)
    if result.failed:
        console.print(f"[yellow]{result.failed} episode(s) stopped with an error and count as failures "
                      f"({escape(_errors(rows))}): the success rate measures the machine as well as the policy. "
                      "On a busy machine, rerun with a larger --episode-timeout or a lower --concurrency.[/yellow]")
    run_dir = out if out is not None else (run_dir_of(model) if policy is PolicyName.model else None)
    if run_dir is not None:
        path = add_result(run_dir, result)
        console.print(f"Result added to {escape(str(path))} (agentgym report {escape(str(run_dir))} shows it).")
    failed = all_failed(rows)
    if failed is not None:
        raise failed


def _write_failed_seeds(path: Path, rows: list[TrajectoryRow], who: str) -> None:
    """The seeds of the episodes that ended unsolved; an episode stopped by an error (a timeout,
    the server) is left out: it says nothing about the level."""
    seeds = sorted({row.seed for row in first_rows(rows) if not row.success and row.error is None})
    count = write_seeds(path, seeds, comment=f"levels {who} failed (agentgym eval --failed-seeds-out)")
    console.print(f"{count} failed level(s) written to {escape(str(path))}.")


def _errors(rows: list[TrajectoryRow]) -> str:
    """The errors of the failed episodes, most common first, with their counts."""
    counts = Counter(row.error for row in first_rows(rows) if row.error is not None)
    return "; ".join(f"{count} x {error}" for error, count in counts.most_common(3))


async def _play(config: RolloutConfig, player: Player, episodes_out: Path | None) -> list[TrajectoryRow]:
    from agentgym.rollout.storage import RolloutWriter  # pyarrow: only when asked, keeps the CLI quick to start

    writer = RolloutWriter(episodes_out) if episodes_out is not None else None
    async with playing_with(player, config, record=False) as (playing, renderer):
        with episode_progress("eval", config.episodes) as report, writer or contextlib.nullcontext():

            def finished(rows: list[TrajectoryRow]) -> None:
                report(rows)
                if writer is not None:
                    writer.add(rows)  # as they finish: an interrupted eval keeps what it played

            manager = EnvManager(config, playing, renderer=renderer, on_episode=finished)
            return await manager.run()


def run_dir_of(model: str) -> Path | None:
    """The training run a model folder belongs to (``RUN/final``, ``RUN/checkpoints/...``), if any.

    A run folder is recognised by its ``config.yaml`` and ``metrics.jsonl``.
    """
    folder = Path(model)
    if not folder.is_dir():
        return None
    for parent in list(folder.resolve().parents)[:3]:
        if (parent / "config.yaml").is_file() and (parent / "metrics.jsonl").is_file():
            return parent
    return None


def add_result(run_dir: Path, result: EvalResult) -> Path:
    """Add ``result`` to ``run_dir/eval.json`` (replacing an entry with the same setting)."""
    path = Path(run_dir) / EVAL_FILE
    entries: list[dict[str, Any]] = []
    if path.is_file():
        with contextlib.suppress(json.JSONDecodeError, OSError):  # a broken file is rewritten
            loaded = json.loads(path.read_text(encoding="utf-8"))
            entries = [e for e in loaded.get("evals", []) if isinstance(e, dict)] if isinstance(loaded, dict) else []
    entries = [entry for entry in entries if not result.same_setting(entry)] + [asdict(result)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"evals": entries}, indent=1), encoding="utf-8")
    return path


def result_table(result: EvalResult) -> Table:
    """The result as a rich table."""
    kwargs = ", ".join(f"{key}={value}" for key, value in result.env_kwargs.items())
    table = Table(title=f"{result.env_id}{f' ({kwargs})' if kwargs else ''}: {result.policy}, "
                        f"seeds {result.seed_offset}..{result.seed_offset + result.episodes - 1}")
    for column in SUMMARY_COLUMNS:
        table.add_column(column, justify="right")
    table.add_row(str(result.episodes), f"{result.success_rate:.1%}", f"{result.mean_reward:.3f}",
                  f"{result.mean_turns:.1f}", f"{result.invalid_action_rate:.1%}", str(result.failed))
    return table
