"""Fixtures of the trainer tests: the tiny model's renderer, hand-made trajectory rows, and real
multi-turn Sokoban rows in which some turns change nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.experts import expert_policy
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.rows import TrajectoryRow, TurnSpan, observation_hash
from agentgym.rollout.storage import RolloutWriter


@pytest.fixture(scope="session")
def tiny_renderer(tiny_model: str) -> ChatRenderer:
    from transformers import AutoTokenizer

    return ChatRenderer(AutoTokenizer.from_pretrained(tiny_model))


RowFactory = Callable[..., TrajectoryRow]


@pytest.fixture(scope="session")
def make_row(tiny_renderer: ChatRenderer) -> RowFactory:
    """A one-turn Bandit-like row: the answer's tokens sampled (mask 1), the turn's close not."""

    def make(answer: str = "<answer>Dragon</answer>", *, reward: float = 1.0, group: int = 0, index: int = 0,
             seed: int = 0, logprob: float = -0.5, version: int | None = 0, row_index: int = 0,
             prompt: str = "Choose an arm.") -> TrajectoryRow:
        sampled = tiny_renderer.tokenizer.encode(answer, add_special_tokens=False) + [tiny_renderer.eos_id]
        close = tiny_renderer.close_turn_ids(sampled)
        return TrajectoryRow(
            episode_id=f"Bandit-LLM-v0/s{seed}/g{group}/e{index}", group_id=group, index_in_group=index,
            row_index=row_index, env_id="Bandit-LLM-v0", seed=seed,
            prompt_ids=tiny_renderer.prompt_ids("Pick the best arm.", prompt),
            completion_ids=sampled + close, completion_mask=[1] * len(sampled) + [0] * len(close),
            logprobs=[logprob] * len(sampled) + [0.0] * len(close), reward=reward, success=reward > 0.5,
            num_turns=1, terminated=True, stop_reason="terminated", policy_version=version,
            turns=[TurnSpan(turn=0, start=0, end=len(sampled), observation_hash=observation_hash(prompt))],
            server_logprobs=logprob != 0.0, tokenizer=tiny_renderer.tokenizer_id)

    return make


GroupsWriter = Callable[..., Path]


@pytest.fixture(scope="session")
def write_groups(make_row: RowFactory) -> GroupsWriter:
    """A Parquet file of Bandit groups, as a rollout writes it: ``groups[g]`` lists group g's
    episodes as (answer, reward); group g is seeded 100 + g and prompted "Task g."."""

    def write(path: Path, groups: Sequence[Sequence[tuple[str, float]]], **row: object) -> Path:
        with RolloutWriter(path) as writer:
            for group, episodes in enumerate(groups):
                writer.add([make_row(answer, reward=reward, group=group, index=i, seed=100 + group,
                                     prompt=f"Task {group}.", **row)
                            for i, (answer, reward) in enumerate(episodes)])
        return path

    return write


@pytest.fixture
def bandit_rows(write_groups: GroupsWriter, tmp_path: Path) -> Path:
    """Six groups of four Bandit episodes: Dragon pays, Phoenix less, one unreadable."""
    answers = [("<answer>Dragon</answer>", 1.0), ("<answer>Phoenix</answer>", 0.3),
               ("<answer>Dragon</answer>", 0.0), ("what?", -0.1)]
    return write_groups(tmp_path / "rows.parquet", [answers] * 6, logprob=0.0, version=None)


STALL = "<answer>Jump</answer>"  # not a move: the turn changes nothing and costs the format penalty


class _StallThenSolve:
    """Member ``m`` of a group writes ``stalls[m]`` unreadable answers, then plays the solver's moves."""

    def __init__(self, stalls: list[int]) -> None:
        self.stalls = stalls

    def for_episode(self, seed: int, member: int) -> Any:  # the manager's per-episode hook
        del seed
        return _Stalling(self.stalls[member])


class _Stalling:
    def __init__(self, stalls: int) -> None:
        self.stalls = stalls
        self.solver = expert_policy("Sokoban-LLM-v0")

    def act(self, observation: str, env: Any) -> str:
        if self.stalls > 0:
            self.stalls -= 1
            return STALL
        return self.solver.act(observation, env)


StallRollout = Callable[..., list[TrajectoryRow]]


@pytest.fixture(scope="session")
def stall_rollout(tiny_renderer: ChatRenderer) -> StallRollout:
    """One group of real Sokoban episodes (8 turns at most); member ``m`` first stalls ``stalls[m]`` turns."""

    def play(stalls: list[int], seed: int = 11) -> list[TrajectoryRow]:
        config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=len(stalls), group_size=len(stalls),
                               max_turns=8, seed=seed)
        rows = asyncio.run(EnvManager(config, _StallThenSolve(stalls), renderer=tiny_renderer).run())
        return sorted(rows, key=lambda row: row.index_in_group)

    return play


@pytest.fixture(scope="session")
def stall_rows(stall_rollout: StallRollout) -> list[TrajectoryRow]:
    """A real group on one level: the solver; two stalls, then the solver; stalls until the turn limit."""
    rows = stall_rollout([0, 2, 99])
    assert [row.success for row in rows] == [True, True, False]
    assert rows[1].num_turns == rows[0].num_turns + 2 and rows[2].num_turns == 8
    return rows
