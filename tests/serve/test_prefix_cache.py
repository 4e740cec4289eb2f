"""The prefix cache: prompts that continue a finished request prefill only their new tokens,
and get the same tokens and logprobs as without the cache."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.serve.batch import SequenceUpdate
from agentgym.serve.engine import Engine, EngineConfig
from agentgym.serve.prefix import BLOCK, PrefixCache
from agentgym.serve.sampling import SamplingParams

FIRST = list(range(30, 75))  # 45 tokens: two full blocks and a partial one
REPLIES = [list(range(200, 213)), list(range(300, 331)), [5, 6, 7], [9]]


def _kv(tokens: int, value: float = 0.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two layers of KV for ``tokens`` tokens (2 heads, dim 4), 4 bytes a number."""
    return [(torch.full((2, tokens, 4), value), torch.full((2, tokens, 4), value)) for _ in range(2)]


BYTES_PER_TOKEN = 2 * 2 * 2 * 4 * 4  # layers x (keys, values) x heads x dim x float32


# ------------------------------------------------------------ the cache ---

def test_lookup_finds_the_longest_stored_prefix_across_full_and_partial_blocks() -> None:
    cache = PrefixCache(capacity_bytes=10**6)
    short = list(range(1, 2 * BLOCK + 5))
    longer = short + [500, 501, 502]
    cache.store(None, short, _kv(len(short), 1.0))
    cache.store(None, longer, _kv(len(longer), 2.0))

    hit = cache.lookup(None, longer + [7, 8])
    assert hit is not None and hit.length == len(longer) and hit.entry.tokens == longer
    # Diverging inside the last partial block: the entry that ends before the divergence.
    hit = cache.lookup(None, short + [500, 999])
    assert hit is not None and hit.length == len(short) and hit.entry.tokens == short
    # Diverging after a full block: that block's newest entry, as far as it matches.
    hit = cache.lookup(None, short[:BLOCK + 3] + [999])
    assert hit is not None and hit.length == BLOCK + 3
    # Diverging in the first block still reuses what matches, none of what does not.
    hit = cache.lookup(None, [1, 2, 3, 999])
    assert hit is None or hit.length == 3
    assert cache.lookup(None, [999, 1, 2]) is None


def test_entries_of_one_model_are_not_found_for_another() -> None:
    cache = PrefixCache(capacity_bytes=10**6)
    tokens = list(range(1, 40))
    cache.store("adapter-a", tokens, _kv(len(tokens)))
    assert cache.lookup(None, tokens) is None
    assert cache.lookup("adapter-b", tokens) is None
    hit = cache.lookup("adapter-a", tokens)
    assert hit is not None and hit.length == len(tokens)


def test_the_least_recently_used_entries_go_when_memory_runs_out() -> None:
    cache = PrefixCache(capacity_bytes=3 * 20 * BYTES_PER_TOKEN)  # room for three 20-token entries
    entries = [[k * 100 + i for i in range(20)] for k in range(1, 4)]
    for tokens in entries:
        cache.store(None, tokens, _kv(20))
    assert cache.lookup(None, entries[0]) is not None  # used: now the most recent
    cache.store(None, [900 + i for i in range(20)], _kv(20))
    assert cache.nbytes <= cache.capacity_bytes and len(cache) == 3
    assert cache.lookup(None, entries[1]) is None  # the least recently used went
    assert cache.lookup(None, entries[0]) is not None
    cache.store(None, list(range(10**4)), _kv(10**4))  # larger than the whole cache: not kept
    assert len(cache) == 3


def test_an_entry_a_newer_one_contains_is_dropped_and_its_tensors_freed() -> None:
    cache = PrefixCache(capacity_bytes=10**6)
    turn_one = list(range(1, 30))
    cache.store(None, turn_one, _kv(len(turn_one)))
    hit = cache.lookup(None, turn_one + [40, 41])
    assert hit is not None
    cache.store(None, turn_one + [40, 41, 42], _kv(len(turn_one) + 3), replaces=hit)
    assert len(cache) == 1 and cache.nbytes == (len(turn_one) + 3) * BYTES_PER_TOKEN
    assert hit.entry.layers == []
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0 and cache.lookup(None, turn_one) is None


# ---------------------------------------------------------- the engine ---

def _greedy(tokens: int) -> SamplingParams:
    return SamplingParams(max_tokens=tokens, temperature=0.0, logprobs=0)


async def _conversation(engine: Engine, first: list[int], replies: list[list[int]]) -> list[SequenceUpdate]:
    """Turns of one conversation: each prompt is the last one, its answer and a reply."""
    prompt, turns = list(first), []
    for reply in replies:
        (turn,) = await engine.generate(prompt, _greedy(10))
        turns.append(turn)
        prompt = prompt + turn.token_ids + reply
    return turns


@pytest.fixture(scope="module")
def engines(tiny_model: str) -> Iterator[tuple[Engine, Engine]]:
    """The same model without and with a prefix cache."""
    with Engine(EngineConfig(tiny_model, max_model_len=512, prefix_cache_mib=0)) as plain, \
            Engine(EngineConfig(tiny_model, max_model_len=512, prefix_cache_mib=64)) as cached:
        yield plain, cached


def _assert_same(got: list[SequenceUpdate], want: list[SequenceUpdate]) -> None:
    for a, b in zip(got, want, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_a_conversation_prefills_only_its_new_tokens_and_answers_the_same(
        engines: tuple[Engine, Engine]) -> None:
    plain, cached = engines
    before = cached.stats()["cached_prompt_tokens"]
    want = asyncio.run(_conversation(plain, FIRST, REPLIES))
    got = asyncio.run(_conversation(cached, FIRST, REPLIES))
    _assert_same(got, want)
    # Each turn reuses the previous prompt and answer, less the answer's last token
    # (sampled, never fed to the model).
    expected, length = [0], len(FIRST)
    for turn, reply in zip(got[:-1], REPLIES[:-1], strict=True):
        expected.append(length + len(turn.token_ids) - 1)
        length += len(turn.token_ids) + len(reply)
    assert [turn.cached_tokens for turn in got] == expected
    assert cached.stats()["cached_prompt_tokens"] - before == sum(expected)
    assert all(turn.cached_tokens == 0 for turn in want)


def test_rows_with_and_without_a_hit_prefill_together_and_answer_the_same(
        engines: tuple[Engine, Engine]) -> None:
    """One prefill mixing a long hit, a short hit and a miss (left padding, no gaps)."""
    plain, cached = engines
    starts = [list(range(100, 160)), list(range(400, 420)), [7, 8, 9]]

    async def second_turns(engine: Engine) -> list[SequenceUpdate]:
        firsts = [(await engine.generate(start, _greedy(6)))[0] for start in starts[:2]]
        prompts = [start + first.token_ids + [11, 12, 13] for start, first in zip(starts, firsts)]
        prompts.append(starts[2])
        generation = engine.submit(prompts, _greedy(8))  # one request: admitted together
        return await generation.result()

    want = asyncio.run(second_turns(plain))
    got = asyncio.run(second_turns(cached))
    _assert_same(got, want)
    assert got[0].cached_tokens > got[1].cached_tokens > 0 == got[2].cached_tokens


def test_a_weight_update_or_a_reset_empties_the_cache(engines: tuple[Engine, Engine],
                                                     tiny_model: str) -> None:
    _, cached = engines
    prompt = list(range(600, 640))

    async def twice() -> int:
        await cached.generate(prompt, _greedy(4))
        return (await cached.generate(prompt, _greedy(4)))[0].cached_tokens

    assert asyncio.run(twice()) == len(prompt) - 1  # at least one token always runs
    asyncio.run(cached.update_weights(str(Path(tiny_model))))
    assert len(cached._scheduler.prefix) == 0
    assert asyncio.run(twice()) == len(prompt) - 1
    asyncio.run(cached.reset_prefix_cache())
    assert len(cached._scheduler.prefix) == 0
    (after,) = asyncio.run(cached.generate(prompt, _greedy(4)))
    assert after.cached_tokens == 0


def test_a_negative_cache_size_is_refused_saying_how_to_turn_it_off(tiny_model: str) -> None:
    with pytest.raises(ConfigError, match="0 turns the cache off"):
        EngineConfig(tiny_model, prefix_cache_mib=-1)
