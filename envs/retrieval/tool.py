"""The search tool: the top passages of a corpus for a query, as text for the agent.

    tool = SearchTool(get_retriever(corpus), k=3)
    tool.call(query="Halvard Institute founder")
    # 'Doc 1 (Title: Halvard Institute) The Halvard Institute is a research institute ...\\n'
    # 'Doc 2 (Title: Mira Tolven) ...'

Give it to any env with :class:`agentgym.tools.ToolWrapper`; the agent calls it
as ``<search>query</search>`` or ``<tool_call>{"name": "search", "arguments":
{"query": "...", "k": 5}}</tool_call>``. The layout of the results follows
Search-R1 (``Doc i (Title: ...) text``).
"""

from __future__ import annotations

from typing import Any

from agentgym.core import check_number
from agentgym.errors import ConfigError, ToolInputError
from agentgym.tools import Tool

from agentgym.envs.retrieval.index import Retriever

__all__ = ["SearchTool", "format_hits"]


def format_hits(hits: list[Any], max_passage_chars: int = 600) -> str:
    """``Doc i (Title: t) text`` lines, one per hit; long texts are cut with "..."."""
    lines = []
    for rank, hit in enumerate(hits, start=1):
        text = " ".join(hit.passage.text.split())
        if len(text) > max_passage_chars:
            text = text[: max_passage_chars - 3].rstrip() + "..."
        lines.append(f"Doc {rank} (Title: {hit.passage.title}) {text}")
    return "\n".join(lines)


class SearchTool(Tool):
    """Search a corpus and return the best passages with their titles.

    Args:
        retriever: what searches (see :func:`~agentgym.envs.retrieval.index.get_retriever`).
        k: passages returned when the agent does not ask for a number.
        max_k: the most passages one call may ask for.
        max_query_chars: longest query accepted (longer ones are refused with feedback).
        max_passage_chars: longest passage text shown; the rest is cut.
    """

    name = "search"
    tag_argument = "query"

    def __init__(self, retriever: Retriever, *, k: int = 3, max_k: int = 10,
                 max_query_chars: int = 1000, max_passage_chars: int = 600) -> None:
        if not callable(getattr(retriever, "search", None)):
            raise ConfigError(f"SearchTool needs a retriever with a search(query, k) method, got "
                              f"{type(retriever).__name__}; use get_retriever(corpus).")
        check_number("max_k", max_k, minimum=1, maximum=100)
        check_number("k", k, minimum=1, maximum=max_k)
        check_number("max_query_chars", max_query_chars, minimum=10)
        check_number("max_passage_chars", max_passage_chars, minimum=20)
        self.retriever = retriever
        self.k, self.max_k = k, max_k
        self.max_query_chars = max_query_chars
        self.max_passage_chars = max_passage_chars
        matching = ("Matching is by meaning." if getattr(retriever, "kind", "") == "dense" else
                    "Matching is by words, so search for names and key words rather than a "
                    "whole question.")
        self.description = (f"Search the knowledge base. Returns the {k} passages that best "
                            f"match the query (more with k), each with its title. {matching}")
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "words to search for, e.g. a name"},
                "k": {"type": "integer", "description": f"how many passages, 1 to {max_k}"},
            },
            "required": ["query"],
        }
        self.validate()

    def run(self, *, query: str, k: int | None = None) -> str:  # type: ignore[override]
        query = query.strip()
        if not query:
            raise ToolInputError("the search query is empty; write some words to search for.")
        if len(query) > self.max_query_chars:
            raise ToolInputError(f"the query is {len(query)} characters long; keep it under "
                                 f"{self.max_query_chars}.")
        if k is not None and not 1 <= k <= self.max_k:
            raise ToolInputError(f"k must be between 1 and {self.max_k}, got {k}.")
        hits = self.retriever.search(query, k or self.k)
        if not hits:
            return (f"No passage matches {query[:80]!r}. Try other words: names of people, "
                    "places or organisations.")
        return format_hits(hits, self.max_passage_chars)
