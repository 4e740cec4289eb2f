"""rm:ENV_ID ids: any env scored by a reward model, from Python and from the command line, with the
model in process or behind its server (real HTTP on loopback)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import agentgym
from agentgym.cli import app
from agentgym.errors import ConfigError, UnknownEnvError
from agentgym.registry import env_info
from agentgym.rewards.model import RewardModelReward, scored_conversation
from agentgym.rewards.server import RewardModelServer
from agentgym.rollout.storage import read_rows

runner = CliRunner()
ACTION = "<answer>Dragon</answer>"


def _played_conversation(env: gym.Env, observation: str) -> list[dict[str, str]]:
    """What the reward model is asked about a one-turn Bandit episode."""
    return [{"role": "system", "content": env.get_wrapper_attr("instructions")},
            {"role": "user", "content": observation}, {"role": "assistant", "content": ACTION}]


def test_an_rm_id_pays_the_reward_model_s_score(reward_folder: Path, in_process: RewardModelReward) -> None:
    env = agentgym.make("rm:Bandit-LLM-v0", reward_model=str(reward_folder), arm_names=["Left", "Right"])
    observation, _ = env.reset(seed=1)
    assert "Left" in observation  # the other arguments went to the env inside
    _, reward, terminated, truncated, info = env.step(ACTION)
    assert terminated or truncated
    score = in_process.score(_played_conversation(env, observation))
    assert reward == pytest.approx(score, abs=1e-5) and info["reward_model_score"] == pytest.approx(score, abs=1e-5)
    env.close()
    info = env_info("rm:Bandit-LLM-v0")
    assert (info.source, info.kwargs, "remote" in info.tags) == ("rm", {"env": "Bandit-LLM-v0"}, True)


def test_plain_gymnasium_and_the_mode_and_scale_arguments(reward_folder: Path, in_process: RewardModelReward) -> None:
    env = gym.make("RewardModel-LLM-v0", env="Bandit-LLM-v0", reward_model=str(reward_folder),
                   reward_model_mode="add", reward_model_scale=0.5)
    bare = agentgym.make("Bandit-LLM-v0")
    observation, _ = env.reset(seed=4)
    bare.reset(seed=4)
    _, reward, *_ = env.step(ACTION)
    _, env_reward, *_ = bare.step(ACTION)
    score = in_process.score(_played_conversation(env, observation))
    assert reward == pytest.approx(float(env_reward) + 0.5 * score, abs=1e-5)
    env.close()


def _rollout_rewards_are_scores(model: str, out: Path, in_process: RewardModelReward) -> None:
    """`agentgym rollout --env rm:Bandit-LLM-v0 -k reward_model=MODEL`: each episode's reward is its score."""
    result = runner.invoke(app, ["rollout", "--env", "rm:Bandit-LLM-v0", "-k", f"reward_model={model}",
                                 "--policy", "random", "--episodes", "4", "--out", str(out)], terminal_width=200)
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    assert len(rows) == 4
    conversations = [scored_conversation([m.model_dump() for m in row.messages]) for row in rows]
    assert [row.reward for row in rows] == pytest.approx(in_process.score_many(conversations), abs=1e-5)
    assert len({round(row.reward, 6) for row in rows}) > 1  # the random policy's episodes differ


def test_the_command_line_plays_against_a_model_folder(reward_folder: Path, in_process: RewardModelReward,
                                                       tmp_path: Path) -> None:
    _rollout_rewards_are_scores(str(reward_folder), tmp_path / "rows.parquet", in_process)


def test_the_command_line_plays_against_a_reward_model_server(in_process: RewardModelReward, tmp_path: Path) -> None:
    with RewardModelServer(in_process) as server:
        assert server.url.startswith("http://127.0.0.1:")
        _rollout_rewards_are_scores(server.url, tmp_path / "rows.parquet", in_process)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "rm:Bandit-LLM-v0 needs its reward model: -k reward_model=FOLDER"),
        (["-k", "reward_model=runs/no/such"], "Cannot load the reward model 'runs/no/such' (there is no such folder)"),
        (["-k", "reward_model=http://127.0.0.1:1", "-k", "reward_model_mode=sum"], "reward_model_mode must be replace"),
        (["-k", "reward_model=http://127.0.0.1:1", "-k", "colour=red"], "Bandit-LLM-v0 has no argument 'colour'"),
    ],
)
def test_bad_arguments_are_one_line(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["rollout", "--env", "rm:Bandit-LLM-v0", "--policy", "random", "--episodes", "1",
                                 *args], terminal_width=300)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_a_bad_id_says_what_was_meant() -> None:
    with pytest.raises(UnknownEnvError, match="Did you mean 'Bandit-LLM-v0'"):
        agentgym.make("rm:Bandt-LLM-v0", reward_model="http://127.0.0.1:1")
    with pytest.raises(ConfigError, match="write it as rm:ENV_ID"):
        agentgym.make("rm:", reward_model="http://127.0.0.1:1")
    with pytest.raises(ConfigError, match="sets env already"):
        agentgym.make("rm:Bandit-LLM-v0", env="Sokoban-LLM-v0", reward_model="http://127.0.0.1:1")


def test_an_episode_the_turn_budget_cuts_short_is_scored_where_it_was_cut(
        reward_folder: Path, in_process: RewardModelReward, tmp_path: Path) -> None:
    """Sokoban never ends in two random turns, so only the rollout manager's turn budget stops it;
    the score of its conversation up to its second action is its whole reward (replace mode)."""
    out = tmp_path / "rows.parquet"
    result = runner.invoke(app, ["rollout", "--env", "rm:Sokoban-LLM-v0", "-k", f"reward_model={reward_folder}",
                                 "--policy", "random", "--episodes", "3", "--turn-budget", "2", "--out", str(out)],
                           terminal_width=200)
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    assert [row.stop_reason for row in rows] == ["turn_budget"] * 3
    assert all(sum(m.role == "assistant" for m in row.messages) == 2 for row in rows)
    conversations = [scored_conversation([m.model_dump() for m in row.messages]) for row in rows]
    scores = in_process.score_many(conversations)
    assert [row.reward for row in rows] == pytest.approx(scores, abs=1e-5)
    assert all(score != 0 for score in scores)  # a cut episode is no longer paid 0


def test_the_server_client_needs_only_what_the_rollout_extra_installs(
        in_process: RewardModelReward, monkeypatch: pytest.MonkeyPatch) -> None:
    """`scripts/setup.sh train,serve,rollout` (the README's) installs openai's httpx2, not httpx: with httpx
    unimportable, scoring through the server still works."""
    import sys

    monkeypatch.setitem(sys.modules, "httpx", None)  # `import httpx` raises ImportError
    conversation = [{"role": "user", "content": "Arms: Dragon, Phoenix."}, {"role": "assistant", "content": ACTION}]
    with RewardModelServer(in_process) as server, RewardModelReward(server.url) as remote:
        assert remote.score(conversation) == pytest.approx(in_process.score(conversation), abs=1e-5)
