"""The trajectory env manager: many multi-turn episodes at once, recorded token by token.

Episodes run as asyncio tasks. ``group_size`` episodes share a seed (a GRPO
group); a semaphore bounds how many play at once; blocking env calls run in a
thread pool, or inline once they prove quick; each episode has a turn limit and a
context-token budget. An episode that fails (the server gave up,
the env raised, a time limit passed) is still written, with its error: nothing
is dropped. Time limits are per turn (scaled to the tokens it may sample) and per
env call; a limit on the whole episode is optional.

    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=64, group_size=8)
    async with OpenAIPolicy(base_url, "tiny") as policy:
        rows = await EnvManager(config, policy, renderer=ChatRenderer(tokenizer)).run()
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import zlib
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import agentgym
from agentgym.core import check_number
from agentgym.errors import AgentGymError, ConfigError
from agentgym.registry import env_argument_error, env_info
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.offload import Offload
from agentgym.rollout.policies import ExpertCorrection, PlayOnly, Policy
from agentgym.rollout.policy import Generation, OpenAIPolicy, default_turn_timeout
from agentgym.rollout.rows import Message, TrajectoryRow, TurnSpan, observation_hash

__all__ = ["EnvManager", "RolloutConfig"]


@dataclass
class RolloutConfig:
    """What to play. Validated on creation; each message names the fix."""

    env_id: str
    #: constructor arguments of the env
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: episodes in all; groups of ``group_size`` share a seed
    episodes: int = 8
    group_size: int = 1
    #: episodes playing at once
    concurrency: int = 32
    #: turn limit per episode (None: the env's own ``max_turns``); it reaches the env, so
    #: the env's prompt names it
    max_turns: int | None = None
    #: stop each episode after this many turns (truncated, ``stop_reason`` "turn_budget")
    #: without telling the env: its prompt keeps naming its own limit, so a training run
    #: keeps episodes short in the prompt its eval shows (None: no budget)
    turn_budget: int | None = None
    #: tokens an episode's context may hold; past it the episode is truncated
    max_context_tokens: int = 4096
    #: tokens one turn may sample
    max_tokens_per_turn: int = 256
    #: seconds an episode may take in all (None: no limit; each turn and env call has its own,
    #: and the turn limit bounds their number)
    episode_timeout: float | None = None
    #: seconds one turn's sampling may take (None: 120 s + 2 s per token of ``max_tokens_per_turn``,
    #: :func:`~agentgym.rollout.policy.default_turn_timeout`: a real model on CPUs is slow)
    turn_timeout: float | None = None
    #: seconds one env call (its reset, a step) may take; an env that proves quick runs on the
    #: event loop, where a call cannot be cut short (None: no limit)
    env_timeout: float | None = 300.0
    #: seed of group 0; group g plays seed + g
    seed: int = 0
    #: or each group's seed, in order (one per group; replaces ``seed``): a list of levels
    #: to play, such as the ones a model failed (agentgym.rollout.seeds)
    seeds: list[int] | None = None
    #: use chat completions and retokenize (for servers that return no token ids)
    chat_mode: bool = False
    #: seed the server's sampler: each turn of each episode asks for its own seed drawn
    #: from this one, so a rerun samples the same tokens (None: unseeded)
    sampling_seed: int | None = None

    def __post_init__(self) -> None:
        env_info(self.env_id)  # "did you mean" for a misspelt id
        for name in ("episodes", "group_size", "concurrency", "max_context_tokens", "max_tokens_per_turn"):
            check_number(name, getattr(self, name), minimum=1)
        for name in ("max_turns", "turn_budget"):
            if getattr(self, name) is not None:
                check_number(name, getattr(self, name), minimum=1)
        for name in ("episode_timeout", "turn_timeout", "env_timeout"):
            if getattr(self, name) is not None:
                check_number(name, getattr(self, name), minimum=0.001, integer=False)
        if self.episodes % self.group_size:
            raise ConfigError(
                f"episodes ({self.episodes}) must be a multiple of group_size ({self.group_size}) "
                "so every group is complete."
            )
        if self.seeds is not None and len(self.seeds) != self.episodes // self.group_size:
            raise ConfigError(f"seeds holds {len(self.seeds)} seeds for {self.episodes // self.group_size} "
                              "groups: give one seed per group.")
        self._check_env_kwargs()

    def make_env_kwargs(self) -> dict[str, Any]:
        """The env's constructor arguments, with the run's turn limit when one is set."""
        kwargs = dict(self.env_kwargs)
        if self.max_turns is not None:
            kwargs["max_turns"] = self.max_turns
        return kwargs

    def _check_env_kwargs(self) -> None:
        """Build the env once, so bad arguments fail now rather than in every episode."""
        kwargs = self.make_env_kwargs()
        try:
            agentgym.make(self.env_id, **kwargs).close()
        except AgentGymError:
            raise  # the env's own ConfigError names the argument and the fix
        except (TypeError, ValueError) as exc:  # an argument it does not take, a value it cannot use
            raise env_argument_error(self.env_id, kwargs, exc) from exc

    @property
    def turn_seconds(self) -> float:
        """A turn's time limit: ``turn_timeout``, or the default for ``max_tokens_per_turn``."""
        return self.turn_timeout if self.turn_timeout is not None else default_turn_timeout(self.max_tokens_per_turn)

    def group_seed(self, group: int) -> int:
        """The seed ``group`` plays."""
        return self.seeds[group] if self.seeds is not None else self.seed + group

    def identity(self) -> dict[str, Any]:
        """The settings that decide which episodes the run plays and how they are recorded,
        keyed by the ``agentgym rollout`` flag that sets each (``--episodes`` is not one: a
        resumed run may play more). Stored in the rows' files, so ``--resume`` can refuse a
        file of another run (:func:`agentgym.rollout.storage.check_same_run`)."""
        return {
            "--env": self.env_id, "--env-kwarg": self.env_kwargs, "--group-size": self.group_size,
            "--seed": self.seed if self.seeds is None else None, "seeds": self.seeds,
            "--max-turns": self.max_turns, "--turn-budget": self.turn_budget,
            "--max-context": self.max_context_tokens, "--max-tokens": self.max_tokens_per_turn,
            "--chat-mode": self.chat_mode, "--sampling-seed": self.sampling_seed,
        }

    def episode_keys(self) -> list[tuple[int, int]]:
        """(group, index in group) of every episode of the run."""
        groups = self.episodes // self.group_size
        return [(group, index) for group in range(groups) for index in range(self.group_size)]


class _TimedOut(Exception):
    """A turn's sampling or an env call ran past its limit: the episode is recorded as timed out."""


@dataclass
class _Segment:
    """One training row being built.

    ``ids`` is the row's whole context, its prompt (the first ``prompt_length``
    ids) then its completion so far: the very list sent as the next prompt, so
    a turn never rebuilds it.
    """

    ids: list[int]
    prompt_length: int = field(init=False)
    completion_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[TurnSpan] = field(default_factory=list)
    #: every turn's logprobs came from the server (False once one did not)
    server_logprobs: bool = True

    def __post_init__(self) -> None:
        self.prompt_length = len(self.ids)

    @property
    def completion_length(self) -> int:
        return len(self.completion_mask)

    def add(self, ids: list[int], *, sampled: bool, logprobs: list[float] | None = None) -> None:
        self.ids += ids
        self.completion_mask += [int(sampled)] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)


@dataclass
class _Episode:
    """Everything recorded about one episode so far (kept even if it fails)."""

    group_id: int
    index_in_group: int
    seed: int
    #: the rows' episode_id; also the key that keeps the episode on one server
    id: str = ""
    messages: list[Message] = field(default_factory=list)
    segments: list[_Segment] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    invalid_actions: int = 0
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    stop_reason: str = ""
    policy_version: int | None = None
    retokenized: bool = False
    error: str | None = None
    #: a model-free policy's own copy for this episode (see ``_model_free_policy``)
    player: Any = None
    #: the teacher's own copy for this episode (see ``EnvManager._corrected``)
    teacher: ExpertCorrection | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def context(self) -> list[int]:
        """The ids the policy continues from (the current row's own list: read, don't modify)."""
        return self.segments[-1].ids


@contextlib.contextmanager
def _gc_frozen() -> Iterator[None]:
    """Set what is alive when a run starts (imports, the tokenizer, a trainer's model) aside
    from the garbage collector until it ends: each full collection of the run would walk all
    of it again, for nothing (about a tenth of the manager's CPU per turn,
    benchmarks/bench_rollout.py). A process that freezes objects itself is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class EnvManager:
    """Play the episodes of a :class:`RolloutConfig` with a policy.

    Args:
        policy: an :class:`OpenAIPolicy` (a model), or a model-free policy
            (random, scripted) whose text actions are tokenized when a
            renderer is given.
        renderer: renders turns into token ids; required for a model policy.
        on_episode: called with each episode's rows as soon as it ends.
        teacher: with a model policy, an expert that checks every turn and
            plays and labels its own move where the model's is wrong (DAgger).
    """

    def __init__(
        self,
        config: RolloutConfig,
        policy: OpenAIPolicy | Policy,
        *,
        renderer: ChatRenderer | None = None,
        on_episode: Callable[[list[TrajectoryRow]], None] | None = None,
        teacher: ExpertCorrection | None = None,
    ) -> None:
        if isinstance(policy, OpenAIPolicy) and renderer is None:
            raise ConfigError("A model policy needs a renderer (the model's tokenizer) to record token ids.")
        if teacher is not None and not isinstance(policy, OpenAIPolicy):
            raise ConfigError("An expert teacher corrects a model: it needs a model policy, not a model-free one.")
        self.config = config
        self.policy = policy
        self.renderer = renderer
        self.on_episode = on_episode
        self.teacher = teacher
        self._env_kwargs = config.make_env_kwargs()

    async def run(self, skip: Collection[tuple[int, int]] = ()) -> list[TrajectoryRow]:
        """Play every episode not in ``skip``; return their rows (also given to ``on_episode``)."""
        done = set(skip)
        keys = [key for key in self.config.episode_keys() if key not in done]
        semaphore = asyncio.Semaphore(self.config.concurrency)
        workers = min(self.config.concurrency, 64)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agentgym-env") as pool, _gc_frozen():
            # An env from outside ("remote": an OpenEnv server, a verifiers rubric) waits
            # elsewhere on every call: never inline, where it would stall the loop.
            may_inline = "remote" not in env_info(self.config.env_id).tags
            opener, stepper = Offload(pool, may_inline=may_inline), Offload(pool, may_inline=may_inline)
            tasks = [self._guarded(group, index, semaphore, opener, stepper) for group, index in keys]
            results = await asyncio.gather(*tasks)
        return [row for rows in results for row in rows]

    async def _guarded(
        self, group: int, index: int, semaphore: asyncio.Semaphore, opener: Offload, stepper: Offload
    ) -> list[TrajectoryRow]:
        async with semaphore:
            seed = self.config.group_seed(group)
            episode_id = f"{self.config.env_id}/s{seed}/g{group}/e{index}"
            episode = _Episode(group, index, seed=seed, id=episode_id)
            try:
                await asyncio.wait_for(self._play(episode, opener, stepper), self.config.episode_timeout)
            except TimeoutError:
                episode.error = f"the episode took longer than {self.config.episode_timeout:g} s"
                episode.stop_reason = "timeout"
            except _TimedOut as exc:  # a turn or an env call past its own limit
                episode.error, episode.stop_reason = str(exc), "timeout"
            # Whatever went wrong (the server gave up, the env or the policy raised),
            # the episode is recorded with its error rather than lost.
            except (AgentGymError, OSError, RuntimeError, ValueError, TypeError, KeyError) as exc:
                episode.error = f"{type(exc).__name__}: {exc}"
                episode.stop_reason = "error"
            rows = self._rows(episode)
            if self.on_episode is not None:
                self.on_episode(rows)
            return rows

    def _open_env(self, seed: int) -> tuple[Any, str, str]:
        """A new env, reset to ``seed``: (env, first observation, instructions), in one call
        (one hand-over to the thread pool, where it runs there); closed here if the reset fails."""
        env = agentgym.make(self.config.env_id, **self._env_kwargs)
        try:
            observation, _ = env.reset(seed=seed)
            return env, observation, env.get_wrapper_attr("instructions")  # a wrapper may extend them (tools)
        except BaseException:
            env.close()
            raise

    async def _play(self, episode: _Episode, opener: Offload, stepper: Offload) -> None:
        env, observation, instructions = await self._env_call(
            opener, "reset", self._open_env, episode.seed, abandoned=lambda opened: opened[0].close())
        try:
            episode.messages += [Message(role="system", content=instructions),
                                 Message(role="user", content=observation)]
            prompt = self.renderer.prompt_ids(instructions, observation) if self.renderer else []
            episode.segments.append(_Segment(prompt))
            while True:
                generation = await self._generate(episode, env)
                if generation is None:
                    break
                self._record_generation(episode, generation)
                observation, reward, terminated, truncated, info = await self._env_call(
                    stepper, "step", env.step, generation.text)
                episode.turn_rewards.append(float(reward))
                episode.invalid_actions += not info.get("action_valid", True)
                episode.success = bool(info.get("success", False))
                episode.messages.append(Message(role="user", content=observation))
                if terminated or truncated:
                    episode.terminated, episode.truncated = terminated, truncated
                    episode.stop_reason = "terminated" if terminated else "turn_limit"
                    return
                if len(episode.turn_rewards) == self.config.turn_budget:
                    episode.truncated, episode.stop_reason = True, "turn_budget"
                    break
                if self.renderer is not None and not self._add_reply(episode, observation):
                    break
            await self._cut_short(episode, env, stepper)
        finally:
            env.close()

    async def _cut_short(self, episode: _Episode, env: Any, stepper: Offload) -> None:
        """Tell an env that pays only when an episode ends (a reward model's, ``rm:ENV_ID``) that this
        one was stopped here (turn budget, context limit), where the env never sees it end: its
        ``cut_short()``, if it has one, returns the reward to add to the last turn."""
        if not episode.turn_rewards:
            return
        try:
            cut_short = env.get_wrapper_attr("cut_short")
        except AttributeError:
            return
        episode.turn_rewards[-1] += float(await self._env_call(stepper, "cut_short", cut_short))

    async def _env_call(self, offload: Offload, what: str, function: Callable[..., Any], *args: Any,
                        abandoned: Callable[[Any], None] | None = None) -> Any:
        """``function(*args)`` through ``offload``, within ``env_timeout`` (a :class:`_TimedOut` past it)."""
        limit = self.config.env_timeout
        try:
            async with asyncio.timeout(limit):  # a timer, not another task: this is every turn's path
                return await offload.call(function, *args, abandoned=abandoned)
        except TimeoutError:
            raise _TimedOut(f"the env's {what} took longer than {limit:g} s (env_timeout)") from None

    def _add_reply(self, episode: _Episode, observation: str) -> bool:
        """Append the env's reply; False (episode truncated) when it and one more
        sampled token would not fit the context budget."""
        reply = self.renderer.reply_ids(observation)
        if len(episode.context) + len(reply) + 1 > self.config.max_context_tokens:
            episode.truncated, episode.stop_reason = True, "context_limit"
            return False
        episode.segments[-1].add(reply, sampled=False)
        return True

    async def _generate(self, episode: _Episode, env: Any) -> Generation | None:
        """The policy's next turn, or None when the context budget is spent."""
        max_tokens = self.config.max_tokens_per_turn
        if self.renderer is not None:
            room = self.config.max_context_tokens - len(episode.context)
            if room < 1:
                episode.truncated, episode.stop_reason = True, "context_limit"
                return None
            max_tokens = min(max_tokens, room)
        policy = self.policy
        if isinstance(policy, OpenAIPolicy):
            limit = self.config.turn_seconds
            try:
                async with asyncio.timeout(limit):
                    generation = await self._sample(episode, policy, max_tokens)
            except TimeoutError:
                raise _TimedOut(f"turn {len(episode.turn_rewards)} took longer than {limit:g} s to sample "
                                "(turn_timeout)") from None
            return self._corrected(episode, generation, env) if self.teacher is not None else generation
        action = self._model_free_policy(episode).act(episode.messages[-1].content, env.unwrapped)
        return Generation(text=str(action), finish_reason="stop", learn=not isinstance(action, PlayOnly))

    async def _sample(self, episode: _Episode, policy: OpenAIPolicy, max_tokens: int) -> Generation:
        seed = self._turn_seed(episode)
        if self.config.chat_mode:
            messages = [message.model_dump() for message in episode.messages]
            return await policy.complete_chat(messages, max_tokens=max_tokens, seed=seed, key=episode.id)
        return await policy.complete_ids(episode.context, max_tokens=max_tokens, seed=seed, key=episode.id)

    def _corrected(self, episode: _Episode, generation: Generation, env: Any) -> Generation:
        """The model's turn as the teacher rules: learned as it is, played but not
        learned, or replaced by the expert's move (learned; its tokens are not the
        model's samples, so the row is flagged retokenized)."""
        if episode.teacher is None:
            assert self.teacher is not None
            episode.teacher = self.teacher.for_episode(episode.seed, episode.index_in_group)
        verdict = episode.teacher.review(generation.text, env.unwrapped)
        if verdict is None:
            return generation
        if isinstance(verdict, PlayOnly):
            generation.learn = False
            return generation
        return Generation(text=verdict, finish_reason="stop", policy_version=generation.policy_version)

    def _model_free_policy(self, episode: _Episode) -> Any:
        """The policy that plays ``episode``: a policy with ``for_episode`` (the random one)
        gets a copy keyed by the episode's seed and index, so a rerun repeats its moves
        whatever order the concurrent episodes are scheduled in."""
        if episode.player is None:
            for_episode = getattr(self.policy, "for_episode", None)
            episode.player = for_episode(episode.seed, episode.index_in_group) if for_episode else self.policy
        return episode.player

    def _turn_seed(self, episode: _Episode) -> int | None:
        """The sampling seed of the episode's next turn: distinct per (group seed, member, turn)."""
        if self.config.sampling_seed is None:
            return None
        key = (self.config.sampling_seed, episode.seed, episode.index_in_group, len(episode.turn_rewards))
        return zlib.crc32(repr(key).encode())

    def _record_generation(self, episode: _Episode, generation: Generation) -> None:
        observation = episode.messages[-1].content  # what this turn acted on
        episode.messages.append(Message(role="assistant", content=generation.text))
        episode.policy_version = generation.policy_version
        if self.renderer is None:
            return
        ids, logprobs = generation.token_ids, generation.logprobs
        from_server = generation.server_logprobs and ids is not None
        if ids is None:  # chat mode or a model-free policy: the text is all we have
            ids = self.renderer.tokenizer.encode(generation.text, add_special_tokens=False)
            if generation.finish_reason == "stop":
                ids.append(self.renderer.eos_id)  # the turn ended by choice: stopping is learned too
            logprobs = None
            episode.retokenized = episode.retokenized or isinstance(self.policy, OpenAIPolicy)
        if generation.prompt_ids is not None and generation.prompt_ids != episode.context:
            # The server did not see the ids we sent: rows built on our ids would
            # misalign the logprobs, so the row goes on from what it did see.
            seen = _Segment(list(generation.prompt_ids))
            if episode.segments[-1].completion_mask:
                episode.segments.append(seen)
            else:  # nothing recorded on the old prompt yet: no empty row
                episode.segments[-1] = seen
        segment = episode.segments[-1]
        start = segment.completion_length
        segment.add(ids, sampled=generation.learn, logprobs=logprobs)
        # The turn's number is the count of turns the env has stepped: its index in turn_rewards.
        segment.turns.append(TurnSpan(turn=len(episode.turn_rewards), start=start, end=start + len(ids),
                                      observation_hash=observation_hash(observation)))
        segment.server_logprobs = segment.server_logprobs and from_server
        segment.add(self.renderer.close_turn_ids(ids), sampled=False)

    def _rows(self, episode: _Episode) -> list[TrajectoryRow]:
        segments = episode.segments or [_Segment([])]
        common = dict(
            episode_id=episode.id, group_id=episode.group_id, index_in_group=episode.index_in_group,
            env_id=self.config.env_id, seed=episode.seed, reward=sum(episode.turn_rewards),
            turn_rewards=episode.turn_rewards, success=episode.success, num_turns=len(episode.turn_rewards),
            terminated=episode.terminated, truncated=episode.truncated, stop_reason=episode.stop_reason,
            invalid_actions=episode.invalid_actions, policy_version=episode.policy_version,
            retokenized=episode.retokenized, error=episode.error,
            duration_s=time.monotonic() - episode.started, messages=episode.messages,
            tokenizer=self.renderer.tokenizer_id if self.renderer is not None else None,
        )
        return [
            TrajectoryRow(row_index=number, prompt_ids=segment.ids[: segment.prompt_length],
                          completion_ids=segment.ids[segment.prompt_length :],
                          completion_mask=segment.completion_mask, logprobs=segment.logprobs,
                          turns=segment.turns, server_logprobs=segment.server_logprobs and bool(segment.turns),
                          **common)
            for number, segment in enumerate(segments)
        ]
