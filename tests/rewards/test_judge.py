"""JudgeReward: score parsing, the prompt, and judging through real servers.

The built-in server with the tiny model answers with random text, so against
it the tests check what does not depend on the words: requests reach it and
come back, unparseable replies are asked again and then fall back with a flag,
the cache and the de-duplication of concurrent calls (counted by the server's
own /stats), and a wrong model name. Faults and canned judge replies come from
the stub server (``agentgym.serve.stub``).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentgym.errors import ConfigError, JudgeError
from agentgym.rewards.judge import DEFAULT_RUBRIC, JudgeReward, parse_score
from agentgym.serve.launch import free_port
from agentgym.serve.stub import StubServer


@pytest.mark.parametrize(("reply", "score"), [
    ("Score: 7/10", 0.7),
    ("The answer is right.\nscore: 7 / 10", 0.7),
    ("**Score:** 8/10", 0.8),
    ("Score = 3", 0.3),
    ("The score is 9 out of 10.", 0.9),
    ("Grade: 4", 0.4),
    ("Rating: 85%", 0.85),
    ("<score>0.7</score>", 0.7),
    ("<score>7</score>", 0.7),
    ("<SCORE> 4/5 </SCORE>", 0.8),
    ("Score: 1.0", 1.0),  # a decimal in [0, 1] is already normalised
    ("Score: 0.25", 0.25),
    ("Score: 1", 0.1),  # a bare integer is on the rubric's 0..10 scale
    ("Score: 10/10", 1.0),
    ("Score: 0", 0.0),
    ("6", 0.6),
    (" 7/10. ", 0.7),
    ("First Score: 3/10, on reflection Score: 9/10", 0.9),  # the last one counts
    ("Score: 2/10 <score>8</score> Score: 5/10", 0.8),  # a tag wins over a line
    ("no score here", None),
    ("Score: N/10", None),  # the model echoed the format
    ("Score: 11/10", None),  # out of range
    ("Score: 12", None),
    ("Score: -1", None),
    ("Score: 7/0", None),
    ("The 3 answers are fine", None),
    ("", None),
])
def test_parse_score(reply: str, score: float | None) -> None:
    assert parse_score(reply) == (None if score is None else pytest.approx(score))


def test_parse_score_on_another_scale() -> None:
    assert parse_score("Score: 4", max_score=5) == pytest.approx(0.8)
    assert parse_score("Score: 4/10", max_score=5) == pytest.approx(0.4)  # an explicit scale wins


def test_the_prompt_fills_fields_once_and_leaves_latex_alone() -> None:
    judge = JudgeReward("http://127.0.0.1:1/v1", "m", r"Q={question} A={answer} R={reference} \frac{a}{b}")
    assert judge.prompt("is {answer} here?", "x", None) == r"Q=is {answer} here? A=x R=(none) \frac{a}{b}"
    assert "Score: N/10" in DEFAULT_RUBRIC
    judge.close()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rubric": "Grade {question}"}, "rubric must be a str containing {answer}"),
    ({"base_url": "127.0.0.1:8000"}, "base_url must be an http"),
    ({"model": ""}, "model must be the served model's name"),
    ({"fallback_score": 2}, r"fallback_score must be in \[0, 1\], got 2"),
    ({"max_retries": -1}, "max_retries must be an integer >= 0, got -1"),
    ({"timeout": "5"}, "timeout must be a number of seconds"),
    ({"cache_size": -1}, "cache_size must be an integer >= 0"),
])
def test_bad_configuration_is_a_config_error(kwargs: dict, message: str) -> None:
    arguments = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **kwargs}
    with pytest.raises(ConfigError, match=message):
        JudgeReward(**arguments)


# -- the real built-in server with the tiny model ------------------------------------------


@pytest.fixture(scope="module")
def builtin(tiny_model: str) -> Iterator[tuple[str, str, str]]:
    """(base_url, model name, root url) of the built-in server playing the tiny model."""
    from agentgym.serve.launch import BuiltinServer

    with BuiltinServer(tiny_model, api_key=_KEY) as server:
        yield server.base_url, server.model_name, server.url


#: the judge server's key: every server agentgym starts wants one
_KEY = "judge-test-key"


def _served(root: str) -> int:
    request = urllib.request.Request(f"{root}/stats", headers={"Authorization": f"Bearer {_KEY}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return int(json.load(reply)["requests"])


def _judge(base_url: str, model: str, **kwargs: object) -> JudgeReward:
    options: dict = {"max_tokens": 12, "timeout": 120, "backoff": 0.01, "api_key": _KEY, **kwargs}
    return JudgeReward(base_url, model, **options)


def test_random_replies_are_asked_again_then_fall_back_with_a_flag(builtin: tuple[str, str, str]) -> None:
    base_url, model, root = builtin
    before = _served(root)
    with _judge(base_url, model, parse_retries=2, fallback_score=0.25) as judge:
        result = judge.score("What is 2 + 2?", "4", "4")
    assert (result.score, result.parsed, result.cached, result.requests) == (0.25, False, False, 3)
    assert result.reply  # the model's own (random) words
    assert _served(root) - before == 3


def test_a_fallback_is_asked_again_unless_fallbacks_are_cached(builtin: tuple[str, str, str]) -> None:
    base_url, model, root = builtin
    with _judge(base_url, model, parse_retries=0) as judge:
        assert [judge.score("q", "a").requests for _ in range(2)] == [1, 1]
    with _judge(base_url, model, parse_retries=0, cache_fallbacks=True) as judge:
        first = judge.score("q", "a")
        before = _served(root)
        again = judge.score("q", "a")
        assert _served(root) == before  # the second one never reached the server
    assert (again.score, again.parsed, again.reply) == (first.score, first.parsed, first.reply)
    assert again.cached and again.requests == 0


def test_concurrent_calls_for_one_answer_are_judged_once(builtin: tuple[str, str, str]) -> None:
    base_url, model, root = builtin

    async def judge_all(judge: JudgeReward) -> list:
        async with judge:
            same = [judge.ascore("q", "same answer") for _ in range(4)]
            other = [judge.ascore("q", f"answer {n}") for n in range(2)]
            return await asyncio.gather(*same, *other)

    with _judge(base_url, model, parse_retries=0) as judge:
        before = _served(root)
        results = asyncio.run(judge_all(judge))
        assert _served(root) - before == 3  # one for the four same, one for each other
        assert sorted(r.cached for r in results[:4]) == [False, True, True, True]
        assert len({r.reply for r in results[:4]}) == 1


def test_threads_share_one_judgement_too(builtin: tuple[str, str, str]) -> None:
    base_url, model, root = builtin
    with _judge(base_url, model, parse_retries=0) as judge:
        before = _served(root)
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(lambda _: judge.score("q", "threads"), range(4)))
        assert _served(root) - before == 1
        assert sorted(r.cached for r in results) == [False, True, True, True]


def test_async_outside_a_context_uses_a_client_per_call(builtin: tuple[str, str, str]) -> None:
    base_url, model, _ = builtin
    with _judge(base_url, model, parse_retries=0) as judge:
        result = asyncio.run(judge.ascore("q", "no context"))
        assert result.requests == 1 and not result.cached
        assert asyncio.run(judge.ascore("q", "no context")).requests == 1  # a fallback: asked again


def test_an_unknown_model_is_refused_at_once(builtin: tuple[str, str, str]) -> None:
    base_url, _, root = builtin
    before = _served(root)
    with _judge(base_url, "no-such-model", max_retries=3) as judge:
        with pytest.raises(JudgeError, match=r"refused the request \(404\).*'no-such-model'"):
            judge.score("q", "a")
        with pytest.raises(JudgeError, match=r"refused the request \(404\)"):
            asyncio.run(judge.ascore("q", "a"))
    assert _served(root) == before  # refused before any generation, and not retried


# -- canned replies and faults from the stub server ----------------------------------------


def test_a_canned_score_is_parsed_and_cached_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "judge.sqlite"
    with StubServer(delay=0.0, completion_text="Fine work.\nScore: 8/10") as stub:
        with JudgeReward(stub.base_url, "stub", cache_path=path) as judge:
            result = judge.score("q", "a", "ref")
            assert (result.score, result.parsed, result.requests) == (pytest.approx(0.8), True, 1)
    # The server is gone; a new judge on the same file answers from it.
    with JudgeReward(f"http://127.0.0.1:{free_port()}/v1", "stub", cache_path=path,
                     max_retries=0) as judge:
        again = judge.score("q", "a", "ref")
        assert (again.score, again.cached, again.reply) == (pytest.approx(0.8), True, result.reply)
        with pytest.raises(JudgeError, match="failed 1 times"):
            judge.score("q", "another answer", "ref")


def test_failing_requests_are_retried_with_backoff() -> None:
    with StubServer(delay=0.0, completion_text="Score: 6/10", fail_every=2) as stub:
        with JudgeReward(stub.base_url, "stub", max_retries=2, backoff=0.01) as judge:
            results = [judge.score("q", f"answer {n}") for n in range(4)]
    assert all(r.parsed and r.score == pytest.approx(0.6) for r in results)
    assert sum(r.requests for r in results) > 4  # every other request failed and was retried


def test_a_server_that_keeps_failing_raises_after_the_retries() -> None:
    with StubServer(delay=0.0, fail_every=1) as stub:
        with JudgeReward(stub.base_url, "stub", max_retries=2, backoff=0.01) as judge:
            with pytest.raises(JudgeError, match=r"failed 3 times: InternalServerError"):
                judge.score("q", "a")
            with pytest.raises(JudgeError, match=r"failed 3 times: InternalServerError"):
                asyncio.run(judge.ascore("q", "a"))


def test_hung_and_dropped_requests_time_out_and_are_retried() -> None:
    with StubServer(delay=0.0, completion_text="Score: 5/10", hang_every=2) as stub:
        with JudgeReward(stub.base_url, "stub", timeout=1.0, max_retries=2, backoff=0.01) as judge:
            results = [judge.score("q", f"hang {n}") for n in range(3)]
    assert all(r.parsed and r.score == pytest.approx(0.5) for r in results)
    with StubServer(delay=0.0, completion_text="Score: 5/10", drop_every=2) as stub:
        with JudgeReward(stub.base_url, "stub", max_retries=2, backoff=0.01) as judge:
            results = [judge.score("q", f"drop {n}") for n in range(3)]
    assert all(r.parsed for r in results)
    with StubServer(delay=0.0, hang_every=1) as stub:
        with JudgeReward(stub.base_url, "stub", timeout=0.5, max_retries=1, backoff=0.01) as judge:
            with pytest.raises(JudgeError, match="failed 2 times: APITimeoutError"):
                judge.score("q", "a")


def test_a_reply_without_a_score_gets_a_reminder_then_the_fallback() -> None:
    with StubServer(delay=0.0, completion_text="I would rather not say.") as stub:
        with JudgeReward(stub.base_url, "stub", parse_retries=1, fallback_score=0.5) as judge:
            result = judge.score("q", "a")
    assert (result.score, result.parsed, result.requests) == (0.5, False, 2)
    assert result.reply == "I would rather not say."


def test_a_judge_scores_the_math_env() -> None:
    from agentgym.envs.math.env import MathEnv

    with StubServer(delay=0.0, completion_text="Close enough. Score: 7/10") as stub:
        env = MathEnv(judge={"base_url": stub.base_url, "model": "stub"})
        env.reset(options={"problem": {"question": "1/2 + 1/4?", "answer": "3/4"}})
        assert "LLM judge" in env.instructions
        _, reward, terminated, _, info = env.step(r"\boxed{0.7}")
        env.close()  # closes the judge it built
    assert reward == pytest.approx(0.7) and terminated and info["success"]
    assert info["correct"] is False and info["judge_parsed"] is True
