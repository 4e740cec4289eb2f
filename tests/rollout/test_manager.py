from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from agentgym.errors import ConfigError, UnknownEnvError
from agentgym.rollout import RandomPolicy, ScriptedPolicy
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policy import OpenAIPolicy
from agentgym.rollout.rows import TrajectoryRow
from agentgym.rollout.storage import RolloutWriter, done_episodes, read_rows
from agentgym.serve.stub import StubServer
from alignment import assert_aligned
from fakes import SlowResetEnv, ThreadNotingEnv, played_moves

import agentgym

SLOW_RESET_ID = "SlowReset-LLM-v0"
agentgym.register(SLOW_RESET_ID, "fakes:SlowResetEnv", family="test", description="Echo, slow to reset.")
THREAD_NOTING_ID = "ThreadNoting-LLM-v0"
agentgym.register(THREAD_NOTING_ID, "fakes:ThreadNotingEnv", family="test",
                  description="Echo, noting the thread of each call.")


def run(config: RolloutConfig, base_url: str, renderer: ChatRenderer, *, retries: int = 3,
        timeout: float = 10.0, **manager: object) -> list[TrajectoryRow]:
    async def main() -> list[TrajectoryRow]:
        async with OpenAIPolicy(base_url, "stub", retries=retries, backoff=0.01, max_backoff=0.05,
                                timeout=timeout) as policy:
            return await EnvManager(config, policy, renderer=renderer, **manager).run()
    return asyncio.run(main())


def test_rows_are_token_aligned(stub: StubServer, renderer: ChatRenderer) -> None:
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=4, max_turns=3, concurrency=2)
    rows = run(config, stub.base_url, renderer)
    assert len(rows) == 4
    for row in rows:
        # "Up" every turn: the turn limit, or (on an easy level) a win.
        assert (row.num_turns, row.stop_reason, row.truncated) == (3, "turn_limit", True) or row.success
        assert row.error is None and not row.retokenized
        assert all(lp == -0.5 for lp, m in zip(row.logprobs, row.completion_mask, strict=True) if m)
        assert_aligned(row, renderer)


def test_a_server_that_alters_the_prompt_starts_a_new_row(up_ids: list[int], renderer: ChatRenderer) -> None:
    with StubServer(delay=0.001, completion_ids=up_ids, prompt_prefix=[99]) as server:
        rows = run(RolloutConfig(env_id="Sokoban-LLM-v0", episodes=1, max_turns=3), server.base_url, renderer)
    assert len(rows) >= 2 and [row.row_index for row in rows] == list(range(len(rows)))
    for row in rows:
        assert row.prompt_ids[0] == 99  # each row starts from the ids the server really saw
        assert row.completion_mask[: len(up_ids)] == [1] * len(up_ids)
    assert len({row.episode_id for row in rows}) == 1


def test_groups_share_a_seed_and_rows_say_which_episode(stub: StubServer, renderer: ChatRenderer) -> None:
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=6, group_size=3, max_turns=1, seed=10)
    rows = run(config, stub.base_url, renderer)
    assert sorted((r.group_id, r.index_in_group, r.seed) for r in rows) == [
        (0, 0, 10), (0, 1, 10), (0, 2, 10), (1, 0, 11), (1, 1, 11), (1, 2, 11)]
    assert len({r.episode_id for r in rows}) == 6
    first = {r.messages[1].content for r in rows if r.group_id == 0}
    assert len(first) == 1  # same level for the whole group


def test_a_seed_list_names_each_groups_level(stub: StubServer, renderer: ChatRenderer) -> None:
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=6, group_size=2, max_turns=1, seeds=[42, 5, 42])
    rows = run(config, stub.base_url, renderer)
    assert sorted({(r.group_id, r.seed) for r in rows}) == [(0, 42), (1, 5), (2, 42)]
    assert len({r.episode_id for r in rows}) == 6  # a level named twice is two groups, not one
    level = {g: r.messages[1].content for r in rows for g in [r.group_id]}
    assert level[0] == level[2] != level[1]
    with pytest.raises(ConfigError, match="seeds holds 2 seeds for 3 groups"):
        RolloutConfig(env_id="Sokoban-LLM-v0", episodes=6, group_size=2, seeds=[1, 2])


def test_the_context_budget_truncates_the_episode(stub: StubServer, renderer: ChatRenderer) -> None:
    prompt = len(renderer.prompt_ids(*_first_turn()))
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=1, max_context_tokens=prompt + 40)
    (row,) = run(config, stub.base_url, renderer)
    assert row.truncated and row.stop_reason == "context_limit"
    assert len(row.prompt_ids) + len(row.completion_ids) <= prompt + 40


def test_the_turn_budget_stops_episodes_the_env_does_not_know_of(stub: StubServer,
                                                                 renderer: ChatRenderer) -> None:
    # The stub answers "Up" every turn, so only a level won by moving up ends sooner.
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=4, turn_budget=2, seed=3)
    rows = run(config, stub.base_url, renderer)
    budget = [row for row in rows if not row.success]
    assert budget, "every level was won by moving up: pick another seed"
    for row in budget:
        assert (row.num_turns, row.stop_reason, row.truncated) == (2, "turn_budget", True)
    # The prompt is the env's own: its limit (30 turns), not the budget.
    assert all("at most 30 turn(s)" in row.messages[0].content for row in rows)
    shortened = run(RolloutConfig(env_id="Sokoban-LLM-v0", episodes=1, max_turns=2, seed=3),
                    stub.base_url, renderer)
    assert "at most 2 turn(s)" in shortened[0].messages[0].content


def _first_turn() -> tuple[str, str]:
    import agentgym

    env = agentgym.make("Sokoban-LLM-v0")
    observation, _ = env.reset(seed=0)
    return env.unwrapped.instructions, observation


@pytest.mark.parametrize("fault", [{"fail_every": 3}, {"drop_every": 3}])
def test_failed_requests_are_retried_and_no_episode_is_lost(fault: dict, up_ids: list[int],
                                                            renderer: ChatRenderer) -> None:
    with StubServer(delay=0.001, completion_ids=up_ids, **fault) as server:
        # Concurrent episodes' retries may land on another faulty request: retry generously.
        rows = run(RolloutConfig(env_id="Sokoban-LLM-v0", episodes=6, max_turns=3), server.base_url, renderer,
                   retries=15)
    assert len(rows) == 6
    assert [row.error for row in rows] == [None] * 6


def test_requests_that_never_answer_are_recorded_as_failures(up_ids: list[int], renderer: ChatRenderer) -> None:
    with StubServer(delay=0.001, completion_ids=up_ids, hang_every=2) as server:
        rows = run(RolloutConfig(env_id="Sokoban-LLM-v0", episodes=4, max_turns=2), server.base_url,
                   renderer, retries=0, timeout=0.5)
    assert len(rows) == 4  # nothing dropped
    failed = [row for row in rows if row.error is not None]
    assert failed and all("timed out" in row.error and row.stop_reason == "error" for row in failed)
    assert all(row.messages for row in failed)  # what was played before the failure is kept


def test_an_episode_over_its_time_limit_is_recorded(up_ids: list[int], renderer: ChatRenderer) -> None:
    with StubServer(delay=0.3, completion_ids=up_ids) as server:
        rows = run(RolloutConfig(env_id="Sokoban-LLM-v0", episodes=2, max_turns=5, episode_timeout=0.5),
                   server.base_url, renderer)
    assert [row.stop_reason for row in rows] == ["timeout", "timeout"]
    assert all("longer than 0.5 s" in row.error for row in rows)


def test_an_env_still_opening_when_its_episode_times_out_is_closed_once_open() -> None:
    """The env is made and reset in the thread pool; the episode stops waiting at its time limit,
    and the env, once its reset returns, is closed rather than left open (a sandbox, a browser)."""
    SlowResetEnv.instances.clear()
    config = RolloutConfig(env_id=SLOW_RESET_ID, episodes=3, episode_timeout=0.1)
    rows = asyncio.run(EnvManager(config, ScriptedPolicy(["<answer>apple</answer>"])).run())
    assert [row.stop_reason for row in rows] == ["timeout"] * 3
    opened = [env for env in SlowResetEnv.instances if env.was_reset]
    assert opened and all(env.closed for env in opened)


def test_a_slow_model_has_no_episode_limit_and_turns_limited_by_their_tokens() -> None:
    """A real model on CPUs samples about 12 tokens/s: ten turns outlast any fixed limit on the episode,
    so by default there is none, and a turn may take 120 s plus 2 s for each token it may sample."""
    config = RolloutConfig(env_id="Sokoban-LLM-v0", max_tokens_per_turn=64)
    assert config.episode_timeout is None
    assert config.turn_seconds == 120 + 2 * 64  # 248 s
    assert RolloutConfig(env_id="Sokoban-LLM-v0", turn_timeout=5.0).turn_seconds == 5.0
    assert OpenAIPolicy("http://127.0.0.1:1/v1", "m").timeout == 120 + 2 * 256  # the sampling's max_tokens


def test_a_turn_over_its_time_limit_is_recorded(up_ids: list[int], renderer: ChatRenderer) -> None:
    with StubServer(delay=1.0, completion_ids=up_ids) as server:
        rows = run(RolloutConfig(env_id="Sokoban-LLM-v0", episodes=2, max_turns=5, turn_timeout=0.2),
                   server.base_url, renderer)
    assert [row.stop_reason for row in rows] == ["timeout", "timeout"]
    assert all(row.error == "turn 0 took longer than 0.2 s to sample (turn_timeout)" for row in rows)


def test_an_env_call_over_its_time_limit_is_recorded() -> None:
    SlowResetEnv.instances.clear()
    config = RolloutConfig(env_id=SLOW_RESET_ID, episodes=2, env_timeout=0.1)
    rows = asyncio.run(EnvManager(config, ScriptedPolicy(["<answer>apple</answer>"])).run())
    assert [row.stop_reason for row in rows] == ["timeout", "timeout"]
    assert all(row.error == "the env's reset took longer than 0.1 s (env_timeout)" for row in rows)


@pytest.mark.parametrize(("step_s", "computes", "steps_inline"), [
    (0.0, False, True),  # quicker than a hand-over to a thread
    (0.002, True, True),  # computing: a thread would only take turns with the loop at the GIL
    (0.002, False, False),  # waiting: the loop works on while a thread waits
])
def test_quick_env_calls_run_on_the_event_loop_and_waiting_ones_in_the_pool(
        step_s: float, computes: bool, steps_inline: bool) -> None:
    """Opening envs and stepping them is timed in the thread pool first; calls that prove quick
    run on the event loop's thread after that, for every episode of the run. (Counted with some
    slack: on a loaded machine a trivial call can look slow once and go to the pool, and back.)"""
    ThreadNotingEnv.calls.clear()
    ThreadNotingEnv.step_s, ThreadNotingEnv.step_computes = step_s, computes
    config = RolloutConfig(env_id=THREAD_NOTING_ID, episodes=12, concurrency=4, max_turns=10)
    asyncio.run(EnvManager(config, ScriptedPolicy(lambda observation: "<answer>pear</answer>")).run())
    resets = [thread == "MainThread" for kind, thread in ThreadNotingEnv.calls if kind == "reset"]
    steps = [thread == "MainThread" for kind, thread in ThreadNotingEnv.calls if kind == "step"]
    assert len(resets) == 12 and len(steps) == 120
    assert not resets[0] and not steps[0]  # each kind's first call is timed in the pool
    assert sum(resets) >= 8  # not every episode's env opened in the pool
    if steps_inline:
        assert sum(steps) >= 90
    else:
        assert not any(steps)


class _WatchesTheCollector:
    """Plays the secret-word answer and notes how many objects the collector has set aside."""

    def __init__(self) -> None:
        self.frozen: list[int] = []

    def act(self, observation: str, env: object) -> str:
        self.frozen.append(gc.get_freeze_count())
        return "<answer>apple</answer>"


def test_a_run_sets_the_live_objects_aside_from_the_collector_and_gives_them_back() -> None:
    config = RolloutConfig(env_id="Echo-LLM-v0", episodes=2)
    assert gc.get_freeze_count() == 0
    policy = _WatchesTheCollector()
    asyncio.run(EnvManager(config, policy).run())
    assert policy.frozen and min(policy.frozen) > 0  # set aside while the episodes played
    assert gc.get_freeze_count() == 0  # and given back
    gc.freeze()  # a process that sets objects aside itself keeps them so
    try:
        asyncio.run(EnvManager(config, _WatchesTheCollector()).run())
        assert gc.get_freeze_count() > 0  # not given back (objects freed meanwhile leave the count)
    finally:
        gc.unfreeze()


def test_model_free_policies_are_tokenized_like_a_model(renderer: ChatRenderer) -> None:
    script = ScriptedPolicy(["<answer>Up</answer>"] * 2)
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=1, max_turns=2)
    (row,) = asyncio.run(EnvManager(config, script, renderer=renderer).run())
    assert_aligned(row, renderer)
    (plain,) = asyncio.run(EnvManager(config, RandomPolicy(0)).run())
    assert plain.prompt_ids == plain.completion_ids == [] and plain.num_turns >= 1


def test_the_random_policy_repeats_whatever_the_scheduling_order() -> None:
    def moves(concurrency: int) -> dict[tuple[int, int], list[str]]:
        config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=12, group_size=3, max_turns=8,
                               concurrency=concurrency)
        return played_moves(asyncio.run(EnvManager(config, RandomPolicy(7)).run()))

    one_at_a_time = moves(concurrency=1)
    assert moves(concurrency=12) == one_at_a_time
    # Members of a group play the same level with their own draws.
    assert any(len({tuple(one_at_a_time[(group, member)]) for member in range(3)}) > 1 for group in range(4))
    unseeded = asyncio.run(EnvManager(RolloutConfig(env_id="Sokoban-LLM-v0", episodes=2, max_turns=2),
                                      RandomPolicy()).run())
    assert all(row.num_turns >= 1 and row.error is None for row in unseeded)


def test_a_broken_policy_is_recorded_not_raised(renderer: ChatRenderer) -> None:
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=1, max_turns=5)
    (row,) = asyncio.run(EnvManager(config, ScriptedPolicy(["<answer>Up</answer>"]), renderer=renderer).run())
    assert row.num_turns == 1 and "ran out of actions" in row.error


def test_resume_after_a_crash_writes_each_episode_once(stub: StubServer, renderer: ChatRenderer,
                                                       tmp_path: Path) -> None:
    out = tmp_path / "rollouts.parquet"
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=8, group_size=2, max_turns=2, concurrency=2)
    writer = RolloutWriter(out, flush_seconds=0)
    crashed = config.episode_keys()[:3]
    # A first run that "dies" after three episodes: rows flushed, writer never closed.
    first = run(config, stub.base_url, renderer, on_episode=writer.add)
    writer_rows = [r for r in first if r.key in crashed]
    out.with_name(out.name + ".parts").mkdir(exist_ok=True)
    for leftover in out.with_name(out.name + ".parts").glob("*"):
        leftover.unlink()
    partial = RolloutWriter(out, resume=True, flush_seconds=0)
    partial.add(writer_rows)
    assert done_episodes(out) == set(crashed)
    with RolloutWriter(out, resume=True) as resumed:
        async def again() -> list[TrajectoryRow]:
            async with OpenAIPolicy(stub.base_url, "stub") as policy:
                manager = EnvManager(config, policy, renderer=renderer, on_episode=resumed.add)
                return await manager.run(skip=done_episodes(out))
        second = asyncio.run(again())
    assert {r.key for r in second}.isdisjoint(crashed)
    keys = [r.key for r in read_rows(out)]
    assert sorted(keys) == sorted(config.episode_keys())  # none missing, none twice


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"episodes": 5, "group_size": 2}, "multiple of group_size"),
     ({"concurrency": 0}, "concurrency must be at least 1"),
     ({"max_turns": 0}, "max_turns must be at least 1"),
     ({"turn_budget": 0}, "turn_budget must be at least 1")],
)
def test_bad_config_is_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RolloutConfig(env_id="Sokoban-LLM-v0", **kwargs)


def test_a_misspelt_env_is_caught_before_anything_runs() -> None:
    with pytest.raises(UnknownEnvError, match="Did you mean 'Sokoban-LLM-v0'"):
        RolloutConfig(env_id="Sokoban-LLM-v9")


def test_a_model_policy_needs_a_renderer(stub: StubServer) -> None:
    policy = OpenAIPolicy(stub.base_url, "stub")
    with pytest.raises(ConfigError, match="needs a renderer"):
        EnvManager(RolloutConfig(env_id="Sokoban-LLM-v0"), policy)
    asyncio.run(policy.aclose())
