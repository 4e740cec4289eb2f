"""Batched sampling with per-row settings, and the checks on sampling parameters."""

from __future__ import annotations

import math

import pytest
import torch

from agentgym.errors import InvalidRequestError
from agentgym.serve.sampling import SamplingParams, make_generator, processed_logprobs, sample

LOGITS = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 0.5, 0.1]])


def _sample(logits: torch.Tensor, temperature: list[float], top_p: list[float],
            seeds: list[int | None], top_k: int = 0) -> tuple[list[int], list[float]]:
    out = sample(logits, torch.tensor(temperature), torch.tensor(top_p),
                 [make_generator(seed) for seed in seeds], make_generator(0) or torch.Generator(), top_k)
    return out.token_ids, out.logprobs


def test_greedy_rows_take_the_argmax_with_the_raw_log_softmax() -> None:
    tokens, logprobs = _sample(LOGITS, [0.0, 0.0], [0.3, 1.0], [None, None])
    assert tokens == [0, 1]
    raw = torch.log_softmax(LOGITS, dim=-1)
    assert logprobs == pytest.approx([float(raw[0, 0]), float(raw[1, 1])])  # top_p does not apply


def test_processed_logprobs_apply_temperature_then_top_p() -> None:
    logprobs = processed_logprobs(LOGITS[:1], torch.tensor([0.5]), torch.tensor([0.9]))
    probs = torch.softmax(LOGITS[0] / 0.5, dim=-1)
    kept = probs[:2] / probs[:2].sum()  # 0.867 + 0.117 reaches 0.9: the nucleus is two tokens
    assert logprobs[0, :2].exp().tolist() == pytest.approx(kept.tolist(), rel=1e-5)
    assert logprobs[0, 2:].tolist() == [-math.inf, -math.inf]


def test_sampled_logprobs_are_those_of_the_processed_distribution() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(1))
    tokens, logprobs = _sample(logits, [0.7, 1.3, 1.0], [0.8, 1.0, 0.5], [1, 2, 3])
    expected = processed_logprobs(logits, torch.tensor([0.7, 1.3, 1.0]), torch.tensor([0.8, 1.0, 0.5]))
    for row, (token, logprob) in enumerate(zip(tokens, logprobs, strict=True)):
        assert math.isfinite(logprob) and logprob == pytest.approx(float(expected[row, token]))


def test_a_seeded_row_draws_the_same_whatever_shares_its_batch() -> None:
    logits = torch.zeros(4, 100)
    alone, _ = _sample(logits[:1], [1.0], [1.0], [42])
    crowded, _ = _sample(logits, [1.0, 1.0, 0.0, 1.0], [1.0] * 4, [None, 7, None, 42])
    assert crowded[3] == alone[0]


def test_sampling_follows_the_distribution() -> None:
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]])).repeat(4000, 1)
    tokens, _ = _sample(logits, [1.0] * 4000, [1.0] * 4000, [None] * 4000)
    share = [tokens.count(token) / 4000 for token in range(3)]
    assert share == pytest.approx([0.7, 0.2, 0.1], abs=0.03)


def test_top_logprobs_are_the_best_alternatives() -> None:
    out = sample(LOGITS, torch.zeros(2), torch.ones(2), [None, None], torch.Generator(), top_k=2)
    assert out.top_ids == [[0, 1], [1, 2]]


@pytest.mark.parametrize("field, value, match", [
    ("max_tokens", 0, "max_tokens must be at least 1, got 0"),
    ("temperature", -0.1, "temperature must be between 0 and 100"),
    ("top_p", 0.0, r"top_p must be in \(0, 1\]"),
    ("logprobs", 21, "logprobs must be between 0 and 20"),
    ("stop", ("",), "stop strings must not be empty"),
])
def test_bad_sampling_params_name_the_field(field: str, value: object, match: str) -> None:
    with pytest.raises(InvalidRequestError, match=match) as raised:
        SamplingParams(**{field: value})  # type: ignore[arg-type]
    assert raised.value.param == field and raised.value.status_code == 400


def test_choices_of_a_seeded_request_get_consecutive_seeds() -> None:
    params = SamplingParams(seed=10)
    assert [params.for_choice(i).seed for i in range(3)] == [10, 11, 12]
    assert SamplingParams().for_choice(2).seed is None
