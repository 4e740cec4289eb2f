from __future__ import annotations

import pytest

from agentgym.errors import ConfigError
from agentgym.rollout.chat import ChatRenderer


def test_prompt_is_the_template_with_the_generation_header(renderer: ChatRenderer) -> None:
    text = renderer.decode(renderer.prompt_ids("Rules.", "Task."))
    assert text == "<|im_start|>system\nRules.<|im_end|>\n<|im_start|>user\nTask.<|im_end|>\n<|im_start|>assistant\n"


def test_closing_a_turn_adds_eos_only_when_the_model_did_not(renderer: ChatRenderer) -> None:
    assert renderer.decode(renderer.close_turn_ids([5, renderer.eos_id])) == "\n"
    assert renderer.decode(renderer.close_turn_ids([5])) == "<|im_end|>\n"
    assert renderer.decode(renderer.close_turn_ids([])) == "<|im_end|>\n"


def test_the_reply_is_the_templates_delta(renderer: ChatRenderer) -> None:
    observation = "up: moved.\n#####\n#P_O#"
    assert renderer.decode(renderer.reply_ids(observation)) == (
        f"<|im_start|>user\n{observation}<|im_end|>\n<|im_start|>assistant\n"
    )


def test_pieces_concatenate_to_the_whole_conversation(renderer: ChatRenderer) -> None:
    tokenizer = renderer.tokenizer
    answer = tokenizer.encode("<answer>Up</answer>", add_special_tokens=False)
    ids = (renderer.prompt_ids("S", "U") + answer + renderer.close_turn_ids(answer)
           + renderer.reply_ids("Obs"))
    whole = tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
         {"role": "assistant", "content": "<answer>Up</answer>"}, {"role": "user", "content": "Obs"}],
        add_generation_prompt=True, tokenize=True, return_dict=False)
    assert ids == list(whole)


class _NoTemplate:
    chat_template = None


class _RewritingTemplate:
    """A template that renders past turns differently once more turns exist."""

    chat_template = "x"
    eos_token_id = 9

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):  # noqa: ANN001
        return str(len(messages)) * 3 + "E"  # every turn count renders all turns anew

    def encode(self, text, add_special_tokens):  # noqa: ANN001
        return [9 if char == "E" else int(char) for char in text]


def test_a_tokenizer_without_a_template_is_refused() -> None:
    with pytest.raises(ConfigError, match="no chat template"):
        ChatRenderer(_NoTemplate())


def test_a_template_that_rewrites_history_is_refused() -> None:
    with pytest.raises(ConfigError, match="only appends. Use --chat-mode"):
        ChatRenderer(_RewritingTemplate()).reply_ids("obs")


# -- each distinct reply and system prompt encoded once ------------------------------------------

class _Uncached(ChatRenderer):
    """The renderer as it was before its caches: the template on every call."""

    def prompt_ids(self, system: str, user: str) -> list[int]:
        return self._render_prompt(system, user)

    def reply_ids(self, observation: str) -> list[int]:
        return self._reply_ids(observation)


@pytest.mark.parametrize("env_id", ["Sokoban-LLM-v0", "Wordle-LLM-v0", "Countdown-LLM-v0"])
def test_cached_rendering_gives_the_very_rows_of_the_template(renderer: ChatRenderer, env_id: str) -> None:
    import asyncio

    from agentgym.rollout import RandomPolicy
    from agentgym.rollout.manager import EnvManager, RolloutConfig

    config = RolloutConfig(env_id=env_id, episodes=6, group_size=2, max_turns=6, seed=3)

    def rows(chat: ChatRenderer) -> list[tuple]:
        played = asyncio.run(EnvManager(config, RandomPolicy(1), renderer=chat).run())
        return [(r.prompt_ids, r.completion_ids, r.completion_mask, r.turns) for r in played]

    uncached = rows(_Uncached(renderer.tokenizer))
    cached = ChatRenderer(renderer.tokenizer)
    assert rows(cached) == uncached
    assert len(cached._replies) > 0  # the replies did go through the cache
    assert rows(cached) == uncached  # and a second run, from a warm cache, still gives the same ids


def test_the_reply_cache_stays_bounded_and_skips_huge_replies(renderer: ChatRenderer) -> None:
    from agentgym.rollout.chat import REPLY_CACHE_MAX_CHARS, REPLY_CACHE_SIZE

    chat = ChatRenderer(renderer.tokenizer)
    for n in range(REPLY_CACHE_SIZE + 50):  # an env that never repeats itself
        assert chat.reply_ids(f"reply {n}") == chat._reply_ids(f"reply {n}")
    assert len(chat._replies) == REPLY_CACHE_SIZE
    huge = "x" * (REPLY_CACHE_MAX_CHARS + 1)
    assert chat.reply_ids(huge) == chat._reply_ids(huge)
    assert huge not in chat._replies


def test_a_cached_reply_is_a_fresh_list_each_time(renderer: ChatRenderer) -> None:
    chat = ChatRenderer(renderer.tokenizer)
    first = chat.reply_ids("Obs")
    first.append(-1)  # the manager extends what it is given
    assert chat.reply_ids("Obs") == chat._reply_ids("Obs")


def test_prompts_under_one_system_prompt_match_the_template(renderer: ChatRenderer) -> None:
    chat = ChatRenderer(renderer.tokenizer)
    for user in ["", "Task.", "Level:\n#P_O#\n", "<|im_end|> inside", "héllo\t"]:
        assert chat.prompt_ids("Rules, long and fixed.", user) == chat._render_prompt("Rules, long and fixed.", user)
