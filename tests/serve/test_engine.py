"""The engine without HTTP: batching changes no result, failures and cancels stay contained."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from agentgym.errors import ConfigError, InvalidRequestError, ServeError
from agentgym.serve.batch import SequenceUpdate
from agentgym.serve.engine import Engine, EngineConfig, resolve_device
from agentgym.serve.sampling import SamplingParams

PROMPTS = [[1, 5, 6, 7], list(range(20, 60)), [300, 301], list(range(100, 117))]


@pytest.fixture(scope="module")
def engine(tiny_model: str) -> Iterator[Engine]:
    with Engine(EngineConfig(tiny_model, max_model_len=256)) as running:
        yield running


def _greedy(tokens: int, logprobs: int | None = 0) -> SamplingParams:
    return SamplingParams(max_tokens=tokens, temperature=0.0, logprobs=logprobs)


def test_batched_and_joining_rows_get_what_they_get_alone(engine: Engine) -> None:
    """Left padding, rows joining a running batch and rows leaving it change no logit."""
    async def alone() -> list[SequenceUpdate]:
        return [(await engine.generate(prompt, _greedy(12)))[0] for prompt in PROMPTS]

    async def together() -> list[SequenceUpdate]:
        first = engine.submit([PROMPTS[0]], _greedy(24), stream=True)
        updates = first.updates()
        await anext(updates)  # the first row is decoding: the others join a running batch
        rest = [engine.generate(prompt, _greedy(12)) for prompt in PROMPTS[1:]]
        joined = await asyncio.gather(*rest)
        streamed = [await anext(updates) for _ in range(11)]
        await updates.aclose()
        head = SequenceUpdate(0, [u.token_ids[0] for u in streamed], [u.logprobs[0] for u in streamed],
                              [], "", None, None, 0)
        return [head, *(choices[0] for choices in joined)]

    solo = asyncio.run(alone())
    batched = asyncio.run(together())
    assert batched[0].token_ids == solo[0].token_ids[1:12]
    assert batched[0].logprobs == pytest.approx(solo[0].logprobs[1:12], abs=1e-4)
    for got, want in zip(batched[1:], solo[1:], strict=True):
        assert got.token_ids == want.token_ids
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
    assert engine.stats()["max_batch_size"] >= 2


def test_a_stop_token_ends_the_choice_and_stays_in_its_ids(engine: Engine) -> None:
    free = asyncio.run(engine.generate(PROMPTS[0], _greedy(4)))[0]
    stop = free.token_ids[1]
    (done,) = asyncio.run(engine.generate(PROMPTS[0], SamplingParams(
        max_tokens=4, temperature=0.0, stop_token_ids=(stop,))))
    assert done.token_ids == free.token_ids[:2]
    assert (done.finish_reason, done.stop_reason) == ("stop", stop)
    assert done.text == engine.decode(free.token_ids[:1])


def test_a_failed_batch_fails_its_requests_and_the_engine_goes_on(engine: Engine,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    batch = engine._scheduler._batch
    real_decode = batch.decode
    failures = iter([RuntimeError("the model fell over")])

    def flaky_decode() -> object:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return real_decode()

    monkeypatch.setattr(batch, "decode", flaky_decode)
    with pytest.raises(ServeError, match="the model fell over") as raised:
        asyncio.run(engine.generate(PROMPTS[0], _greedy(8)))
    assert raised.value.status_code == 500
    (again,) = asyncio.run(engine.generate(PROMPTS[0], _greedy(8)))
    assert len(again.token_ids) == 8


def test_leaving_a_stream_early_stops_its_rows(engine: Engine) -> None:
    async def read_two() -> None:
        generation = engine.submit([PROMPTS[1]], SamplingParams(max_tokens=200), n=3, stream=True)
        updates = generation.updates()
        await anext(updates)
        await anext(updates)
        await updates.aclose()
        for _ in range(200):
            if engine.stats()["running"] == 0:
                return
            await asyncio.sleep(0.01)

    asyncio.run(read_two())
    assert engine.stats()["running"] == 0


def test_a_weight_update_waits_for_running_rows(engine: Engine, tiny_model: str) -> None:
    async def update_while_running() -> tuple[int, int, int]:
        version = engine.policy_version
        running = asyncio.ensure_future(engine.generate(PROMPTS[0], _greedy(60)))
        await asyncio.sleep(0.01)
        done = await engine.update_weights(str(Path(tiny_model)), version=version + 5)
        old = (await running)[0].policy_version
        new = (await engine.generate(PROMPTS[0], _greedy(2)))[0].policy_version
        return old, new, done.policy_version

    version = engine.policy_version
    assert asyncio.run(update_while_running()) == (version, version + 5, version + 5)


def test_requests_the_engine_cannot_serve_are_refused_naming_the_field(engine: Engine) -> None:
    async def submit(**kwargs: object) -> None:
        engine.submit(**{"prompts": [PROMPTS[0]], "params": SamplingParams(), **kwargs})  # type: ignore[arg-type]

    cases = [({"n": 2, "params": _greedy(4)}, "n", "greedy"),
             ({"prompts": [[5000]]}, "prompt", "out of vocabulary"),
             ({"prompts": [[]]}, "prompt", "must not be empty"),
             ({"params": SamplingParams(max_tokens=300)}, "max_tokens", "maximum context length is 256"),
             ({"adapter": "nope"}, "model", "no LoRA adapter")]
    for kwargs, param, match in cases:
        with pytest.raises(InvalidRequestError, match=match) as raised:
            asyncio.run(submit(**kwargs))
        assert raised.value.param == param


def test_a_context_longer_than_the_model_allows_is_a_config_error(tiny_model: str) -> None:
    with pytest.raises(ConfigError, match="larger than the model's maximum positions"):
        Engine(EngineConfig(tiny_model, max_model_len=10**6))


def test_the_device_is_auto_by_default_and_a_bad_one_fails_before_loading() -> None:
    assert EngineConfig("tiny").device == "auto"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    for bad in ("gpu", "tpu", "meta", "cuda:x"):
        with pytest.raises(ConfigError, match="device must be auto, cpu, cuda or cuda:N"):
            EngineConfig("no-such-model", device=bad)  # raised before any model is looked for


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_asking_for_a_gpu_on_a_machine_without_one_says_so() -> None:
    with pytest.raises(ConfigError, match="torch sees no GPU; use cpu or auto"):
        resolve_device("cuda:0")
