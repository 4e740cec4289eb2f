"""The engine in a child process answers as the engine in a thread does, and its death is contained."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from agentgym.errors import ConfigError, InvalidRequestError, ServeError
from agentgym.serve.app import create_app
from agentgym.serve.batch import SequenceUpdate
from agentgym.serve.engine import Engine, EngineConfig
from agentgym.serve.process import EngineProcess
from agentgym.serve.sampling import SamplingParams

PROMPTS = [[1, 5, 6, 7], list(range(20, 60)), [300, 301]]


@pytest.fixture(scope="module")
def engines(tiny_model: str) -> Iterator[tuple[Engine, EngineProcess]]:
    config = EngineConfig(tiny_model, max_model_len=256, torch_threads=1)
    with Engine(config) as here, EngineProcess(config) as there:
        yield here, there


def _both(engines: tuple[Engine, EngineProcess], run: object) -> tuple[object, object]:
    return tuple(asyncio.run(run(engine)) for engine in engines)  # type: ignore[operator]


def test_same_tokens_logprobs_and_text_as_in_a_thread(engines: tuple[Engine, EngineProcess]) -> None:
    async def answers(engine: Engine | EngineProcess) -> list[SequenceUpdate]:
        greedy = SamplingParams(max_tokens=12, temperature=0.0, logprobs=2)
        seeded = SamplingParams(max_tokens=12, temperature=1.0, seed=7, stop=("e",))
        return [*await asyncio.gather(*(engine.generate(prompt, greedy) for prompt in PROMPTS)),
                await engine.generate(PROMPTS[0], seeded, n=3)]

    here, there = _both(engines, answers)
    assert there == here  # every field: ids, logprobs, top logprobs, text, finish and stop reasons


def test_streams_arrive_token_by_token(engines: tuple[Engine, EngineProcess]) -> None:
    async def stream(engine: Engine | EngineProcess) -> list[tuple[int, list[int], str]]:
        generation = engine.submit([PROMPTS[1]], SamplingParams(max_tokens=6, temperature=0.0), n=1, stream=True)
        return [(update.index, update.token_ids, update.text) async for update in generation.updates()]

    here, there = _both(engines, stream)
    assert there == here and len(there) == 6  # type: ignore[arg-type]


def test_prompt_logprobs_stats_and_errors_cross_over(engines: tuple[Engine, EngineProcess]) -> None:
    here, there = engines
    assert asyncio.run(there.prompt_logprobs([PROMPTS[0]], 2)) == asyncio.run(here.prompt_logprobs([PROMPTS[0]], 2))
    stats = asyncio.run(there.read_stats())
    assert stats["requests"] >= 1 and stats["running"] == 0 and stats["policy_version"] == 0
    with pytest.raises(InvalidRequestError, match="no LoRA adapter named 'nope'"):
        asyncio.run(there.unload_lora("nope"))
    with pytest.raises(ServeError, match="neither"):  # raised in the child, the same class here
        asyncio.run(there.update_weights("/nonexistent/weights"))
    with pytest.raises(InvalidRequestError, match="out of vocabulary"):  # checked here, before the pipe
        asyncio.run(there.generate([10**9], SamplingParams(max_tokens=2)))


def test_a_cancelled_request_leaves_the_batch(engines: tuple[Engine, EngineProcess]) -> None:
    _, there = engines

    async def cancel_then_ask() -> SequenceUpdate:
        generation = there.submit([PROMPTS[0]], SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True),
                                  stream=True)
        updates = generation.updates()
        await anext(updates)
        await updates.aclose()  # the client went away
        return (await there.generate(PROMPTS[2], SamplingParams(max_tokens=3, temperature=0.0)))[0]

    assert len(asyncio.run(cancel_then_ask()).token_ids) == 3
    assert asyncio.run(there.read_stats())["running"] == 0


def test_a_dead_engine_fails_requests_with_one_line(tiny_model: str) -> None:
    engine = EngineProcess(EngineConfig(tiny_model, max_model_len=256, torch_threads=1))
    engine.start()

    async def killed_mid_request() -> None:
        generation = engine.submit([PROMPTS[0]], SamplingParams(max_tokens=200, ignore_eos=True), stream=True)
        updates = generation.updates()
        await anext(updates)
        engine._process.kill()
        async for _ in updates:
            pass

    try:
        with pytest.raises(ServeError, match=r"the engine process exited \(code -9\); restart the server"):
            asyncio.run(killed_mid_request())
        assert not engine.alive
        with pytest.raises(ServeError, match="engine process exited"):
            asyncio.run(engine.generate(PROMPTS[0], SamplingParams(max_tokens=2)))
        with TestClient(create_app(engine)) as client:  # a load balancer stops sending it work
            health = client.get("/health")
        assert health.status_code == 503 and "restart the server" in health.json()["error"]["message"]
    finally:
        engine.close()


def test_a_model_that_cannot_load_says_why(tiny_model: str) -> None:
    engine = EngineProcess(EngineConfig(tiny_model, max_model_len=10**7))
    with pytest.raises(ConfigError, match="larger than the model's maximum positions"):
        engine.start()
    assert not engine.alive


def test_agentgym_serve_engine_process_answers_over_http(tiny_model: str) -> None:
    import openai

    from agentgym.serve.launch import BuiltinServer

    with BuiltinServer(tiny_model, max_model_len=256, engine_process=True) as server:
        assert "--engine-process" in server.command()
        client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0)
        answer = client.completions.create(model=server.model_name, prompt=PROMPTS[0], max_tokens=5, temperature=0,
                                           extra_body={"return_token_ids": True})
        assert len(answer.choices[0].token_ids) == 5  # type: ignore[attr-defined]
        assert answer.usage is not None and answer.usage.prompt_tokens == len(PROMPTS[0])
