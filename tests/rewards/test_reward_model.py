"""RewardModelReward: a reward model with a fixed head scores conversations in process, behind the
server (real HTTP on loopback), and as the reward of an env's episodes, the numbers the trainer computes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

import agentgym
from agentgym.errors import ConfigError, JudgeError
from agentgym.rewards.model import RewardModelReward, RewardModelWrapper, conversation_ids, scored_conversation
from agentgym.rewards.server import RewardModelServer

CONVERSATIONS = [
    [{"role": "system", "content": "Pick an arm."}, {"role": "user", "content": "Arms: Dragon, Phoenix."},
     {"role": "assistant", "content": "<answer>Dragon</answer>"}],
    [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}],
]


def _by_hand(folder: Path, messages: list[dict[str, str]]) -> float:
    """transformers' own score of one conversation, no padding."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)
    with torch.no_grad():
        return float(model(input_ids=torch.tensor([list(ids)])).logits[0, 0])


def test_in_process_scores_are_the_model_s_own(in_process: RewardModelReward, reward_folder: Path) -> None:
    expected = [_by_hand(reward_folder, messages) for messages in CONVERSATIONS]
    assert in_process.score(CONVERSATIONS[0]) == pytest.approx(expected[0], abs=1e-5)
    # a batch pads the shorter conversation: the same scores
    assert in_process.score_many(CONVERSATIONS) == pytest.approx(expected, abs=1e-5)
    assert expected[0] != pytest.approx(expected[1])


def test_the_trainer_reads_an_episode_as_the_reward_scores_it(in_process: RewardModelReward) -> None:
    """An episode's tokens in --trainer rm (its conversation less the env's last reply) are what
    RewardModelReward scores of the wrapper's conversation."""
    from agentgym.rollout.rows import Message, TrajectoryRow
    from agentgym.trainers.learners.rm import episode_tokens

    played = CONVERSATIONS[0] + [{"role": "user", "content": "You won 1.0."}]
    row = TrajectoryRow(episode_id="e", group_id=0, index_in_group=0, env_id="Bandit-LLM-v0", seed=0,
                        prompt_ids=[5, 6], completion_ids=[7], completion_mask=[1],
                        messages=[Message(**m) for m in played])
    tokens = episode_tokens([row], in_process._local.tokenizer)
    assert tokens == conversation_ids(in_process._local.tokenizer, CONVERSATIONS[0])
    assert scored_conversation(played) == CONVERSATIONS[0]


def test_a_folder_that_is_no_reward_model_is_one_clear_error(tiny_model: str, tmp_path: Path) -> None:
    from transformers import AutoModelForSequenceClassification

    AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=3).save_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").write_bytes((Path(tiny_model) / "tokenizer.json").read_bytes())
    (tmp_path / "tokenizer_config.json").write_bytes((Path(tiny_model) / "tokenizer_config.json").read_bytes())
    with pytest.raises(ConfigError, match="is not a reward model: its head has 3 labels"):
        RewardModelReward(str(tmp_path), device="cpu")
    with pytest.raises(ConfigError, match="batch_size must be an integer >= 1"):
        RewardModelReward("http://127.0.0.1:1", batch_size=0)


def test_the_server_scores_as_the_model_does_in_process(in_process: RewardModelReward) -> None:
    with RewardModelServer(in_process, api_key="k") as server:
        with RewardModelReward(server.url, api_key="k", timeout=30) as remote:
            assert remote.score_many(CONVERSATIONS) == pytest.approx(in_process.score_many(CONVERSATIONS), abs=1e-6)
        with RewardModelReward(server.url, api_key="wrong", timeout=30) as stranger:
            with pytest.raises(JudgeError, match=r"refused the request \(401\)"):
                stranger.score(CONVERSATIONS[1])
        request = urllib.request.Request(f"{server.url}/score", data=json.dumps({"conversations": []}).encode(),
                                         headers={"Authorization": "Bearer k", "Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 422
        refused.value.close()


def test_a_server_that_is_not_there_is_a_judge_error() -> None:
    from agentgym.serve.launch import free_port

    with RewardModelReward(f"http://127.0.0.1:{free_port()}", timeout=5) as remote:
        with pytest.raises(JudgeError, match="did not answer"):
            remote.score(CONVERSATIONS[1])


@pytest.mark.parametrize("mode", ["replace", "add"])
def test_the_wrapper_pays_an_episode_its_score_at_the_end(in_process: RewardModelReward, mode: str) -> None:
    env = RewardModelWrapper(agentgym.make("Bandit-LLM-v0"), in_process, mode=mode, scale=2.0)
    bare = agentgym.make("Bandit-LLM-v0")
    observation, _ = env.reset(seed=3)
    bare.reset(seed=3)
    action = "<answer>Dragon</answer>"
    _, reward, terminated, truncated, info = env.step(action)
    _, env_reward, *_ = bare.step(action)
    assert terminated or truncated  # Bandit is one turn
    conversation = [{"role": "system", "content": env.get_wrapper_attr("instructions")},
                    {"role": "user", "content": observation}, {"role": "assistant", "content": action}]
    score = in_process.score(conversation)
    assert info["reward_model_score"] == pytest.approx(score)
    assert reward == pytest.approx(2.0 * score + (float(env_reward) if mode == "add" else 0.0))
    env.close()
