"""``agentgym rollout``: play episodes with a model (or a model-free policy) and record them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agentgym.cli.common import (
    ConcurrencyOption,
    EnvTimeoutOption,
    EpisodeTimeoutOption,
    MaxContextOption,
    MaxTokensOption,
    ADVANCED_PANEL,
    MODEL_PANEL,
    OUTPUT_PANEL,
    PLAY_PANEL,
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
from agentgym.errors import AgentGymError
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policies import NoisyExpert, RandomPolicy
from agentgym.rollout.rows import TrajectoryRow, first_rows
from agentgym.rollout.servers import ServerStats, parse_base_urls

__all__ = ["Player", "PolicyName", "episode_progress", "expand_bare_ray", "playing_with", "print_episode",
           "rollout_command"]


class PolicyName(str, Enum):
    model = "model"
    random = "random"
    solver = "solver"


def rollout_command(
    env_id: Annotated[str, typer.Option("--env", metavar="ENV", help="Env id, e.g. Sokoban-LLM-v0.", rich_help_panel=PLAY_PANEL)],
    policy: Annotated[PolicyName, typer.Option(metavar="WHO", help="model, random or solver (expert).", rich_help_panel=PLAY_PANEL)] = PolicyName.model,
    episodes: Annotated[int, typer.Option(metavar="N", help="Episodes in all.", rich_help_panel=PLAY_PANEL)] = 8,
    group_size: Annotated[int, typer.Option(metavar="N", help="Episodes per seed (a GRPO group).", rich_help_panel=PLAY_PANEL)] = 1,
    seed: Annotated[int, typer.Option(metavar="N", help="Seed of group 0; group g plays seed+g.", rich_help_panel=PLAY_PANEL)] = 0,
    max_turns: MaxTurnsOption = None,
    turn_budget: TurnBudgetOption = None,
    env_kwarg: PlayEnvKwargOption = [],  # noqa: B006
    model: Annotated[str, typer.Option(metavar="MODEL", help="A name from agentgym list-models (tiny, smollm2-135m), a folder or a hub id.", rich_help_panel=MODEL_PANEL)] = "tiny",
    base_url: Annotated[list[str] | None, typer.Option(metavar="URL", help="OpenAI-compatible server(s), e.g. http://host:8000/v1.", rich_help_panel=MODEL_PANEL)] = None,
    api_key: Annotated[str, typer.Option(metavar="KEY", help="API key for --base-url.", rich_help_panel=MODEL_PANEL)] = "EMPTY",
    temperature: Annotated[float, typer.Option(metavar="T", help="Sampling temperature.", rich_help_panel=MODEL_PANEL)] = 1.0,
    max_tokens: MaxTokensOption = 64,
    max_context: MaxContextOption = 4096,
    sampling_seed: Annotated[int | None, typer.Option(min=0, metavar="N", help="Seed the sampler (reruns sample the same).", rich_help_panel=MODEL_PANEL)] = None,
    chat_mode: Annotated[bool, typer.Option("--chat-mode", help="Chat API (servers without token ids).", rich_help_panel=MODEL_PANEL)] = False,
    out: Annotated[Path | None, typer.Option(metavar="FILE", help="Write the rows to this Parquet file.", rich_help_panel=OUTPUT_PANEL)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Play only the episodes --out lacks.", rich_help_panel=OUTPUT_PANEL)] = False,
    show: Annotated[int, typer.Option(metavar="N", help="Print N finished episodes in full.", rich_help_panel=OUTPUT_PANEL)] = 3,
    concurrency: ConcurrencyOption = 32,
    episode_timeout: EpisodeTimeoutOption = RolloutConfig.episode_timeout,
    turn_timeout: TurnTimeoutOption = RolloutConfig.turn_timeout,
    env_timeout: EnvTimeoutOption = RolloutConfig.env_timeout,
    expert_noise: Annotated[float, typer.Option(metavar="P", help="Solver: chance of a random, masked move.", rich_help_panel=ADVANCED_PANEL)] = 0.0,
    dagger: Annotated[float | None, typer.Option(metavar="P", help="The expert corrects the model (DAgger).", rich_help_panel=ADVANCED_PANEL)] = None,
    ray: Annotated[str | None, typer.Option(metavar="[ADDR]", help="Ray: local, auto or ray://HOST:PORT.", rich_help_panel=ADVANCED_PANEL)] = None,
    ray_actors: Annotated[int | None, typer.Option(metavar="N", help="Ray actors (default: one per free CPU).", rich_help_panel=ADVANCED_PANEL)] = None,
) -> None:
    """Play episodes, record them token by token, print a summary."""
    if resume and out is None:
        raise fail("--resume needs --out (the file to continue).")
    if expert_noise and policy is not PolicyName.solver:
        raise fail(f"--expert-noise perturbs the expert: it needs --policy solver, not --policy {policy.value}.")
    if dagger is not None and policy is not PolicyName.model:
        raise fail(f"--dagger has the expert correct a model: it needs --policy model, not --policy {policy.value} "
                   "(for demonstrations with mistakes in them from the expert alone, use --expert-noise).")
    if dagger is not None and ray is not None:
        raise fail("--dagger runs on one machine: drop --ray.")
    try:
        config = RolloutConfig(
            env_id=env_id, env_kwargs=parse_env_kwargs(env_kwarg), episodes=episodes, group_size=group_size,
            concurrency=concurrency, max_turns=max_turns, turn_budget=turn_budget, max_context_tokens=max_context,
            max_tokens_per_turn=max_tokens, seed=seed, chat_mode=chat_mode, episode_timeout=episode_timeout,
            turn_timeout=turn_timeout, env_timeout=env_timeout,
            sampling_seed=sampling_seed,
        )
        urls = tuple(parse_base_urls(base_url)) if base_url else None
        if policy is PolicyName.model:
            check_base_urls(urls, model, api_key)  # a dead server fails now, not once per episode
        player = Player(policy, model, urls, api_key, temperature, expert_noise)
        teacher = _teacher(dagger, config)  # before the server starts: an env without an expert fails fast
        rows: list[TrajectoryRow] = []
        try:
            with _ray_session(ray, ray_actors) as ray_options:
                asyncio.run(_run(config, player, out, resume, show, ray_options, teacher, rows))
        except KeyboardInterrupt:
            raise _interrupted(config, out, resume, rows) from None
    except AgentGymError as exc:
        raise fail(str(exc)) from exc
    console.print(_summary(env_id, model if policy is PolicyName.model else policy.value, rows))
    if out is not None:
        console.print(rows_written(out, rows), soft_wrap=True)  # a path the terminal wraps, unbroken
    failed = all_failed(rows)
    if failed is not None:
        raise failed


def _interrupted(config: RolloutConfig, out: Path | None, resume: bool, rows: list[TrajectoryRow]) -> typer.Exit:
    """Ctrl-C: say what was kept and how to go on; exit 130 (the shell's code for SIGINT)."""
    if out is None:
        message = (f"Interrupted: {len(first_rows(rows))}/{config.episodes} episodes played, none saved "
                   "(--out FILE keeps them as they finish, and --resume then plays the rest).")
    else:
        from agentgym.rollout.storage import done_episodes

        saved = len(done_episodes(out) & set(config.episode_keys()))
        again = "rerun the same command" if resume else "rerun the same command with --resume"
        message = f"{saved}/{config.episodes} episodes saved to {out}; {again} to play the rest."
    console.print(f"[yellow]{escape(message)}[/]")
    return typer.Exit(code=130)


@dataclass(frozen=True)
class Player:
    """Who plays, as the flags say."""

    policy: PolicyName
    model: str
    #: the servers given with --base-url (None: start the built-in one)
    base_url: tuple[str, ...] | None
    api_key: str
    temperature: float
    #: the chance of a random (unlearned) move per turn of the expert (--policy solver)
    expert_noise: float = 0.0


async def _run(config: RolloutConfig, player: Player, out: Path | None, resume: bool,
               show: int, ray_options: Any = None, teacher: Any = None,
               rows: list[TrajectoryRow] | None = None) -> list[TrajectoryRow]:
    """Play the episodes; their rows go to ``rows`` as they finish (kept when interrupted)."""
    from agentgym.rollout.storage import RolloutWriter, done_episodes

    skip = done_episodes(out) if resume and out is not None else set()
    sampled = player.policy is PolicyName.model
    run = {**config.identity(), "--policy": player.policy.value, "--model": player.model,
           "--temperature": player.temperature if sampled else None, "--expert-noise": player.expert_noise,
           "--dagger": getattr(teacher, "model_share", None)}  # what decides the episodes: --resume checks it
    writer = RolloutWriter(out, resume=resume, run=run) if out is not None else None
    if resume and out is not None:
        held = len(skip & set(config.episode_keys()))
        console.print(f"{escape(str(out))} holds {held} of {config.episodes} episodes; "
                      f"playing the other {config.episodes - held}.")
    rows = [] if rows is None else rows
    async with playing_with(player, config, record=out is not None) as (policy, renderer):
        with episode_progress("rollout", config.episodes, len(skip)) as report:
            shown = 0

            def finished(episode_rows: list[TrajectoryRow]) -> None:
                nonlocal shown
                rows.extend(episode_rows)
                if writer is not None:
                    writer.add(episode_rows)
                report(episode_rows)
                if shown < show:
                    shown += 1
                    print_episode(episode_rows[0])

            try:
                if ray_options is not None:
                    from agentgym.rollout.ray_rollout import run_on_ray

                    await run_on_ray(config, _ray_spec(player, policy, renderer), ray_options,
                                     on_episode=finished, skip=skip)
                else:
                    manager = EnvManager(config, policy, renderer=renderer, on_episode=finished,
                                         teacher=teacher)
                    await manager.run(skip=skip)
            finally:
                if writer is not None:
                    writer.close()
        # Several servers: how the requests spread (under --ray the actors' own policies sent them).
        stats = policy.server_stats() if hasattr(policy, "server_stats") else []
        if len(stats) > 1 and any(server.requests for server in stats):
            console.print(_server_table(stats))
    return rows


@contextlib.asynccontextmanager
async def playing_with(player: Player, config: RolloutConfig, *, record: bool) -> AsyncIterator[tuple[Any, Any]]:
    """The policy and the renderer, for as long as the rollout runs.

    Starts the built-in server when no --base-url is given. A model-free
    policy records token ids (in --model's tokenizer) only when the rows are
    written, so a quick random rollout needs no model at all.
    """
    if player.policy is not PolicyName.model:
        yield _model_free(player, config), (_renderer(player.model) if record else None)
        return
    from agentgym.rollout.policy import OpenAIPolicy, SamplingConfig
    from agentgym.serve.launch import BuiltinServer

    renderer = _renderer(player.model)
    sampling = SamplingConfig(temperature=player.temperature, max_tokens=config.max_tokens_per_turn)
    if player.base_url is None:
        console.print(f"Starting the built-in server with model {escape(player.model)} ...")
    server = BuiltinServer(player.model) if player.base_url is None else contextlib.nullcontext()
    with server as running:
        base_url, name, key = ((running.base_url, running.model_name, running.api_key) if running is not None
                               else (player.base_url, player.model, player.api_key))
        if running is None:  # a server of the user's: it must sample in the tokenizer the rows are rendered in
            _check_tokenizers(player, renderer)
        async with OpenAIPolicy(base_url, name, api_key=key, sampling=sampling, timeout=config.turn_seconds,
                                max_connections=config.concurrency) as policy:
            yield policy, renderer


def _check_tokenizers(player: Player, renderer: Any) -> None:
    """A :class:`~agentgym.errors.TokenizerMismatchError` when a --base-url server tokenizes otherwise than
    --model's tokenizer (servers without ``/tokenize`` are not checked)."""
    from agentgym.rollout.tokenizers import check_server_tokenizer

    for base_url in player.base_url or ():
        check_server_tokenizer(base_url, renderer.tokenizer, model_name=player.model, api_key=player.api_key,
                               model=player.model)


def _model_free(player: Player, config: RolloutConfig) -> Any:
    """The random policy, or the env's expert, noisy if asked (ConfigError for an env that has none)."""
    if player.policy is PolicyName.solver:
        from agentgym.rollout.experts import expert_policy

        expert = expert_policy(config.env_id)
        return NoisyExpert(expert, player.expert_noise, seed=config.seed) if player.expert_noise else expert
    return RandomPolicy(seed=config.seed)


def _teacher(dagger: float | None, config: RolloutConfig) -> Any:
    """The expert that corrects the model under --dagger (None without it; ConfigError for an
    env that has no expert)."""
    if dagger is None:
        return None
    from agentgym.rollout.experts import expert_policy
    from agentgym.rollout.policies import ExpertCorrection

    return ExpertCorrection(expert_policy(config.env_id), dagger, seed=config.seed)


def expand_bare_ray(args: list[str]) -> list[str]:
    """``rollout ... --ray`` with no address means ``--ray local``.

    typer parses options itself and cannot give an option an optional value
    (click's ``flag_value`` is ignored), so the command line is completed
    before it: a ``--ray`` that ends the line or is followed by another
    option gets ``local``.
    """
    if "rollout" not in args:
        return args
    expanded = list(args)
    for index in range(len(expanded) - 1, args.index("rollout"), -1):
        following = expanded[index + 1] if index + 1 < len(expanded) else None
        if expanded[index] == "--ray" and (following is None or following.startswith("-")):
            expanded.insert(index + 1, "local")
    return expanded


@contextlib.contextmanager
def _ray_session(address: str | None, actors: int | None) -> Iterator[Any]:
    """Connected to Ray for the run when --ray is given (None otherwise)."""
    if address is None:
        if actors is not None:
            raise fail("--ray-actors needs --ray (e.g. --ray local).")
        yield None
        return
    from agentgym.rollout.ray_rollout import RayOptions, ray_session

    with ray_session(RayOptions(address=address, actors=actors)) as options:
        yield options


def _ray_spec(player: Player, policy: Any, renderer: Any) -> Any:
    """What each Ray actor needs to build the policy the flags chose (the server the
    CLI started included: loopback, so the actors run on this machine)."""
    from agentgym.rollout.policy import OpenAIPolicy
    from agentgym.rollout.ray_rollout import PolicySpec

    if isinstance(policy, OpenAIPolicy):
        return PolicySpec(base_urls=tuple(policy.base_urls), model=policy.model, tokenizer=player.model,
                          api_key=policy.api_key, sampling=policy.sampling)
    return PolicySpec(model_free=policy, tokenizer=player.model if renderer is not None else None)


def _renderer(model: str) -> Any:
    from agentgym.rollout.chat import ChatRenderer

    return ChatRenderer.for_model(model)


@contextlib.contextmanager
def episode_progress(label: str, total: int, already: int = 0) -> Iterator[Callable[[list[TrajectoryRow]], None]]:
    """Episodes done, mean reward, success rate, sampled tokens/s; yields the per-episode report.

    A live bar in a terminal. Written to a file or a pipe there is no live
    display, so a plain line is printed every tenth of the episodes instead:
    an hour-long rollout or eval in a log file still shows how it goes.
    """
    progress = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), console=console,
                        transient=False)
    stats = {"episodes": 0, "reward": 0.0, "success": 0, "tokens": 0, "start": time.monotonic()}
    task = progress.add_task(label, total=total, completed=already, stats="")
    every = max(total // 10, 1)

    def report(rows: list[TrajectoryRow]) -> None:
        stats["episodes"] += 1
        stats["reward"] += rows[0].reward
        stats["success"] += rows[0].success
        stats["tokens"] += sum(sum(row.completion_mask) for row in rows)
        count, elapsed = stats["episodes"], max(time.monotonic() - stats["start"], 1e-9)
        text = f"reward {stats['reward'] / count:.2f}  success {stats['success'] / count:.0%}"
        if stats["tokens"]:  # a model-free policy samples no tokens
            text += f"  {stats['tokens'] / elapsed:,.0f} tok/s"
        progress.update(task, advance=1, stats=text)
        done = already + count
        if not console.is_terminal and (done % every == 0 or done == total):
            console.print(f"{label} {done}/{total}  {text}  {elapsed:.0f} s")

    with progress:
        yield report


def print_episode(row: TrajectoryRow) -> None:
    """An episode as a readable conversation."""
    console.rule(f"{escape(row.episode_id)}  reward {row.reward:g}  "
                 f"{'solved' if row.success else 'not solved'}  ({row.stop_reason})")
    for message in row.messages[1:]:  # the system prompt is the env's instructions
        style = "bold cyan" if message.role == "assistant" else "default"
        console.print(f"[{style}]{message.role}>[/] {escape(message.content)}")
    if row.error:
        console.print(f"[red]error: {escape(row.error)}[/]")


def _server_table(stats: list[ServerStats]) -> Table:
    """Requests per server, when a rollout used several."""
    table = Table(title="servers")
    table.add_column("server", no_wrap=True)
    for column in ("requests", "failed", "moved in"):  # moved in: episodes taken over from a failed server
        table.add_column(column, justify="right", min_width=len(column), no_wrap=True)
    table.add_column("last error")
    for server in stats:
        error = server.last_error if len(server.last_error) <= 60 else server.last_error[:59] + "…"
        table.add_row(escape(server.base_url), str(server.requests), str(server.failures),
                      str(server.moved_in), escape(error))
    return table


def _summary(env_id: str, policy: str, rows: list[TrajectoryRow]) -> Table:
    episodes = first_rows(rows)
    count = max(len(episodes), 1)
    turns = sum(row.num_turns for row in episodes)
    table = Table(title=f"{env_id}, {policy}")
    for column in SUMMARY_COLUMNS:
        table.add_column(column, justify="right")
    table.add_row(
        str(len(episodes)),
        f"{sum(row.success for row in episodes) / count:.1%}",
        f"{sum(row.reward for row in episodes) / count:.3f}",
        f"{turns / count:.1f}",
        f"{sum(row.invalid_actions for row in episodes) / max(turns, 1):.1%}",
        str(sum(row.error is not None for row in episodes)),
    )
    return table
