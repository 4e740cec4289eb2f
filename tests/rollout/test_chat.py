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
