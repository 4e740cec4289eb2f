"""Expert demonstrations: rows in exactly the tokens and masks a model's rollout would have."""

from __future__ import annotations

import asyncio

import pytest

from agentgym.errors import ConfigError, UnknownEnvError
from agentgym.rollout import ScriptedPolicy
from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.experts import EXPERTS, expert_policy, has_expert
from agentgym.rollout.manager import EnvManager, RolloutConfig
from agentgym.rollout.policy import OpenAIPolicy
from agentgym.rollout.rows import TrajectoryRow
from agentgym.serve.stub import StubServer
from alignment import assert_aligned


def _play(config: RolloutConfig, policy: object, renderer: ChatRenderer) -> list[TrajectoryRow]:
    async def main() -> list[TrajectoryRow]:
        if isinstance(policy, StubServer):
            async with OpenAIPolicy(policy.base_url, "stub", timeout=10.0) as model:
                return await EnvManager(config, model, renderer=renderer).run()
        return await EnvManager(config, policy, renderer=renderer).run()
    return asyncio.run(main())


def test_solver_demos_are_aligned_and_always_solve(renderer: ChatRenderer) -> None:
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=12, seed=3)
    rows = _play(config, expert_policy("Sokoban-LLM-v0"), renderer)
    assert len(rows) == 12 and all(row.success and row.error is None for row in rows)
    for row in rows:
        assert_aligned(row, renderer)
        sampled = [token for token, bit in zip(row.completion_ids, row.completion_mask, strict=True) if bit]
        actions = [m.content for m in row.messages if m.role == "assistant"]
        expected = [token for action in actions
                    for token in renderer.tokenizer.encode(action, add_special_tokens=False) + [renderer.eos_id]]
        assert sampled == expected  # each move, then eos: what a model that stops by choice emits


def test_a_demo_row_equals_the_row_of_a_model_that_said_the_same(stub: StubServer,
                                                                 renderer: ChatRenderer) -> None:
    """The stub 'model' samples <answer>Up</answer><|im_end|> every turn; a scripted policy writes
    <answer>Up</answer>. Same seed, same turns: the very same ids and mask (only logprobs differ)."""
    config = RolloutConfig(env_id="Sokoban-LLM-v0", episodes=2, max_turns=4, seed=7)
    model_rows = _play(config, stub, renderer)
    demo_rows = _play(config, ScriptedPolicy(lambda observation: "<answer>Up</answer>"), renderer)
    for model_row, demo_row in zip(model_rows, demo_rows, strict=True):
        assert demo_row.prompt_ids == model_row.prompt_ids
        assert demo_row.completion_ids == model_row.completion_ids
        assert demo_row.completion_mask == model_row.completion_mask
        assert demo_row.messages == model_row.messages
        assert not demo_row.retokenized and demo_row.policy_version is None


def test_envs_without_an_expert_say_which_have_one() -> None:
    assert has_expert("Sokoban-LLM-v0") and not has_expert("Wordle-LLM-v0")
    with pytest.raises(ConfigError, match=r"Wordle-LLM-v0 has no expert policy \(--policy solver\); envs with one: "
                                          r"Bandit-LLM-v0, FrozenLake-LLM-v0"):
        expert_policy("Wordle-LLM-v0")
    with pytest.raises(UnknownEnvError, match="Sokoban-LLM-v0"):
        expert_policy("Sokoban-LLM-v1")


@pytest.mark.parametrize("env_id", sorted(EXPERTS))
def test_every_registered_expert_loads(env_id: str) -> None:
    assert callable(expert_policy(env_id).act)
