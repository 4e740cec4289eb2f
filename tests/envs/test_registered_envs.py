"""Properties every registered env must have, parametrised over the registry."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given
from hypothesis import strategies as st

import agentgym
from agentgym.core import TextEnv

ENV_IDS = [info.id for info in agentgym.list_envs() if info.family != "test"]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_check_env_passes(env_id: str) -> None:
    env = gym.make(env_id)
    check_env(env.unwrapped)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_make_with_module_prefix_needs_no_import(env_id: str) -> None:
    env = gym.make(f"agentgym:{env_id}")
    observation, info = env.reset(seed=0)
    assert isinstance(observation, str) and observation
    assert info["turn"] == 0


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_instructions_explain_the_action_format(env_id: str) -> None:
    env = gym.make(env_id).unwrapped
    assert isinstance(env, TextEnv)
    text = env.instructions
    assert len(text) > 100
    assert "answer" in text.lower() or "boxed" in text.lower()
    assert str(env.max_turns) in text


def _play_fixed_moves(env: gym.Env, seed: int, turns: int = 10) -> list[str]:
    """Observations of an episode whose actions come from a fixed RNG.

    Playing a few turns shows hidden state too (GuessNumber's first
    observation is the same for every seed; its replies are not).
    """
    rng = np.random.default_rng(1234)
    observations = [env.reset(seed=seed)[0]]
    for _ in range(turns):
        observation, _, terminated, truncated, _ = env.step(env.unwrapped.random_action(rng))
        observations.append(observation)
        if terminated or truncated:
            break
    return observations


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_episode_different_seeds_differ(env_id: str) -> None:
    env = gym.make(env_id)
    first = [_play_fixed_moves(env, seed) for seed in range(8)]
    assert first == [_play_fixed_moves(env, seed) for seed in range(8)]
    assert len({tuple(episode) for episode in first}) > 1


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_random_policy_plays_to_the_end(env_id: str) -> None:
    env = gym.make(env_id)
    rng = np.random.default_rng(0)
    for seed in range(3):
        env.reset(seed=seed)
        for _ in range(env.unwrapped.max_turns):
            action = env.unwrapped.random_action(rng)
            _, reward, terminated, truncated, info = env.step(action)
            assert isinstance(reward, float)
            assert isinstance(info["action_valid"], bool) and isinstance(info["success"], bool)
            if terminated or truncated:
                break
        assert terminated or truncated


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_unreadable_action_is_feedback_with_the_format_penalty(env_id: str) -> None:
    env = gym.make(env_id, format_penalty=0.25)
    env.reset(seed=1)
    observation, reward, terminated, _, info = env.step("I am not sure what to do here.")
    assert info["action_valid"] is False
    assert info["success"] is False
    assert not terminated or env.unwrapped.max_turns == 1  # a single-turn task ends anyway
    assert reward == pytest.approx(-0.25)
    assert observation.strip()


# Text a model might write: empty, huge, control characters, other scripts,
# tags opened and never closed, lone surrogates.
_HOSTILE_TEXT = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=50).map(lambda s: f"<answer>{s}</answer>"),
    st.builds(lambda s, n: f"<answer>{s}" * n, st.text(max_size=10), st.integers(1, 50)),
    st.sampled_from(["", " ", "\x00\x01\x02", "<answer></answer>", "<answer>||||</answer>",
                     "\\boxed{", "\\boxed{}", "<answer>" + "9" * 5000 + "</answer>",
                     "x" * 200_000, "\ud800", "<ANSWER> UP </ANSWER>", "<answer>1 1 1</answer>"]),
)


@pytest.mark.parametrize("env_id", ENV_IDS)
@given(actions=st.lists(_HOSTILE_TEXT, min_size=1, max_size=4))
def test_any_text_gives_a_valid_step(env_id: str, actions: list[str]) -> None:
    env = gym.make(env_id, disable_env_checker=True).unwrapped
    env.reset(seed=0)
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        assert observation in env.observation_space
        observation.encode("utf-8")  # raises if a surrogate got through
        assert np.isfinite(reward)
        assert isinstance(terminated, bool) and isinstance(truncated, bool)
        assert {"action_valid", "success", "turn"} <= info.keys()
        if terminated or truncated:
            env.reset(seed=0)
