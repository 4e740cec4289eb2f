"""agentgym envs in TRL: GRPOTrainer(environment_factory=trl_environment(...)) runs a real step."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

import agentgym
from agentgym.interop.trl_env import AgentGymTRLEnv, trl_dataset, trl_environment

ENV_ID = "Sokoban-LLM-v0"
MOVE = "<answer>Up</answer>"


def test_the_class_plays_the_env_as_gym_make_does() -> None:
    env = trl_environment(ENV_ID)()
    local = agentgym.make(ENV_ID)
    assert env.reset(seed=7, prompt=[]) == local.reset(seed=7)[0]
    total = 0.0
    for move in (MOVE, "nonsense", "<answer>Left</answer>"):
        observation, reward, *_ = local.step(move)
        total += float(reward)
        assert env.act(move) == observation
    assert env.get_reward() == pytest.approx(total)
    assert env.moves == [MOVE, "nonsense", "<answer>Left</answer>"]


def test_a_finished_episode_takes_no_more_moves() -> None:
    env = trl_environment("Bandit-LLM-v0")()
    env.reset(seed=0)
    assert env.act("<answer>A</answer>").endswith("(The episode is over.)")
    reward = env.get_reward()
    assert env.act("<answer>B</answer>") == "The episode is over: no more moves are played."
    assert env.get_reward() == reward and env.moves == ["<answer>A</answer>"]


def test_the_dataset_carries_instructions_and_seeds() -> None:
    rows = trl_dataset(ENV_ID, episodes=3, seed=10)
    assert rows["seed"] == [10, 11, 12]
    system, user = rows[0]["prompt"]
    assert system == {"role": "system", "content": agentgym.make(ENV_ID).unwrapped.instructions}
    assert user == {"role": "user", "content": ""}


def test_a_bad_env_fails_when_the_class_is_made() -> None:
    with pytest.raises(agentgym.AgentGymError, match="Did you mean .Sokoban-LLM-v0."):
        trl_environment("Sokobn-LLM-v0")


def _forced_tool_call_bias(tokenizer: object, prompt_tail: list[int], completion: str) -> dict:
    """A sampler bias (transformers' ``sequence_bias``) that makes the tiny random model write
    ``completion`` after ``prompt_tail``: each token gets +100 when the 8 before it match.

    The tiny model has random weights, so without it the model never writes a tool call
    and TRL never calls the env's tool; the bias only steers sampling, everything else
    (generation, TRL's tool-call parsing and loop, the env, the reward) is real.
    """
    context = 8
    target = tokenizer(completion, add_special_tokens=False)["input_ids"]
    assert len(prompt_tail) >= context
    full = prompt_tail[-context:] + target
    keys = [tuple(full[i - context:i + 1]) for i in range(context, len(full))]
    following = {key[:-1]: key[-1] for key in keys}
    assert all(following[key[:-1]] == key[-1] for key in keys), "a context must choose one next token"
    return {key: 100.0 for key in keys}


@pytest.mark.slow
def test_grpo_trainer_runs_a_step_whose_reward_is_the_envs(tiny_model: str, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.padding_side = "left"
    # The tiny model's own template renders no tool calls; TRL needs one that does (and
    # knows how to parse): Qwen 2.5's, on the same <|im_start|> tokens.
    tokenizer.chat_template = qwen2_5_chat_template
    # How every prompt ends (the end of a user turn, the assistant's header), whatever it holds.
    tail = tokenizer.apply_chat_template([{"role": "user", "content": "."}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False)
    call = f'<tool_call>\n{{"name": "act", "arguments": {{"action": "{MOVE}"}}}}\n</tool_call><|im_end|>'
    played: list[AgentGymTRLEnv] = []

    class Recorded(trl_environment(ENV_ID)):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            played.append(self)

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    with warnings.catch_warnings():
        # transformers warns about its own renamed argument, which TRL still sets.
        warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)
        args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, max_steps=1,
                          per_device_train_batch_size=2, num_generations=2, max_completion_length=64,
                          max_tool_calling_iterations=1, activation_checkpointing=False, report_to=[],
                          logging_steps=1, save_strategy="no", disable_tqdm=True,
                          generation_kwargs={"sequence_bias": _forced_tool_call_bias(tokenizer, tail, call)})
        trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model), processing_class=tokenizer,
                              args=args, train_dataset=trl_dataset(ENV_ID, episodes=1, seed=3),
                              environment_factory=Recorded)
        trainer.train()

    logged = trainer.state.log_history[0]
    rollouts = [env for env in played if env.moves]
    assert len(rollouts) == 2 and all(env.moves == [MOVE] for env in rollouts)
    local = agentgym.make(ENV_ID)
    local.reset(seed=3)
    expected = float(local.step(MOVE)[1])
    assert [env.get_reward() for env in rollouts] == [expected, expected]
    assert logged["tools/call_frequency"] == 1.0
    assert logged["rewards/Recorded/mean"] == pytest.approx(expected)
