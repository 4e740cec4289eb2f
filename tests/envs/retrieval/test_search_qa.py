"""SearchQA-LLM-v0: search, then answer; exact match rewarded, F1 reported."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import agentgym
from agentgym.envs.retrieval import SearchQAEnv, SearchTool, get_retriever
from agentgym.errors import ConfigError
from agentgym.tools import ToolWrapper

ENV_ID = "SearchQA-LLM-v0"


def play_by_the_book(env: gym.Env, seed: int) -> tuple[float, dict, list[str]]:
    """Search each hop's key phrase, check the fact it needs came back, answer."""
    observation, info = env.reset(seed=seed)
    item = env.unwrapped.item
    seen = [observation]
    for hop in item.hops:
        observation, reward, terminated, truncated, info = env.step(f"<search>{hop.query}</search>")
        assert (reward, terminated, truncated, info["tool_turn"]) == (0.0, False, False, True)
        assert hop.answer in observation, (item.question, hop, observation)
        seen.append(observation)
    answer = f"The answer: <answer>{item.answers[0]}</answer>"
    observation, reward, terminated, _, info = env.step(answer)
    assert terminated
    return float(reward), info, seen


def test_the_env_is_registered_with_the_search_tool() -> None:
    env = gym.make(ENV_ID)
    assert isinstance(env.unwrapped, SearchQAEnv)
    assert agentgym.env_info(ENV_ID).family == "retrieval"
    instructions = env.get_wrapper_attr("instructions")
    assert "<search>query</search>" in instructions and "<answer>Eskerford</answer>" in instructions


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_an_agent_that_searches_then_answers_gets_reward_1(hops: int) -> None:
    env = gym.make(ENV_ID, hops=hops)
    for seed in range(15):
        reward, info, seen = play_by_the_book(env, seed)
        assert reward == 1.0 and info["success"] and info["em"] and info["f1"] == 1.0
        assert info["tool_calls"] == hops == len(seen) - 1


def test_the_default_asks_one_and_two_hop_questions() -> None:
    env = gym.make(ENV_ID)
    counts = {env.reset(seed=seed)[1]["hops"] for seed in range(40)}
    assert counts == {1, 2}


def test_a_wrong_answer_gets_0_and_partial_overlap_shows_in_f1() -> None:
    env = gym.make(ENV_ID, hops=1)
    question = {"question": "Who founded it?", "answers": ["Mira Tolven"]}
    env.reset(seed=0, options={"question": question})
    observation, reward, terminated, truncated, info = env.step("<answer>Mira</answer>")
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["action_valid"] and not info["success"] and info["em"] is False
    assert info["f1"] == pytest.approx(2 / 3)
    assert observation.startswith("'Mira' is not correct.")


def test_the_answer_is_normalised_before_matching() -> None:
    env = gym.make(ENV_ID)
    env.reset(seed=0, options={"question": {"question": "Which?", "answer": "Halvard Institute"}})
    assert env.step("<answer> the HALVARD institute. </answer>")[1] == 1.0


@pytest.mark.parametrize("action", ["Eskerford", "<answer></answer>", "<answer>   </answer>", ""])
def test_an_action_without_an_answer_is_feedback_with_the_penalty(action: str) -> None:
    env = gym.make(ENV_ID, format_penalty=0.3)
    env.reset(seed=2)
    observation, reward, _, _, info = env.step(action)
    assert reward == pytest.approx(-0.3)
    assert info["action_valid"] is False
    assert "<answer>...</answer>" in observation


def test_a_malformed_search_is_feedback_and_the_episode_goes_on() -> None:
    env = gym.make(ENV_ID, format_penalty=0.3)
    env.reset(seed=2)
    no_query = '<tool_call>{"name": "search", "arguments": {}}</tool_call>'
    observation, reward, terminated, _, info = env.step(no_query)
    assert "<tool_error>" in observation and "query" in observation
    assert (reward, terminated, info["action_valid"]) == (pytest.approx(-0.3), False, False)
    observation, reward, terminated, _, info = env.step("<search>   </search>")
    assert "empty" in observation and not terminated


def test_searches_are_capped_by_max_calls() -> None:
    env = gym.make(ENV_ID, max_calls=2)
    env.reset(seed=0)
    env.step("<search>city</search>")
    observation, *_ = env.step("<search>river</search>")
    assert "used all 2 tool calls" in observation
    observation, _, terminated, _, info = env.step("<search>more</search>")
    assert terminated and info["action_valid"] is False and "were not run" in observation


def test_more_turns_allow_another_answer() -> None:
    env = gym.make(ENV_ID, max_turns=2)
    env.reset(seed=4)
    answer = env.unwrapped.item.answers[0]
    observation, reward, terminated, truncated, _ = env.step("<answer>Nowhere</answer>")
    assert (reward, terminated, truncated) == (0.0, False, False) and "Try again" in observation
    assert env.step(f"<answer>{answer}</answer>")[1:3] == (1.0, True)


def test_the_same_seed_asks_the_same_question_and_seeds_differ() -> None:
    env = gym.make(ENV_ID)
    first = [env.reset(seed=seed)[0] for seed in range(20)]
    assert first == [gym.make(ENV_ID).reset(seed=seed)[0] for seed in range(20)]
    assert len(set(first)) > 15


def test_another_world_seed_is_another_world() -> None:
    default, other = gym.make(ENV_ID).unwrapped, gym.make(ENV_ID, world_seed=1).unwrapped
    assert default.corpus.fingerprint != other.corpus.fingerprint
    reward, *_ = play_by_the_book(gym.make(ENV_ID, world_seed=1, world_size=40), seed=3)
    assert reward == 1.0


def test_envs_of_one_corpus_share_one_index() -> None:
    first, second = gym.make(ENV_ID), gym.make(ENV_ID)
    assert first.get_wrapper_attr("tools")["search"].retriever is \
        second.get_wrapper_attr("tools")["search"].retriever
    assert first.unwrapped.corpus is second.unwrapped.corpus


def test_options_pick_or_pose_a_question() -> None:
    env = gym.make(ENV_ID)
    questions = env.unwrapped.questions
    observation, info = env.reset(seed=0, options={"index": 5})
    assert questions[5].question in observation and info["kind"] == questions[5].kind
    with pytest.raises(ConfigError, match=r'options\["index"\] must be at most'):
        env.reset(options={"index": len(questions)})
    with pytest.raises(ConfigError, match=r'options\["question"\] must have a non-empty string'):
        env.reset(options={"question": {"question": "Who?"}})


def test_your_own_corpus_and_questions_from_jsonl(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(row) for row in [
        {"title": "Kettle Lake", "text": "Kettle Lake lies north of the Salt Hills."},
        {"title": "Salt Hills", "text": "The Salt Hills are home to the rare blue heron."},
        {"title": "Blue heron", "text": "The blue heron nests in reeds."},
    ]))
    questions = tmp_path / "qa.jsonl"
    questions.write_text(json.dumps({
        "question": "Which bird lives in the hills north of which Kettle Lake lies?",
        "answers": ["blue heron", "heron"]}) + "\n")
    env = gym.make(ENV_ID, corpus=str(corpus), questions=questions, max_calls=3)
    observation, info = env.reset(seed=0)
    assert "Which bird" in observation and info["hops"] == 0
    assert "Salt Hills" in env.step("<search>Kettle Lake</search>")[0]
    assert "blue heron" in env.step("<search>Salt Hills</search>")[0]
    _, reward, terminated, _, info = env.step("<answer>The blue heron</answer>")
    assert (reward, terminated, info["em"]) == (1.0, True, True)
    assert "documents of the knowledge base" in env.unwrapped.instructions


def test_your_own_data_as_lists() -> None:
    env = SearchQAEnv(corpus=[{"title": "A", "text": "Alpha."}],
                      questions=[{"question": "First letter?", "answer": "alpha"}])
    env.reset(seed=0)
    assert env.step("<answer>Alpha</answer>")[1] == 1.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"corpus": [{"title": "A", "text": "Alpha."}]}, "Give corpus= and questions= together"),
    ({"questions": [{"question": "Q?", "answer": "a"}]}, "Give corpus= and questions= together"),
    ({"corpus": [{"title": "A", "text": "a"}], "questions": [{"question": "Q?", "answer": "a"}],
      "hops": 2}, "hops= chooses among generated questions"),
    ({"corpus": [{"title": "A", "text": "a"}], "questions": []},
     "questions must be a JSONL path or a non-empty list"),
    ({"corpus": "missing.jsonl", "questions": "missing.jsonl"}, "Cannot read 'missing.jsonl'"),
    ({"corpus": 5, "questions": [{"question": "Q?", "answer": "a"}]},
     "corpus must be a Corpus, a JSONL path"),
    ({"hops": (1, 4)}, r"hops must be some of \(1, 2, 3\), got \(1, 4\)"),
    ({"hops": ()}, r"hops must be some of \(1, 2, 3\)"),
    ({"world_size": 2}, "world_size must be at least 8"),
])
def test_bad_options_are_config_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SearchQAEnv(**kwargs)


def test_the_bare_env_is_closed_book_qa_and_the_wrapper_adds_search() -> None:
    env = SearchQAEnv(hops=2)
    assert "<search>" not in env.instructions
    wrapped = ToolWrapper(env, [SearchTool(get_retriever(env.corpus), k=5)], max_calls=2)
    assert "<search>query</search>" in wrapped.get_wrapper_attr("instructions")
    reward, *_ = play_by_the_book(wrapped, seed=1)
    assert reward == 1.0


def test_random_actions_are_well_formed_answers() -> None:
    env = gym.make(ENV_ID)
    rng = np.random.default_rng(0)
    rewards = []
    for seed in range(30):
        env.reset(seed=seed)
        _, reward, terminated, _, info = env.step(env.unwrapped.random_action(rng))
        assert info["action_valid"] and terminated
        rewards.append(reward)
    assert 0 < sum(rewards) < 30
