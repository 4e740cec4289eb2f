"""One protocol suite for every OpenAI-compatible server agentgym uses: built-in and vLLM.

Driven with the real ``openai`` client (and raw HTTP where the client would
hide what the server sent). What the rollout client relies on is checked on
both servers alike: token-id prompts, ``return_token_ids``
(``prompt_token_ids`` / ``token_ids`` on each completion choice), logprobs,
streaming, ``n``, seeds, stop strings, vLLM's ``prompt_logprobs``, and the OpenAI
error shape.
"""

from __future__ import annotations

import math
from typing import Any

import httpx2
import openai
import pytest
from serve_helpers import TIMEOUT_S, RunningServer

MESSAGES = [{"role": "system", "content": "You play Sokoban."},
            {"role": "user", "content": "The box is left of you. Your move?"}]
PROMPT_TEXT = "You are in a maze. Move"
GREEDY_PROMPT = [1, 5, 6, 7]  # the tiny model continues it with plain text ("% Your Your ...")
REPLACEMENT = "\ufffd"  # a decoder's stand-in for a partial UTF-8 character


def _ids(choice: Any) -> list[int]:
    token_ids = getattr(choice, "token_ids", None)
    assert isinstance(token_ids, list), f"no token_ids on the choice: {choice}"
    return token_ids


def _same_text(a: str, b: str) -> bool:
    """Equal but for partial UTF-8 characters, which servers render differently."""
    return a.replace(REPLACEMENT, "") == b.replace(REPLACEMENT, "")


def test_models_lists_the_served_model(server: RunningServer) -> None:
    models = server.client().models.list()
    assert [model.id for model in models.data] == [server.model_name]
    assert getattr(models.data[0], "max_model_len", None) == server.max_model_len


def test_chat_completion_answers_with_usage(server: RunningServer) -> None:
    response = server.client().chat.completions.create(
        model=server.model_name, messages=MESSAGES, max_tokens=8, temperature=0.8, seed=1)
    (choice,) = response.choices
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    usage = response.usage
    assert usage is not None and usage.prompt_tokens > 0 and 1 <= usage.completion_tokens <= 8
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_chat_returns_the_prompt_and_sampled_token_ids(server: RunningServer, tokenizer: Any) -> None:
    response = server.client().chat.completions.create(
        model=server.model_name, messages=MESSAGES, max_tokens=8, temperature=1.0, seed=2,
        extra_body={"return_token_ids": True})
    rendered = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert getattr(response, "prompt_token_ids", None) == tokenizer.encode(rendered, add_special_tokens=False)
    ids = _ids(response.choices[0])
    assert response.usage is not None and len(ids) == response.usage.completion_tokens
    assert _same_text(tokenizer.decode(ids, skip_special_tokens=True), response.choices[0].message.content)


def test_completion_with_token_ids_in_and_out(server: RunningServer, tokenizer: Any) -> None:
    prompt = tokenizer.encode(PROMPT_TEXT)
    response = server.client().completions.create(
        model=server.model_name, prompt=prompt, max_tokens=12, temperature=1.0, seed=7, logprobs=1,
        extra_body={"return_token_ids": True})
    (choice,) = response.choices
    ids = _ids(choice)
    assert getattr(choice, "prompt_token_ids", None) == prompt
    assert response.usage is not None and len(ids) == response.usage.completion_tokens
    assert 1 <= len(ids) <= 12 and (choice.finish_reason == "stop" or len(ids) == 12)
    assert _same_text(tokenizer.decode(ids, skip_special_tokens=True), choice.text)
    logprobs = choice.logprobs
    assert logprobs is not None and len(logprobs.token_logprobs) == len(ids) == len(logprobs.tokens)
    assert all(math.isfinite(value) and value <= 0.0 for value in logprobs.token_logprobs)


def test_text_prompt_reports_its_token_ids(server: RunningServer, tokenizer: Any) -> None:
    response = server.client().completions.create(
        model=server.model_name, prompt=PROMPT_TEXT, max_tokens=3, extra_body={"return_token_ids": True})
    assert getattr(response.choices[0], "prompt_token_ids", None) == tokenizer.encode(PROMPT_TEXT)


def test_greedy_tokens_and_logprobs_are_the_models_own(server: RunningServer, tiny_model: str) -> None:
    """temperature 0: the argmax of the model, and its log-softmax as the logprob."""
    expected_ids, expected_logprobs = _greedy_reference(tiny_model, GREEDY_PROMPT, steps=6)
    response = server.client().completions.create(
        model=server.model_name, prompt=GREEDY_PROMPT, max_tokens=6, temperature=0, logprobs=1,
        extra_body={"return_token_ids": True})
    (choice,) = response.choices
    assert _ids(choice) == expected_ids
    assert choice.logprobs is not None
    assert choice.logprobs.token_logprobs == pytest.approx(expected_logprobs, abs=1e-3)
    for value, top in zip(choice.logprobs.token_logprobs, choice.logprobs.top_logprobs, strict=True):
        assert list(top.values()) == pytest.approx([value])  # the sampled token is the top one


def test_prompt_logprobs_are_the_models_own(server: RunningServer, tiny_model: str) -> None:
    """vLLM's prompt_logprobs: per prompt token (None for the first) a dict by token id of that token and
    the top k, each with its logprob (the raw log-softmax, whatever the temperature), its rank and text.
    What a distillation teacher behind a server answers with."""
    import torch
    from transformers import AutoModelForCausalLM

    prompt = [1, 40, 41, 42, 43, 44]
    with server.client() as client:
        response = client.completions.create(model=server.model_name, prompt=prompt, max_tokens=1,
                                             temperature=0.7, extra_body={"prompt_logprobs": 3})
    entries = response.choices[0].model_dump()["prompt_logprobs"]
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    with torch.inference_mode():
        reference = torch.log_softmax(model(input_ids=torch.tensor([prompt])).logits[0].float(), dim=-1)
    assert len(entries) == len(prompt) and entries[0] is None
    for position, entry in enumerate(entries[1:], start=1):
        expected = reference[position - 1]
        own = entry[str(prompt[position])]
        assert own["logprob"] == pytest.approx(expected[prompt[position]].item(), abs=1e-3)
        assert own["rank"] == int((expected >= expected[prompt[position]]).sum())
        top = sorted((value["rank"], int(token)) for token, value in entry.items() if value["rank"] <= 3)
        assert [token for _, token in top] == expected.topk(3).indices.tolist()
        assert len(entry) in (3, 4) and all(isinstance(value["decoded_token"], str) for value in entry.values())
        for token, value in entry.items():
            assert value["logprob"] == pytest.approx(expected[int(token)].item(), abs=1e-3)


def test_prompt_logprobs_are_refused_when_streaming(server: RunningServer) -> None:
    with server.client() as client, pytest.raises(openai.BadRequestError, match="prompt_logprobs"):
        client.completions.create(model=server.model_name, prompt=GREEDY_PROMPT, max_tokens=2, stream=True,
                                  extra_body={"prompt_logprobs": 2})


def _greedy_reference(model_dir: str, prompt: list[int], steps: int) -> tuple[list[int], list[float]]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids, logprobs, context = [], [], torch.tensor([prompt])
    with torch.inference_mode():
        for _ in range(steps):
            scores = torch.log_softmax(model(input_ids=context).logits[0, -1].float(), dim=-1)
            token = int(scores.argmax())
            ids.append(token)
            logprobs.append(float(scores[token]))
            if token == model.generation_config.eos_token_id:
                break
            context = torch.cat([context, torch.tensor([[token]])], dim=1)
    return ids, logprobs


def test_streamed_chat_adds_up_to_the_whole_answer(server: RunningServer) -> None:
    client = server.client()
    request: dict[str, Any] = {"model": server.model_name, "messages": MESSAGES, "max_tokens": 10,
                                   "temperature": 0, "extra_body": {"return_token_ids": True}}
    whole = client.chat.completions.create(**request)
    chunks = list(client.chat.completions.create(**request, stream=True,
                                                 stream_options={"include_usage": True}))
    choices = [choice for chunk in chunks for choice in chunk.choices]
    assert choices[0].delta.role == "assistant"
    assert "".join(choice.delta.content or "" for choice in choices) == whole.choices[0].message.content
    streamed_ids = [token for choice in choices for token in (getattr(choice, "token_ids", None) or [])]
    assert streamed_ids == _ids(whole.choices[0])
    assert [c.finish_reason for c in choices if c.finish_reason] == [whole.choices[0].finish_reason]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(streamed_ids)


def test_streamed_completion_adds_up_to_the_whole_answer(server: RunningServer) -> None:
    client = server.client()
    request: dict[str, Any] = {"model": server.model_name, "prompt": GREEDY_PROMPT, "max_tokens": 8,
                                   "temperature": 0, "extra_body": {"return_token_ids": True}}
    whole = client.completions.create(**request).choices[0]
    choices = [c for chunk in client.completions.create(**request, stream=True) for c in chunk.choices]
    assert "".join(choice.text for choice in choices) == whole.text
    assert [t for c in choices for t in (getattr(c, "token_ids", None) or [])] == _ids(whole)
    assert getattr(choices[0], "prompt_token_ids", None) == GREEDY_PROMPT
    assert choices[-1].finish_reason == whole.finish_reason


def test_n_gives_that_many_choices(server: RunningServer) -> None:
    client = server.client()
    response = client.completions.create(
        model=server.model_name, prompt=GREEDY_PROMPT, n=3, max_tokens=5, temperature=1.0,
        extra_body={"return_token_ids": True})
    assert sorted(choice.index for choice in response.choices) == [0, 1, 2]
    assert all(getattr(c, "prompt_token_ids", None) == GREEDY_PROMPT for c in response.choices)
    assert response.usage is not None
    assert response.usage.completion_tokens == sum(len(_ids(c)) for c in response.choices)
    chat = client.chat.completions.create(model=server.model_name, messages=MESSAGES, n=2,
                                          max_tokens=4, temperature=1.0)
    assert sorted(choice.index for choice in chat.choices) == [0, 1]


def test_a_seed_makes_sampling_reproducible(server: RunningServer) -> None:
    client = server.client()

    def sample(seed: int) -> list[int]:
        response = client.completions.create(
            model=server.model_name, prompt=GREEDY_PROMPT, max_tokens=16, temperature=1.0, seed=seed,
            extra_body={"return_token_ids": True})
        return _ids(response.choices[0])

    first = sample(1234)
    assert sample(1234) == first
    assert sample(4321) != first


def test_a_stop_string_ends_the_text_before_it(server: RunningServer) -> None:
    client = server.client()
    request: dict[str, Any] = {"model": server.model_name, "prompt": GREEDY_PROMPT, "max_tokens": 12,
                                   "temperature": 0, "extra_body": {"return_token_ids": True}}
    text = client.completions.create(**request).choices[0].text
    assert len(text) >= 6 and REPLACEMENT not in text, f"the greedy text is unfit for this test: {text!r}"
    stop = text[3:6]
    choice = client.completions.create(**request, stop=[stop]).choices[0]
    assert choice.text == text[:text.find(stop)]
    assert choice.finish_reason == "stop"
    assert getattr(choice, "stop_reason", None) == stop


def _post(server: RunningServer, path: str, content: bytes) -> httpx2.Response:
    with httpx2.Client(timeout=TIMEOUT_S) as http:
        return http.post(f"{server.url}{path}", content=content,
                         headers={"Content-Type": "application/json",
                                  "Authorization": f"Bearer {server.api_key}"})


def _assert_error_shape(body: Any) -> dict[str, Any]:
    assert set(body) == {"error"}, body
    error = body["error"]
    assert {"message", "type", "param", "code"} <= set(error), error
    assert isinstance(error["message"], str) and error["message"]
    return dict(error)


BAD_REQUESTS = {
    # name: (path, body, status, text that the message or param must contain)
    "missing messages": ("/v1/chat/completions", b'{"model": "tiny", "max_tokens": 3}', 400, "messages"),
    "negative max_tokens": ("/v1/completions", b'{"model": "tiny", "prompt": "Hi", "max_tokens": -1}',
                            400, "max_tokens"),
    "unknown model": ("/v1/completions", b'{"model": "no-such-model", "prompt": "Hi"}', 404, "model"),
    # Past both servers' contexts (the built-in server's 512 tokens, the session's vLLM's 2,048).
    "oversized prompt": ("/v1/completions",
                         b'{"model": "tiny", "max_tokens": 4, "prompt": [' + b", ".join([b"5"] * 2100) + b"]}",
                         400, "maximum context length"),
    "malformed JSON": ("/v1/completions", b'{"model": "tiny", "prompt": ', 400, ""),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_requests_get_the_openai_error_shape_naming_the_field(server: RunningServer, case: str) -> None:
    path, body, status, named = BAD_REQUESTS[case]
    response = _post(server, path, body)
    assert response.status_code == status, response.text
    error = _assert_error_shape(response.json())
    assert named in f"{error['param']} {error['message']}"
    ok = server.client().completions.create(model=server.model_name, prompt="Hi", max_tokens=2)
    assert ok.choices[0].finish_reason in ("stop", "length")  # and the server still serves


def test_the_openai_client_raises_its_own_errors(server: RunningServer) -> None:
    client = server.client()
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="Hi", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.chat.completions.create(model=server.model_name, messages=MESSAGES, max_tokens=-5)
