"""The search tool: what the agent reads, and how bad calls come back."""

from __future__ import annotations

import asyncio

import pytest

from agentgym.envs.retrieval import BM25Retriever, Corpus, Passage, SearchTool
from agentgym.errors import ConfigError
from agentgym.tools import ToolWrapper
from fakes import EchoEnv

CORPUS = Corpus([
    Passage("Mira Tolven", "Mira Tolven was a botanist born in Eskerford in 1874."),
    Passage("Halvard Institute", "The Halvard Institute was founded in 1902 by Mira Tolven."),
    Passage("Eskerford", "Eskerford is a city in Tessaria. " + "It has a long history. " * 60),
    Passage("Brinholm", "Brinholm is the capital of Tessaria."),
])


@pytest.fixture
def tool() -> SearchTool:
    return SearchTool(BM25Retriever(CORPUS, cache_dir=False), k=2)


def test_results_are_numbered_passages_with_titles(tool: SearchTool) -> None:
    text = tool.call(query="Halvard Institute founder Tolven")
    lines = text.splitlines()
    assert lines[0] == ("Doc 1 (Title: Halvard Institute) The Halvard Institute was founded "
                        "in 1902 by Mira Tolven.")
    assert lines[1].startswith("Doc 2 (Title: Mira Tolven) ")
    assert len(lines) == 2


def test_the_agent_may_ask_for_more_passages(tool: SearchTool) -> None:
    assert len(tool.call(query="Tessaria Tolven", k=4).splitlines()) == 4
    assert len(tool.call(query="Tessaria Tolven", k=1).splitlines()) == 1


def test_long_passages_are_cut(tool: SearchTool) -> None:
    line = tool.call(query="long history", k=1)
    assert line.startswith("Doc 1 (Title: Eskerford)") and line.endswith("...")
    assert len(line) < 650


@pytest.mark.parametrize(("arguments", "message"), [
    ({"query": "   "}, "Error: the search query is empty"),
    ({"query": "x" * 1001}, "Error: the query is 1001 characters long; keep it under 1000."),
    ({"query": "Tolven", "k": 0}, "Error: k must be between 1 and 10, got 0."),
    ({"query": "Tolven", "k": 11}, "Error: k must be between 1 and 10, got 11."),
    ({"query": "Tolven", "k": "3"}, "Error: search: argument 'k' must be of type integer"),
    ({"query": 5}, "Error: search: argument 'query' must be of type string"),
    ({}, "Error: search needs the argument 'query'"),
    ({"q": "Tolven"}, "Error: search got an unknown argument 'q'"),
])
def test_bad_calls_come_back_as_error_text(tool: SearchTool, arguments: dict, message: str) -> None:
    assert tool.call(**arguments).startswith(message)


def test_no_match_says_what_to_try(tool: SearchTool) -> None:
    reply = tool.call(query="zebra giraffe")
    assert reply.startswith("No passage matches 'zebra giraffe'. Try other words")


def test_the_tool_describes_itself_for_both_call_formats(tool: SearchTool) -> None:
    schema = tool.openai_schema()
    assert schema["function"]["name"] == "search"
    assert schema["function"]["parameters"]["required"] == ["query"]
    assert tool.tag_argument == "query"
    assert "2 passages" in tool.description and "names and key words" in tool.description


def test_the_tool_runs_asynchronously(tool: SearchTool) -> None:
    assert asyncio.run(tool.acall(query="Brinholm")).startswith("Doc 1 (Title: Brinholm)")


def test_a_tool_without_a_retriever_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="needs a retriever with a search"):
        SearchTool(CORPUS)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="k must be at most 10"):
        SearchTool(BM25Retriever(CORPUS, cache_dir=False), k=11)


def test_any_env_can_be_given_search_through_the_wrapper(tool: SearchTool) -> None:
    env = ToolWrapper(EchoEnv(), [tool], max_calls=2)
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step("<search>Brinholm capital</search>")
    assert observation.startswith('<tool_response name="search">\nDoc 1 (Title: Brinholm)')
    assert (reward, terminated, info["tool_turn"]) == (0.0, False, True)
    json_call = ('<tool_call>{"name": "search", "arguments": {"query": "Tolven", "k": 1}}'
                 "</tool_call>")
    observation, *_ = env.step(json_call)
    assert observation.count("Doc ") == 1
