"""The token-alignment check every recorded row must pass."""

from __future__ import annotations

from agentgym.rollout.chat import ChatRenderer
from agentgym.rollout.rows import TrajectoryRow

EOS, SUFFIX = "<|im_end|>", "\n"


def assert_aligned(row: TrajectoryRow, renderer: ChatRenderer) -> None:
    """Masked-in tokens decode to the assistant turns, masked-out ones to the env's.

    Works on real model output: it compares text the tokens decode to, turn by
    turn, never re-encodes the model's text (which may tokenize differently).
    """
    assert len(row.completion_ids) == len(row.completion_mask) == len(row.logprobs)
    assert renderer.decode(row.prompt_ids) == renderer.tokenizer.apply_chat_template(
        [m.model_dump() for m in row.messages[:2]], add_generation_prompt=True, tokenize=False)
    runs = _runs(row)
    assistant = [m.content for m in row.messages if m.role == "assistant"]
    replies = [m.content for m in row.messages if m.role == "user"][1:]
    sampled_runs = [ids for sampled, ids in runs if sampled]
    env_runs = [ids for sampled, ids in runs if not sampled]
    assert len(sampled_runs) == len(assistant) == len(env_runs)
    for turn, (ids, text) in enumerate(zip(sampled_runs, assistant, strict=True)):
        ended = ids[-1] == renderer.eos_id
        # Servers leave special tokens out of the text (vLLM's skip_special_tokens), and
        # vLLM holds back a UTF-8 character cut off by max_tokens where decode() shows "\ufffd".
        decoded = renderer.tokenizer.decode(ids, skip_special_tokens=True)
        assert decoded.rstrip("\ufffd") == text.rstrip("\ufffd"), f"turn {turn}"
        closing = SUFFIX if ended else EOS + SUFFIX
        reply = f"<|im_start|>user\n{replies[turn]}{EOS}\n<|im_start|>assistant\n"
        expected = {closing + reply} if turn < len(assistant) - 1 else {closing}
        if turn == len(assistant) - 1 and row.stop_reason == "context_limit":
            expected.add(closing + reply)  # the budget ran out before or after the last reply
        assert renderer.decode(env_runs[turn]) in expected, f"env turn {turn}"
    for logprob, sampled in zip(row.logprobs, row.completion_mask, strict=True):
        assert (logprob <= 0.0) if sampled else logprob == 0.0


def _runs(row: TrajectoryRow) -> list[tuple[bool, list[int]]]:
    runs: list[tuple[bool, list[int]]] = []
    for token, sampled in zip(row.completion_ids, row.completion_mask, strict=True):
        if runs and runs[-1][0] == bool(sampled):
            runs[-1][1].append(token)
        else:
            runs.append((bool(sampled), [token]))
    return runs
