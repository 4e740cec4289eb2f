"""Rows keep their turns: each turn's token span, its number in the episode, the observation
it acted on, and whether the logprobs are the server's; files written before are derived on read."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from agentgym.rollout import ExpertCorrection, RandomPolicy
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.experts import expert_policy
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policies import Policy
from agentgym.rollout.policy import OpenAIPolicy
from agentgym.rollout.rows import ARROW_SCHEMA, DERIVED_COLUMNS, TrajectoryRow, observation_hash
from agentgym.rollout.storage import RolloutWriter, read_rows
from agentgym.serve.stub import StubServer

SOKOBAN = "Sokoban-LLM-v0"


def play(config: RolloutConfig, policy: OpenAIPolicy | Policy, renderer: ChatRenderer | None,
         **manager: object) -> list[TrajectoryRow]:
    async def main() -> list[TrajectoryRow]:
        if isinstance(policy, OpenAIPolicy):
            async with policy:
                return await EnvManager(config, policy, renderer=renderer, **manager).run()
        return await EnvManager(config, policy, renderer=renderer, **manager).run()
    return asyncio.run(main())


def episode_turns(rows: list[TrajectoryRow]) -> dict[str, list[int]]:
    """Each episode's turn numbers, over its rows in order."""
    turns: dict[str, list[int]] = {}
    for row in sorted(rows, key=lambda r: (r.episode_id, r.row_index)):
        turns.setdefault(row.episode_id, []).extend(span.turn for span in row.turns)
    return turns


def observations(row: TrajectoryRow) -> list[str]:
    """The user message before each assistant message."""
    seen, last = [], ""
    for message in row.messages:
        if message.role == "assistant":
            seen.append(last)
        last = message.content if message.role == "user" else last
    return seen


def assert_spans_are_the_learned_runs(row: TrajectoryRow) -> None:
    """The spans of learned turns are exactly the runs of 1 in the mask; others are all 0."""
    mask = row.completion_mask
    covered = [0] * len(mask)
    for span in row.turns:
        assert 0 <= span.start < span.end <= len(mask)
        learned = set(mask[span.start:span.end])
        assert len(learned) == 1, "a turn is learned or not as a whole"
        covered[span.start:span.end] = [learned.pop()] * (span.end - span.start)
    assert covered == list(mask)


def test_spans_number_turns_and_hash_what_each_turn_saw(stub: StubServer, renderer: ChatRenderer,
                                                        up_ids: list[int]) -> None:
    config = RolloutConfig(env_id=SOKOBAN, episodes=3, max_turns=4, seed=1)
    rows = play(config, OpenAIPolicy(stub.base_url, "stub"), renderer)
    for row in rows:
        assert [span.turn for span in row.turns] == list(range(row.num_turns)) == list(range(len(row.turn_rewards)))
        assert [span.observation_hash for span in row.turns] == [observation_hash(o) for o in observations(row)]
        assert all(row.completion_ids[span.start:span.end] == up_ids for span in row.turns)
        assert_spans_are_the_learned_runs(row)
        assert row.server_logprobs
        assert all(row.logprobs[i] == -0.5 for span in row.turns for i in range(span.start, span.end))


def test_an_episode_split_into_rows_numbers_its_turns_across_them(up_ids: list[int],
                                                                  renderer: ChatRenderer) -> None:
    with StubServer(delay=0.001, completion_ids=up_ids, prompt_prefix=[99]) as server:
        rows = play(RolloutConfig(env_id=SOKOBAN, episodes=2, max_turns=4),
                    OpenAIPolicy(server.base_url, "stub"), renderer)
    assert len(rows) > 2  # several rows per episode
    for turns in episode_turns(rows).values():
        assert turns == list(range(len(turns)))
    for row in rows:
        assert row.turns and all(span.turn < len(row.turn_rewards) for span in row.turns)
        assert all(row.completion_ids[span.start:span.end] == up_ids for span in row.turns)
        hashes = [observation_hash(o) for o in observations(row)]
        assert [span.observation_hash for span in row.turns] == [hashes[span.turn] for span in row.turns]
        assert_spans_are_the_learned_runs(row)


def test_turns_played_but_not_learned_are_listed_and_expert_moves_are_not_the_servers(
        stub: StubServer, renderer: ChatRenderer) -> None:
    teacher = ExpertCorrection(expert_policy(SOKOBAN), 0.5, seed=1)
    rows = play(RolloutConfig(env_id=SOKOBAN, episodes=8, seed=3, max_turns=20),
                OpenAIPolicy(stub.base_url, "stub"), renderer, teacher=teacher)
    played_only = 0
    for row in rows:
        assert [span.turn for span in row.turns] == list(range(row.num_turns))
        assert_spans_are_the_learned_runs(row)
        played_only += sum(not any(row.completion_mask[s.start:s.end]) for s in row.turns)
        assert row.server_logprobs == (not row.retokenized)  # an expert's move has no server logprob
    assert played_only > 0 and any(row.retokenized for row in rows)


def test_a_model_free_policy_writes_spans_of_its_tokenized_moves(renderer: ChatRenderer) -> None:
    config = RolloutConfig(env_id=SOKOBAN, episodes=2, max_turns=5)
    rows = play(config, RandomPolicy(seed=0), renderer)
    for row in rows:
        assert not row.server_logprobs
        assert [span.turn for span in row.turns] == list(range(row.num_turns))
        moves = [m.content for m in row.messages if m.role == "assistant"]
        decoded = [renderer.decode(row.completion_ids[s.start:s.end]) for s in row.turns]
        assert decoded == [move + "<|im_end|>" for move in moves]  # the move and the eos it ends with
        assert_spans_are_the_learned_runs(row)
    # Without a renderer there are no token ids, so no spans.
    assert all(row.turns == [] and not row.server_logprobs for row in play(config, RandomPolicy(seed=0), None))


def test_a_file_written_before_rows_kept_turns_gets_them_derived_on_read(
        tmp_path: Path, up_ids: list[int], renderer: ChatRenderer) -> None:
    with StubServer(delay=0.001, completion_ids=up_ids, prompt_prefix=[99]) as server:
        rows = play(RolloutConfig(env_id=SOKOBAN, episodes=2, max_turns=3),
                    OpenAIPolicy(server.base_url, "stub"), renderer)
    rows += play(RolloutConfig(env_id=SOKOBAN, episodes=1, max_turns=3, seed=5), RandomPolicy(seed=0), renderer)
    assert len({row.episode_id for row in rows}) < len(rows)  # a multi-row episode among them
    old_schema = pa.schema([field for field in ARROW_SCHEMA if field.name not in DERIVED_COLUMNS])
    records = [{k: v for k, v in row.to_record().items() if k not in DERIVED_COLUMNS} for row in rows]
    legacy = tmp_path / "legacy.parquet"
    pq.write_table(pa.Table.from_pylist(records, schema=old_schema), legacy)
    assert set(DERIVED_COLUMNS).isdisjoint(pq.read_schema(legacy).names)

    assert read_rows(legacy) == rows  # the same turns and flags the manager wrote
    # A resumed run merges the old file with new rows into one file of the new schema.
    with RolloutWriter(legacy, resume=True) as writer:
        writer.add(play(RolloutConfig(env_id=SOKOBAN, episodes=1, seed=9), RandomPolicy(seed=1), renderer))
    assert set(DERIVED_COLUMNS) <= set(pq.read_schema(legacy).names)
    assert read_rows(legacy)[: len(rows)] == rows


def test_the_token_view_shows_turns_played_but_not_learned(stub: StubServer, renderer: ChatRenderer) -> None:
    from agentgym.cli.view_cmd import _token_view

    teacher = ExpertCorrection(expert_policy(SOKOBAN), 1.0, seed=1)  # the model's wrong moves are played
    rows = play(RolloutConfig(env_id=SOKOBAN, episodes=4, seed=3, max_turns=6),
                OpenAIPolicy(stub.base_url, "stub"), renderer, teacher=teacher)
    row = next(r for r in rows if any(not any(r.completion_mask[s.start:s.end]) for s in r.turns))
    view = _token_view(row, renderer.decode)
    yellow = [view.plain[span.start:span.end] for span in view.spans if span.style == "yellow"]
    unlearned = [s for s in row.turns if not any(row.completion_mask[s.start:s.end])]
    assert yellow == [renderer.decode(row.completion_ids[s.start:s.end]) for s in unlearned]
