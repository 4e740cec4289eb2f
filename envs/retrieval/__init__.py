"""Retrieval: a search tool over a local corpus, and question answering with it.

- :mod:`~agentgym.envs.retrieval.index`: BM25 (bm25s) or dense retrieval,
  built once per corpus and cached in memory and on disk.
- :mod:`~agentgym.envs.retrieval.tool`: :class:`SearchTool`, the ``search``
  tool for :class:`agentgym.tools.ToolWrapper`.
- :mod:`~agentgym.envs.retrieval.env`: ``SearchQA-LLM-v0``.
- :mod:`~agentgym.envs.retrieval.world`: the generated knowledge base and its
  single- and multi-hop questions; :mod:`~agentgym.envs.retrieval.data`:
  loading your own corpus and questions from JSONL.

Importing this package loads PyStemmer when it is installed (a small C
extension); bm25s is imported only when an index is first built.
"""

from __future__ import annotations

from agentgym.envs.retrieval.data import (Corpus, Hop, Passage, QAItem, load_corpus,
                                          load_questions)
from agentgym.envs.retrieval.env import SearchQAEnv, make_search_qa_env
from agentgym.envs.retrieval.index import (BM25Retriever, DenseRetriever, Retriever, SearchHit,
                                           get_retriever)
from agentgym.envs.retrieval.scoring import exact_match, f1_score, normalize_answer
from agentgym.envs.retrieval.tool import SearchTool
from agentgym.envs.retrieval.world import World, generate_world

__all__ = [
    "BM25Retriever",
    "Corpus",
    "DenseRetriever",
    "Hop",
    "Passage",
    "QAItem",
    "Retriever",
    "SearchHit",
    "SearchQAEnv",
    "SearchTool",
    "World",
    "exact_match",
    "f1_score",
    "generate_world",
    "get_retriever",
    "load_corpus",
    "load_questions",
    "make_search_qa_env",
    "normalize_answer",
]
