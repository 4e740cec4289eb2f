"""Several inference servers: the pool's choices, and rollouts over real loopback servers
(stubs, the built-in server) while one of them fails or is killed mid-run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentgym.cli import app
from agentgym.errors import ConfigError
from agentgym.rollout import servers
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policy import OpenAIPolicy, SamplingConfig
from agentgym.rollout.rows import TrajectoryRow
from agentgym.rollout.servers import ServerPool, parse_base_urls
from agentgym.rollout.storage import read_rows
from agentgym.serve.stub import StubServer
from alignment import assert_aligned

URLS = [f"http://127.0.0.1:{port}/v1" for port in (8001, 8002, 8003)]


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_pool(count: int = 3, **options: float) -> tuple[ServerPool, Clock]:
    clock = Clock()
    return ServerPool(URLS[:count], clock=clock, **options), clock


# --- the pool's choices -------------------------------------------------------------------

def test_a_new_key_goes_to_the_server_with_fewest_requests_in_flight() -> None:
    pool, _ = make_pool()
    for server, outstanding in zip(pool.servers, (2, 0, 1), strict=True):
        server.outstanding = outstanding
    assert pool.pick("a") is pool.servers[1]


def test_ties_go_to_the_server_that_served_fewest_so_new_keys_spread() -> None:
    pool, _ = make_pool()
    for key in range(9):
        pool.pick(key).requests += 1
    assert [server.requests for server in pool.servers] == [3, 3, 3]


def test_a_key_stays_on_its_server_even_when_another_is_less_busy() -> None:
    pool, _ = make_pool()
    home = pool.pick("episode")
    home.outstanding = 10
    assert pool.pick("episode") is home and pool.server_of("episode") is home
    assert pool.pick("other") is not home
    assert pool.pick(None) is not home  # no key: least outstanding, no stickiness


def test_a_failed_server_is_taken_out_and_its_keys_move_for_good() -> None:
    pool, clock = make_pool(2, cooldown=1.0)
    home = pool.pick("episode")
    pool.failed(home, "ConnectionRefused")
    other = pool.pick("episode")
    assert other is not home and other.moved_in == 1 and home.failures == 1
    assert all(pool.pick(key) is other for key in range(5))  # out: no new key either
    clock.now += 1.0
    assert pool.stats()[pool.servers.index(home)].up
    assert pool.pick("episode") is other  # stays where its prefix now is
    assert pool.pick("new") is home  # back in the choice: the probe


def test_error_answers_take_a_server_out_only_when_they_come_in_a_row() -> None:
    pool, _ = make_pool(2, take_out_after=3)
    flaky = pool.servers[0]
    for _ in range(2):
        pool.failed(flaky, "server error 500", unreachable=False)
    assert pool.stats()[0].up
    pool.succeeded(flaky)  # a 500 now and then is not an outage
    for _ in range(2):
        pool.failed(flaky, "server error 500", unreachable=False)
    assert pool.stats()[0].up
    pool.failed(flaky, "server error 500", unreachable=False)
    assert not pool.stats()[0].up and flaky.failures == 5


def test_a_failed_request_goes_elsewhere_and_back_only_when_nothing_else_is_up() -> None:
    pool, _ = make_pool(2)
    first, second = pool.servers
    assert pool.pick("episode") is first
    pool.failed(first, "server error 500", unreachable=False)  # still up: one error is no outage
    assert pool.pick("episode", avoid=first) is second and second.moved_in == 1
    assert pool.pick("episode") is second  # and it stays there
    pool.failed(second, "ServerDisconnectedError")  # unreachable: out
    assert pool.pick("episode", avoid=first) is first and first.moved_in == 1


def test_the_cool_down_doubles_up_to_a_cap_and_a_success_resets_it() -> None:
    pool, clock = make_pool(1, cooldown=1.0, max_cooldown=4.0)
    server = pool.servers[0]
    outs = []
    for _ in range(5):
        pool.failed(server, "500")
        outs.append(server.down_until - clock.now)
        clock.now = server.down_until
    assert outs == [1.0, 2.0, 4.0, 4.0, 4.0]
    pool.succeeded(server)
    pool.failed(server, "500")
    assert server.down_until - clock.now == 1.0


def test_failures_of_requests_already_in_flight_do_not_lengthen_an_outage() -> None:
    pool, clock = make_pool(1, cooldown=1.0)
    server = pool.servers[0]
    pool.failed(server, "dropped")
    clock.now += 0.5
    for _ in range(10):
        pool.failed(server, "dropped")
    assert server.strikes == 1 and server.down_until == 101.0 and server.failures == 11


def test_while_every_server_is_out_pick_says_so_and_when_one_returns() -> None:
    pool, clock = make_pool(2, cooldown=1.0)
    pool.failed(pool.servers[0], "timeout")
    clock.now += 0.25
    pool.failed(pool.servers[1], "timeout")
    assert pool.pick("a") is None and pool.ready_in() == 0.75
    clock.now += 0.75
    assert pool.pick("a") is pool.servers[0]
    single, clock = make_pool(1, cooldown=1.0)
    single.failed(single.servers[0], "timeout")
    assert single.pick("a") is None
    clock.now += 1.0
    assert single.pick("a") is single.servers[0]


def test_sticky_keys_are_bounded_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servers, "MAX_STICKY_KEYS", 2)
    pool, _ = make_pool()
    for key in ("a", "b", "c"):
        pool.pick(key)
    assert pool.server_of("a") is None and pool.server_of("c") is not None


def test_base_urls_come_repeated_or_comma_separated() -> None:
    assert parse_base_urls("http://a:1/v1/") == ["http://a:1/v1"]
    assert parse_base_urls(["http://a:1/v1, http://b:2/v1", "https://c/v1"]) == [
        "http://a:1/v1", "http://b:2/v1", "https://c/v1"]


@pytest.mark.parametrize(("values", "message"), [
    ([], "No server base URL given"),
    (["127.0.0.1:8000/v1"], r"'127.0.0.1:8000/v1' is not a server base URL.*repeat --base-url"),
    (["http://a:1/v1,"], "'' is not a server base URL"),
    (["http://a:99999999/v1"], "is not a server base URL"),
    (["http://a:1/v1", "http://a:1/v1/"], "listed twice"),
    ([8000], "must be a string"),
])
def test_bad_base_urls_are_explained(values: list[object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_base_urls(values)  # type: ignore[arg-type]


def test_a_policy_still_takes_one_url_and_names_its_servers() -> None:
    assert OpenAIPolicy("http://127.0.0.1:1/v1/", "m").base_urls == ["http://127.0.0.1:1/v1"]
    policy = OpenAIPolicy(URLS[:2], "m")
    assert policy.base_url == URLS[0] and [s.base_url for s in policy.server_stats()] == URLS[:2]
    # A caller that sees one URL (e.g. a trainer syncing weights to it) must not get two.
    with pytest.raises(ConfigError, match="holds several URLs: pass them as a list"):
        OpenAIPolicy(",".join(URLS[:2]), "m")


# --- rollouts over real loopback servers ------------------------------------------------

def play(urls: list[str], renderer: ChatRenderer, config: RolloutConfig, *, retries: int = 3,
         on_episode: Callable[[list[TrajectoryRow]], None] | None = None,
         model: str = "stub", api_key: str = "EMPTY") -> tuple[list[TrajectoryRow], OpenAIPolicy]:
    """Roll out ``config`` over ``urls``; the rows and the (closed) policy, for its stats."""
    policy = OpenAIPolicy(urls, model, api_key=api_key, backoff=0.05, max_backoff=0.2, timeout=30, retries=retries,
                          sampling=SamplingConfig(max_tokens=config.max_tokens_per_turn))

    async def main() -> list[TrajectoryRow]:
        async with policy:
            return await EnvManager(config, policy, renderer=renderer, on_episode=on_episode).run()
    return asyncio.run(main()), policy


def sokoban(episodes: int, turns: int, **options: object) -> RolloutConfig:
    options = {"max_context_tokens": 4096, "max_tokens_per_turn": 16, **options}
    return RolloutConfig(env_id="Sokoban-LLM-v0", episodes=episodes, max_turns=turns,
                         **options)  # type: ignore[arg-type]


def turns_per_server(rows: list[TrajectoryRow], policy: OpenAIPolicy) -> dict[str, int]:
    """Turns played per server, by the server each episode ended on."""
    turns = {server.base_url: 0 for server in policy.pool.servers}
    for row in rows:
        turns[policy.pool.server_of(row.episode_id).base_url] += row.num_turns  # type: ignore[union-attr]
    return turns


def assert_all_played(rows: list[TrajectoryRow], episodes: int) -> None:
    assert sorted(row.key for row in rows) == sorted(sokoban(episodes, 1).episode_keys())
    for row in rows:
        assert row.error is None, row.error
        assert row.num_turns >= 1 and sum(row.completion_mask) > 0


def test_episodes_stay_on_one_server_and_load_spreads(stub: StubServer, up_ids: list[int],
                                                      renderer: ChatRenderer) -> None:
    with StubServer(delay=0.005, completion_ids=up_ids) as second:
        rows, policy = play([stub.base_url, second.base_url], renderer, sokoban(12, 3, concurrency=6))
    assert_all_played(rows, 12)
    stats = policy.server_stats()
    assert all(s.failures == 0 and s.moved_in == 0 for s in stats)
    # Every turn of an episode went to the one server it is kept on.
    assert turns_per_server(rows, policy) == {s.base_url: s.requests for s in stats}
    assert min(s.requests for s in stats) >= sum(s.requests for s in stats) // 4


def test_a_server_that_always_fails_loses_no_episode(stub: StubServer, up_ids: list[int],
                                                     renderer: ChatRenderer) -> None:
    with StubServer(delay=0.005, completion_ids=up_ids) as good, StubServer(delay=0.0, fail_every=1) as bad:
        rows, policy = play([stub.base_url, good.base_url, bad.base_url], renderer,
                            sokoban(12, 3, concurrency=6))
    assert_all_played(rows, 12)
    first, second, failing = policy.server_stats()
    assert failing.requests == failing.failures > 0 and "server error 500" in failing.last_error
    # The episodes first sent to the failing server went on elsewhere, turn by turn.
    assert first.moved_in + second.moved_in >= 1 and failing.moved_in == 0
    assert first.requests > 0 and second.requests > 0
    assert first.requests + second.requests == sum(row.num_turns for row in rows)


def test_a_server_that_fails_now_and_then_keeps_serving(stub: StubServer, up_ids: list[int],
                                                       renderer: ChatRenderer) -> None:
    with StubServer(delay=0.005, completion_ids=up_ids, fail_every=4) as flaky:
        rows, policy = play([stub.base_url, flaky.base_url], renderer, sokoban(12, 3, concurrency=6))
    assert_all_played(rows, 12)
    steady, flaky_stats = policy.server_stats()
    assert flaky_stats.failures > 0 and flaky_stats.requests - flaky_stats.failures > flaky_stats.failures
    assert steady.failures == 0 and steady.moved_in >= 1


def test_a_server_killed_mid_run_has_its_episodes_finished_elsewhere(renderer: ChatRenderer) -> None:
    # Not a move, so episodes play out their six turns (but for a level one "up" solves).
    wait = renderer.tokenizer.encode("<answer>Wait</answer>", add_special_tokens=False) + [renderer.eos_id]
    with StubServer(delay=0.02, completion_ids=wait) as kept, \
            StubServer(delay=0.02, completion_ids=wait) as killed:
        finished = 0

        def kill_after_two(rows: list[TrajectoryRow]) -> None:
            nonlocal finished
            finished += 1
            if finished == 2:
                killed.process.kill()  # type: ignore[union-attr]
        rows, policy = play([kept.base_url, killed.base_url], renderer, sokoban(16, 6, concurrency=8),
                            on_episode=kill_after_two)
    assert_all_played(rows, 16)
    turns = sum(row.num_turns for row in rows)
    assert all(row.stop_reason in ("turn_limit", "terminated") for row in rows) and turns > 16 * 5
    on_kept, on_killed = policy.server_stats()
    assert on_killed.failures >= 1 and on_kept.moved_in >= 1 and on_kept.failures == 0
    assert on_killed.requests - on_killed.failures > 0  # it served turns before it died
    assert on_kept.requests + on_killed.requests - on_killed.failures == turns


def test_when_every_server_fails_each_episode_is_recorded_with_the_reason(renderer: ChatRenderer) -> None:
    with StubServer(delay=0.0, fail_every=1) as one, StubServer(delay=0.0, drop_every=1) as two:
        rows, policy = play([one.base_url, two.base_url], renderer, sokoban(3, 2), retries=1)
    assert sorted(row.key for row in rows) == [(0, 0), (1, 0), (2, 0)]
    for row in rows:
        assert row.stop_reason == "error" and row.num_turns == 0
        assert "no server answered the request (after 3 attempts over 2 servers)" in row.error
        assert one.base_url in row.error and two.base_url in row.error
    assert all(s.requests == s.failures > 0 for s in policy.server_stats())


def test_chat_mode_spreads_over_servers_too(stub: StubServer, renderer: ChatRenderer) -> None:
    with StubServer(delay=0.005) as second:
        config = RolloutConfig(env_id="Bandit-LLM-v0", episodes=6, max_tokens_per_turn=8, chat_mode=True)
        rows, policy = play([stub.base_url, second.base_url], renderer, config)
    assert all(row.error is None and row.retokenized for row in rows) and len(rows) == 6
    assert all(s.requests > 0 for s in policy.server_stats())


@pytest.mark.slow
def test_the_builtin_server_takes_over_from_one_that_drops_connections(
        tiny_model: str, renderer: ChatRenderer) -> None:
    from agentgym.serve.launch import BuiltinServer

    with BuiltinServer(tiny_model) as builtin, StubServer(delay=0.0, drop_every=1) as dropping:
        config = sokoban(4, 2, concurrency=4, max_tokens_per_turn=12)
        rows, policy = play([dropping.base_url, builtin.base_url], renderer, config,
                            model=builtin.model_name, api_key=builtin.api_key)
    assert_all_played(rows, 4)
    for row in rows:
        assert not row.retokenized
        assert_aligned(row, renderer)
    dropped, served = policy.server_stats()
    assert dropped.failures == dropped.requests > 0 and served.failures == 0
    assert served.requests == sum(row.num_turns for row in rows) and served.moved_in >= 1


# --- the command line ------------------------------------------------------------------

def test_rollout_takes_several_base_urls_and_reports_each(stub: StubServer, up_ids: list[int],
                                                          tmp_path: Path) -> None:
    out = tmp_path / "rows.parquet"
    with StubServer(delay=0.005, completion_ids=up_ids) as second, \
            StubServer(delay=0.0, fail_every=1) as failing:
        args = ["rollout", "--env", "Sokoban-LLM-v0", "--episodes", "6", "--max-turns", "2",
                "--concurrency", "3", "--show", "0", "--out", str(out),
                "--base-url", stub.base_url, "--base-url", f"{second.base_url},{failing.base_url}"]
        result = CliRunner().invoke(app, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert sorted(row.key for row in read_rows(out)) == [(g, 0) for g in range(6)]
    assert all(row.error is None for row in read_rows(out))
    table = result.output[result.output.index("servers"):]
    cells = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:5]]
             for line in table.splitlines() if "http://" in line}
    assert set(cells) == {stub.base_url, second.base_url, failing.base_url}
    requests, failed, _ = cells[failing.base_url]
    assert requests == failed and int(failed) > 0
    assert all(int(cells[url][0]) > 0 and cells[url][1] == "0" for url in (stub.base_url, second.base_url))


def test_rollout_explains_a_bad_base_url() -> None:
    args = ["rollout", "--env", "Sokoban-LLM-v0", "--base-url", "http://127.0.0.1:1/v1,localhost:8000"]
    result = CliRunner().invoke(app, args, terminal_width=200)
    assert result.exit_code == 2
    assert "'localhost:8000' is not a server base URL" in result.output
