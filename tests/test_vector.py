from __future__ import annotations

import pytest

import agentgym
from agentgym.errors import ConfigError, UnknownEnvError


@pytest.mark.parametrize("asynchronous", [False, True])
def test_vector_env_returns_the_real_text(asynchronous: bool) -> None:
    envs = agentgym.make_vec("Sokoban-LLM-v0", 3, asynchronous=asynchronous)
    try:
        observations, infos = envs.reset(seed=[0, 1, 2])
        singles = [agentgym.make("Sokoban-LLM-v0").reset(seed=seed)[0] for seed in range(3)]
        assert list(observations) == singles
        observations, rewards, terminated, truncated, infos = envs.step(("<answer>Up</answer>",) * 3)
        assert all(isinstance(text, str) and "#" in text for text in observations)
        assert infos["action_valid"].tolist() == [True, True, True]
    finally:
        envs.close()


def test_shared_memory_is_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match="corrupts text observations"):
        agentgym.make_vec("Sokoban-LLM-v0", 2, asynchronous=True, shared_memory=True)


def test_kwargs_reach_every_env_and_bad_ids_are_caught() -> None:
    envs = agentgym.make_vec("Sokoban-LLM-v0", 2, dim_room=7)
    assert all(env.unwrapped.dim_room == (7, 7) for env in envs.envs)
    envs.close()
    with pytest.raises(UnknownEnvError, match="Did you mean"):
        agentgym.make_vec("Sokobam-LLM-v0", 2)
