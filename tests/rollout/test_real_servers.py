"""Rollouts through real servers: the built-in one and real vLLM, with the tiny model."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import pytest

from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policy import OpenAIPolicy, SamplingConfig
from agentgym.rollout.rows import TrajectoryRow, observation_hash
from alignment import assert_aligned


@pytest.fixture(scope="module", params=["builtin", pytest.param("vllm", marks=pytest.mark.vllm)])
def server(request: pytest.FixtureRequest, tiny_model: str) -> Iterator[tuple[str, str, str]]:
    """(base_url, model name, API key) of a real server playing the tiny model."""
    if request.param == "builtin":
        from agentgym.serve.launch import BuiltinServer

        with BuiltinServer(tiny_model) as builtin:
            yield builtin.base_url, builtin.model_name, builtin.api_key
        return
    vllm = request.getfixturevalue("real_vllm")  # the session's (tests/conftest.py)
    yield vllm.base_url, vllm.model_name, "EMPTY"


def rollout(server: tuple[str, str, str], renderer: ChatRenderer, config: RolloutConfig) -> list[TrajectoryRow]:
    base_url, model, api_key = server

    async def main() -> list[TrajectoryRow]:
        sampling = SamplingConfig(temperature=1.0, max_tokens=config.max_tokens_per_turn)
        async with OpenAIPolicy(base_url, model, api_key=api_key, sampling=sampling, timeout=120) as policy:
            return await EnvManager(config, policy, renderer=renderer).run()
    return asyncio.run(main())


def test_a_rollout_records_aligned_tokens_and_real_logprobs(server: tuple[str, str, str], renderer: ChatRenderer) -> None:
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=4, group_size=2, max_turns=3,
                           max_tokens_per_turn=12, max_context_tokens=2048, concurrency=4)
    rows = rollout(server, renderer, config)
    assert len({row.key for row in rows}) == 4
    for row in rows:
        assert row.error is None, row.error
        assert not row.retokenized and row.num_turns >= 1
        assert_aligned(row, renderer)
        sampled = [lp for lp, m in zip(row.logprobs, row.completion_mask, strict=True) if m]
        assert sampled and all(math.isfinite(lp) and lp <= 0 for lp in sampled)
        assert any(lp < 0 for lp in sampled)  # sampled at temperature 1 from a random model


def test_each_turns_span_is_exactly_the_tokens_the_server_sampled(server: tuple[str, str, str],
                                                                  renderer: ChatRenderer) -> None:
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=3, max_turns=4, max_tokens_per_turn=12,
                           max_context_tokens=2048, concurrency=3, seed=4)
    rows = rollout(server, renderer, config)
    for row in rows:
        assert row.error is None and row.server_logprobs
        assert [span.turn for span in row.turns] == list(range(len(row.turn_rewards)))
        assistant = [m.content for m in row.messages if m.role == "assistant"]
        users = [m.content for m in row.messages if m.role == "user"][: len(assistant)]  # the last one ends it
        for span, text, seen in zip(row.turns, assistant, users, strict=True):
            ids = row.completion_ids[span.start:span.end]
            # The server's text leaves special tokens out (vLLM's skip_special_tokens) and holds
            # back a UTF-8 character cut off by max_tokens.
            assert renderer.tokenizer.decode(ids, skip_special_tokens=True).rstrip("\ufffd") == text.rstrip("\ufffd")
            assert row.completion_mask[span.start:span.end] == [1] * len(ids)
            assert span.end == len(row.completion_mask) or row.completion_mask[span.end] == 0
            assert span.observation_hash == observation_hash(seen)  # user message k is turn k's observation


def test_chat_mode_retokenizes_and_says_so(server: tuple[str, str, str], renderer: ChatRenderer) -> None:
    config = RolloutConfig(env_id="Bandit-LLM-v0", episodes=2, max_tokens_per_turn=8, chat_mode=True)
    rows = rollout(server, renderer, config)
    assert all(row.error is None and row.retokenized and row.num_turns == 1 for row in rows)
    assert all(not row.server_logprobs and len(row.turns) == 1 for row in rows)
