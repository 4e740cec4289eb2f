"""Rollouts on Ray: env groups spread over actors, rows streamed back to the driver.

One event loop drives about a thousand turns a second (the manager costs ~1 ms
of CPU a turn, ``benchmarks/bench_rollout.py``); past that, more processes are
the only way up. :func:`run_on_ray` splits the episodes of a
:class:`~agentgym.rollout.manager.RolloutConfig` by group over N Ray actors.
Each actor is an async actor holding its own
:class:`~agentgym.rollout.manager.EnvManager`, policy client and renderer,
built inside the actor from picklable settings (:class:`PolicySpec`), and
streams each episode's rows back as it ends (a Ray streaming generator). The
driver hands them to ``on_episode``, the same callback a local run uses (the
CLI's Parquet writer and progress bar), so a crash loses only the episodes in
flight and ``--resume`` works as before: keys already written are skipped.

The same code runs on one machine (``address="local"`` starts a private Ray
instance) and on a cluster (``ray start`` on every node, then ``address="auto"``
or ``"ray://head:10001"``). Workers must import ``agentgym``: install it on
every node, or ship it with a ``runtime_env`` (see ``docs/scaling.md``).

    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=256, group_size=8)
    spec = PolicySpec(base_urls=("http://10.0.0.5:8000/v1",), model="Qwen/Qwen3-8B",
                      tokenizer="Qwen/Qwen3-8B")
    with ray_session(RayOptions(address="auto")) as options:
        asyncio.run(run_on_ray(config, spec, options, on_episode=writer.add))
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import urlsplit

from agentgym.core import check_number
from agentgym.errors import ConfigError, MissingDependencyError, RolloutWorkerError
from agentgym.net import is_loopback
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policies import Policy
from agentgym.rollout.policy import SamplingConfig
from agentgym.rollout.rows import TrajectoryRow

__all__ = ["PolicySpec", "RayOptions", "RolloutActors", "default_actor_count", "import_ray", "ray_session",
           "run_on_ray", "split_by_group"]

_INSTALL = MissingDependencyError.install_hint("ray", "ray")


@dataclass(frozen=True)
class PolicySpec:
    """How each actor builds its policy and renderer: settings, not live objects.

    A live client holds sockets and an event loop, which cannot cross to
    another process; these fields can.
    """

    #: OpenAI-compatible servers (ending in /v1); each actor's client spreads over all of them
    base_urls: tuple[str, ...] = ()
    #: model name sent in requests
    model: str = "tiny"
    #: tokenizer of the rows' token ids: 'tiny', a folder or a hub id (None: no token ids,
    #: only for a model-free policy)
    tokenizer: str | None = "tiny"
    api_key: str = "EMPTY"
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    #: a model-free policy (random, scripted, an expert) to play instead of a model; pickled
    #: into every actor
    model_free: Policy | None = None

    def __post_init__(self) -> None:
        if self.model_free is None and not self.base_urls:
            raise ConfigError("PolicySpec needs base_urls (the model servers) or a model_free policy.")
        if self.model_free is None and self.tokenizer is None:
            raise ConfigError("A model policy needs a tokenizer to record token ids: set PolicySpec.tokenizer.")

    def loopback_only(self) -> bool:
        """True when every server is on 127.0.0.1: actors must then run on this node."""
        return bool(self.base_urls) and all(is_loopback(urlsplit(url).hostname or "") for url in self.base_urls)


@dataclass
class RayOptions:
    """Where and how wide to run."""

    #: 'local' (a private Ray instance on this machine), 'auto' (the cluster `ray start`
    #: made), or a cluster address ('ray://head:10001', 'head:6379')
    address: str = "local"
    #: actors (None: one per free CPU of the cluster, at most one per group)
    actors: int | None = None
    #: CPUs Ray reserves for each actor
    cpus_per_actor: float = 1.0
    #: Ray runtime_env of the job, e.g. {"pip": ["agentgym[rollout] @ file:///shared/agentgym.whl"]}
    #: on a cluster whose nodes lack agentgym (a working_dir alone does not do: the package
    #: maps envs/, sandbox/, trainers/ into its namespace, which needs an install)
    runtime_env: dict[str, Any] | None = None
    #: CPUs of a local instance (None: all of this machine's)
    local_cpus: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.address, str) or not self.address.strip():
            raise ConfigError(f"--ray takes an address ('local', 'auto', 'ray://HOST:PORT'), got {self.address!r}.")
        if self.actors is not None:
            check_number("ray actors", self.actors, minimum=1)
        check_number("cpus_per_actor", self.cpus_per_actor, minimum=0.001, integer=False)
        if self.local_cpus is not None:
            check_number("local_cpus", self.local_cpus, minimum=1)


def import_ray() -> Any:
    """The ``ray`` module, or a MissingDependencyError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError(f"Rollouts on Ray need the ray package, which is not installed: {_INSTALL}.") from exc
    return ray


@contextlib.contextmanager
def ray_session(options: RayOptions) -> Iterator[RayOptions]:
    """Connected to Ray for the block; a local instance this started is shut down after.

    An already initialised Ray (a test fixture, a user's script) is used as it is.
    """
    if options.address == "local":
        # Before ray is imported: a private instance binds loopback only (not the LAN
        # address Ray picks for a cluster) and reports no usage statistics.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        try:
            ray.init(address=options.address, runtime_env=options.runtime_env, include_dashboard=False,
                     num_cpus=options.local_cpus if options.address == "local" else None)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise ConfigError(f"Could not connect to Ray at {options.address!r}: {exc}. Start a cluster "
                              "with `ray start --head` (then --ray auto), or use --ray local.") from exc
        started = True
    try:
        yield options
    finally:
        if started:
            ray.shutdown()


def default_actor_count(groups: int, cpus_per_actor: float = 1.0) -> int:
    """One actor per free CPU of the cluster (as Ray counts them), at most one per group."""
    ray = import_ray()
    free = ray.available_resources().get("CPU", 1.0)
    return max(1, min(int(free // cpus_per_actor), groups))


def split_by_group(keys: Sequence[tuple[int, int]], actors: int) -> list[list[tuple[int, int]]]:
    """Keys dealt to actors a whole group at a time, round robin (group g to actor g % actors).

    A group stays on one actor, so its episodes finish together; round robin
    rather than blocks keeps every actor busy when a resumed run skips a prefix.
    """
    groups = sorted({group for group, _ in keys})
    slot = {group: number % actors for number, group in enumerate(groups)}
    shares: list[list[tuple[int, int]]] = [[] for _ in range(actors)]
    for key in keys:
        shares[slot[key[0]]].append(key)
    return [share for share in shares if share]


class RolloutActors:
    """Ray actors that play episodes, kept from one run to the next.

    Starting an actor costs seconds (a process importing agentgym and loading
    the tokenizer); an online training loop plays a rollout every step, so it
    keeps one set for the whole job. Actors are placed one per ``cpus_per_actor``
    CPUs, spread over the cluster, or all on this node (``this_node``) when the
    servers are on loopback. After a :class:`RolloutWorkerError` start a new set.

        with ray_session(options), RolloutActors(4) as actors:
            for step in range(steps):
                await run_on_ray(config, spec, options, on_episode=..., actors=actors)
    """

    def __init__(self, count: int, *, cpus_per_actor: float = 1.0, this_node: bool = False) -> None:
        check_number("ray actors", count, minimum=1)
        ray = import_ray()
        cpus = ray.cluster_resources().get("CPU", 0.0)
        if count * cpus_per_actor > cpus:
            # Ray would queue the extra actors until CPUs appear: a run that never starts.
            raise ConfigError(f"{count} Ray actors of {cpus_per_actor:g} CPU need {count * cpus_per_actor:g} CPUs; "
                              f"the cluster has {cpus:g}. Ask for fewer actors, or add nodes (ray start).")
        strategy: Any = "SPREAD"
        if this_node:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            strategy = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
        actor_class = ray.remote(_RolloutWorker).options(num_cpus=cpus_per_actor, scheduling_strategy=strategy)
        self.handles = [actor_class.remote() for _ in range(count)]

    def close(self) -> None:
        """End the actors (their processes exit)."""
        ray = import_ray()
        for handle in self.handles:
            ray.kill(handle)
        self.handles = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def run_on_ray(
    config: RolloutConfig,
    spec: PolicySpec,
    options: RayOptions,
    *,
    on_episode: Callable[[list[TrajectoryRow]], None],
    skip: Collection[tuple[int, int]] = (),
    actors: RolloutActors | None = None,
) -> int:
    """Play every episode not in ``skip`` on Ray actors; ``on_episode`` gets each one's rows.

    Runs inside :func:`ray_session`, on ``actors`` (kept) or on actors started
    for this run (``options.actors`` of them, ended after). ``config.concurrency``
    is the run's total, shared out over the actors. Returns the number of
    episodes played. Raises :class:`RolloutWorkerError` when an actor dies or
    fails; the rows that reached ``on_episode`` before it are kept (resume to finish).
    """
    done = set(skip)
    keys = [key for key in config.episode_keys() if key not in done]
    if not keys:
        return 0
    groups = len({group for group, _ in keys})
    if actors is None:
        count = min(options.actors or default_actor_count(groups, options.cpus_per_actor), groups)
        with RolloutActors(count, cpus_per_actor=options.cpus_per_actor, this_node=spec.loopback_only()) as own:
            return await run_on_ray(config, spec, options, on_episode=on_episode, skip=skip, actors=own)
    shares = split_by_group(keys, min(len(actors.handles), groups))
    actor_config = dataclasses.replace(config, concurrency=math.ceil(config.concurrency / len(shares)))
    played = 0

    async def drain(stream: Any) -> None:
        nonlocal played
        async for ref in stream:
            on_episode(await ref)
            played += 1

    tasks = [asyncio.ensure_future(drain(handle.play.remote(actor_config, spec, share)))
             for handle, share in zip(actors.handles, shares, strict=False)]
    try:
        await _all_or_first_error(tasks)
    except import_ray().exceptions.RayError as exc:
        raise RolloutWorkerError(
            f"A Ray actor playing episodes failed: {_first_line(exc)}. The {played} episodes it and the "
            "others sent before are kept: fix the cause and run again with --resume."
        ) from exc
    return played


async def _all_or_first_error(tasks: list[asyncio.Future[None]]) -> None:
    """Wait for every task; on the first failure cancel the rest and raise it."""
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _first_line(exc: BaseException) -> str:
    """The cause's own message (Ray wraps it in a traceback of the remote side)."""
    cause = getattr(exc, "cause", None) or exc
    text = str(cause).strip().splitlines()
    return text[-1] if text else type(cause).__name__


class _RolloutWorker:
    """The body of one Ray actor: an EnvManager over its share of a run's keys.

    An async actor, so its manager's episodes and the stream back share the
    actor's event loop. Renderers are kept between runs (loading a tokenizer
    is the slow part of a run's start); a policy client lives for one run.
    """

    def __init__(self) -> None:
        self._renderers: dict[str, Any] = {}

    async def play(self, config: RolloutConfig, spec: PolicySpec,
                   keys: list[tuple[int, int]]) -> AsyncIterator[list[TrajectoryRow]]:
        """Yield each episode's rows as it ends (a Ray streaming generator)."""
        finished: asyncio.Queue[list[TrajectoryRow] | None] = asyncio.Queue()
        mine = set(keys)
        skip = [key for key in config.episode_keys() if key not in mine]
        async with _policy(spec, config.concurrency, config.turn_seconds) as policy:
            manager = EnvManager(config, policy, renderer=self._renderer(spec.tokenizer),
                                 on_episode=finished.put_nowait)
            task = asyncio.ensure_future(manager.run(skip=skip))
            task.add_done_callback(lambda _: finished.put_nowait(None))
            while (rows := await finished.get()) is not None:
                yield rows
            task.result()  # an exception of the manager itself reaches the driver

    def _renderer(self, tokenizer: str | None) -> Any:
        if tokenizer is None:
            return None
        if tokenizer not in self._renderers:
            from agentgym.rollout.chat import ChatRenderer

            self._renderers[tokenizer] = ChatRenderer.for_model(tokenizer)
        return self._renderers[tokenizer]


@contextlib.asynccontextmanager
async def _policy(spec: PolicySpec, connections: int, timeout: float) -> AsyncIterator[Any]:
    """The run's policy, made inside the actor's event loop."""
    if spec.model_free is not None:
        yield spec.model_free
        return
    from agentgym.rollout.policy import OpenAIPolicy

    async with OpenAIPolicy(spec.base_urls, spec.model, api_key=spec.api_key, sampling=spec.sampling,
                            timeout=timeout, max_connections=connections) as policy:
        yield policy
