"""Search a corpus: BM25 with ``bm25s``, or dense retrieval with sentence-transformers.

    retriever = get_retriever(corpus)                   # BM25, built once, then cached
    retriever.search("founder of the Halvard Institute", k=3)
    # [SearchHit(passage=Passage(title='Halvard Institute', ...), score=7.1, index=161), ...]

:func:`get_retriever` keeps the retrievers it built in memory (keyed by the
corpus fingerprint), so the many envs of a rollout share one index. A BM25
index is also saved on disk, under ``$AGENTGYM_CACHE/retrieval`` (default
``~/.cache/agentgym/retrieval``) for corpora of 1,000 passages or more, and
loaded from there the next time the same corpus is asked for; give
``cache_dir`` to choose the folder (any size is then saved), or ``False`` to
keep nothing on disk.

Text is split into words (two letters or more), lower-cased, stripped of
English stop words and, when PyStemmer is installed, stemmed, so "cities"
finds "city". Passages are indexed as their title followed by their text.

Dense retrieval (``kind="dense"``) needs sentence-transformers, which
agentgym does not install; ``model`` is a local folder or a model name that
sentence-transformers can load (a hub name may download: that is your call,
agentgym itself never does). Embeddings are cached on disk beside the BM25
indexes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from agentgym.errors import ConfigError, MissingDependencyError
from agentgym.models.tiny import cache_root

from agentgym.envs.retrieval.data import Corpus, Passage

__all__ = [
    "DISK_CACHE_MIN_PASSAGES",
    "INSTALL_HINT",
    "BM25Retriever",
    "DenseRetriever",
    "Retriever",
    "SearchHit",
    "clear_retriever_cache",
    "get_retriever",
    "require_bm25s",
    "tokenize",
]

_log = logging.getLogger(__name__)

INSTALL_HINT = MissingDependencyError.install_hint("retrieval", "bm25s PyStemmer")
#: Corpora at least this big get their BM25 index saved to the default cache folder.
DISK_CACHE_MIN_PASSAGES = 1_000
#: Retrievers kept in memory; the oldest is dropped past this.
_MEMORY_SLOTS = 4
_FORMAT_VERSION = 1  # bump when tokenizing or indexing changes, so old caches are not reused
_WORD = re.compile(r"\b\w\w+\b")


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A passage found by a search, its score, and its position in the corpus."""

    passage: Passage
    score: float
    index: int


class Retriever(Protocol):
    """Anything that finds the passages of a corpus that best match a query."""

    corpus: Corpus
    #: "bm25" (matches words) or "dense" (matches meaning); the search tool tells the agent.
    kind: str

    def search(self, query: str, k: int = 3) -> list[SearchHit]:
        """The best ``k`` passages for ``query``, best first (fewer when fewer match)."""
        ...


def require_bm25s() -> None:
    """Raise :class:`MissingDependencyError` with the fix when bm25s is missing."""
    try:
        import bm25s  # noqa: F401
    except ImportError as error:
        raise MissingDependencyError(
            f"BM25 search needs bm25s, which is not installed: {INSTALL_HINT}."
        ) from error


class _Stemmer:
    """PyStemmer's English stemmer, one per thread (its objects are not thread-safe)."""

    def __init__(self) -> None:
        self._local = threading.local()
        try:
            import Stemmer  # PyStemmer
        except ImportError:
            self._module: Any = None
        else:
            self._module = Stemmer

    @property
    def available(self) -> bool:
        return self._module is not None

    def stem(self, words: list[str]) -> list[str]:
        if self._module is None:
            return words
        stemmer = getattr(self._local, "stemmer", None)
        if stemmer is None:
            stemmer = self._local.stemmer = self._module.Stemmer("english")
        return list(stemmer.stemWords(words))


_STEMMER = _Stemmer()
_STOPWORDS: frozenset[str] | None = None


def _words(text: str) -> list[str]:
    global _STOPWORDS
    if _STOPWORDS is None:
        from bm25s.stopwords import STOPWORDS_EN

        _STOPWORDS = frozenset(STOPWORDS_EN)
    # Lone surrogates (possible in model output) cannot be encoded for the stemmer.
    text = text.encode("utf-8", "replace").decode("utf-8").lower()
    return [word for word in _WORD.findall(text) if word not in _STOPWORDS]


def tokenize(text: str) -> list[str]:
    """The words BM25 indexes in ``text``: lower-case, no stop words, stemmed if it can be."""
    words = _words(text)
    return _STEMMER.stem(words) if words else words


def _tokenizer_key() -> str:
    return f"v{_FORMAT_VERSION}-{'stem' if _STEMMER.available else 'nostem'}"


def _top(scores: np.ndarray, k: int, *, positive: bool) -> list[int]:
    """Indices of the ``k`` best scores, best first, ties by position (so results are stable)."""
    k = min(k, len(scores))
    if positive:
        k = min(k, int(np.count_nonzero(scores > 0)))
    if k <= 0:
        return []
    best = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    # A tie at the cut is broken by position too: take every index scoring like the k-th.
    threshold = scores[best].min()
    candidates = np.flatnonzero(scores >= threshold)
    order = np.lexsort((candidates, -scores[candidates]))
    return [int(i) for i in candidates[order][:k]]


class BM25Retriever:
    """BM25 (Lucene's variant, k1=1.5, b=0.75) over a corpus, with bm25s.

    Args:
        corpus: the passages.
        cache_dir: where the index is saved and looked for; None: the default
            folder for corpora of 1,000 passages or more, else nowhere;
            False: nowhere.
    """

    kind = "bm25"

    def __init__(self, corpus: Corpus, *,
                 cache_dir: str | Path | Literal[False] | None = None) -> None:
        require_bm25s()
        self.corpus = corpus
        folder = _cache_folder(corpus, cache_dir, "bm25", _tokenizer_key())
        loaded = _load_bm25(folder, len(corpus)) if folder is not None else None
        self.loaded_from_cache = loaded is not None
        self._bm25 = loaded if loaded is not None else self._build()
        if folder is not None and loaded is None:
            _save_atomically(folder, lambda path: self._bm25.save(str(path), show_progress=False))
        self._vocab: dict[str, int] = self._bm25.vocab_dict

    def _build(self) -> Any:
        import bm25s

        tokens = [tokenize(f"{passage.title}\n{passage.text}") for passage in self.corpus]
        bm25 = bm25s.BM25()
        bm25.index(tokens, show_progress=False)
        return bm25

    def search(self, query: str, k: int = 3) -> list[SearchHit]:
        ids = list(dict.fromkeys(self._vocab[w] for w in tokenize(query) if w in self._vocab))
        if not ids:
            return []
        scores = self._bm25.get_scores_from_ids(ids)
        return [SearchHit(self.corpus[i], float(scores[i]), i)
                for i in _top(scores, k, positive=True)]


class DenseRetriever:
    """Cosine similarity of sentence-transformers embeddings (needs sentence-transformers).

    Args:
        corpus: the passages.
        model: a local folder or a model name sentence-transformers can load.
        cache_dir: where the embeddings are saved; as :class:`BM25Retriever`.
        device: the torch device (None: sentence-transformers chooses).
        batch_size: passages embedded at once.
    """

    kind = "dense"

    def __init__(self, corpus: Corpus, *, model: str,
                 cache_dir: str | Path | Literal[False] | None = None,
                 device: str | None = None, batch_size: int = 64) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as error:
            raise MissingDependencyError(
                "Dense retrieval needs sentence-transformers, which agentgym does not install: "
                "pip install sentence-transformers (BM25, the default, needs only bm25s)."
            ) from error
        if not isinstance(model, str) or not model:
            raise ConfigError(f"Dense retrieval needs model=..., a local folder or a "
                              f"sentence-transformers model name; got {model!r}.")
        self.corpus = corpus
        self.model = SentenceTransformer(model, device=device)
        model_key = hashlib.sha256(model.encode()).hexdigest()[:12]
        folder = _cache_folder(corpus, cache_dir, "dense", model_key)
        self.embeddings = _load_embeddings(folder, len(corpus))
        if self.embeddings is None:
            texts = [f"{passage.title}\n{passage.text}" for passage in corpus]
            self.embeddings = np.asarray(self.model.encode(
                texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                show_progress_bar=False), dtype=np.float32)
            if folder is not None:
                embeddings = self.embeddings
                _save_atomically(folder, lambda path: np.save(path / "embeddings.npy", embeddings))

    def search(self, query: str, k: int = 3) -> list[SearchHit]:
        text = query.encode("utf-8", "replace").decode("utf-8")
        vector = np.asarray(self.model.encode([text], normalize_embeddings=True,
                                              convert_to_numpy=True, show_progress_bar=False))[0]
        scores = self.embeddings @ vector.astype(np.float32)
        return [SearchHit(self.corpus[i], float(scores[i]), i)
                for i in _top(scores, k, positive=False)]


# -- caches ----------------------------------------------------------------------

_memory: OrderedDict[tuple[Any, ...], Retriever] = OrderedDict()
_memory_lock = threading.Lock()


def get_retriever(corpus: Corpus, kind: Literal["bm25", "dense"] = "bm25", *,
                  model: str | None = None,
                  cache_dir: str | Path | Literal[False] | None = None) -> Retriever:
    """The retriever of ``corpus``: built on first use, then shared from memory (and disk).

    Args:
        corpus: the passages (a :class:`Corpus`; its fingerprint is the cache key).
        kind: ``"bm25"`` (needs bm25s) or ``"dense"`` (needs sentence-transformers and ``model``).
        model: the sentence-transformers model of dense retrieval.
        cache_dir: see :class:`BM25Retriever`.
    """
    if not isinstance(corpus, Corpus):
        raise ConfigError(f"get_retriever needs a Corpus, got {type(corpus).__name__}; "
                          "wrap passages with Corpus([...]) or use load_corpus(path).")
    if kind not in ("bm25", "dense"):
        raise ConfigError(f"retriever must be 'bm25' or 'dense', got {kind!r}.")
    if kind == "bm25" and model is not None:
        raise ConfigError("model= is for dense retrieval; BM25 takes none "
                          "(or pass retriever='dense').")
    key = (kind, corpus.fingerprint, model, str(cache_dir), _tokenizer_key())
    # One lock for building too: two envs asking for the same new index build it once.
    with _memory_lock:
        found = _memory.get(key)
        if found is not None:
            _memory.move_to_end(key)
            return found
        retriever: Retriever = (BM25Retriever(corpus, cache_dir=cache_dir) if kind == "bm25" else
                                DenseRetriever(corpus, model=model or "", cache_dir=cache_dir))
        _memory[key] = retriever
        while len(_memory) > _MEMORY_SLOTS:
            _memory.popitem(last=False)
        return retriever


def clear_retriever_cache() -> None:
    """Forget the retrievers kept in memory (the disk cache stays)."""
    with _memory_lock:
        _memory.clear()


def _cache_folder(corpus: Corpus, cache_dir: str | Path | Literal[False] | None,
                  kind: str, variant: str) -> Path | None:
    if cache_dir is False:
        return None
    if cache_dir is None:
        if len(corpus) < DISK_CACHE_MIN_PASSAGES:
            return None  # built in milliseconds: not worth a folder
        cache_dir = cache_root() / "retrieval"
    return Path(cache_dir) / f"{kind}-{corpus.fingerprint[:32]}-{variant}"


def _load_bm25(folder: Path, size: int) -> Any | None:
    if not folder.is_dir():
        return None
    import bm25s

    try:
        bm25 = bm25s.BM25.load(str(folder), show_progress=False)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as error:
        _log.warning("The cached index in %s cannot be read (%s); rebuilding it.", folder, error)
        return None
    if bm25.scores.get("num_docs") != size:
        _log.warning("The cached index in %s does not match the corpus; rebuilding it.", folder)
        return None
    return bm25


def _load_embeddings(folder: Path | None, size: int) -> np.ndarray | None:
    if folder is None or not (folder / "embeddings.npy").is_file():
        return None
    try:
        embeddings = np.load(folder / "embeddings.npy")
    except (OSError, ValueError) as error:
        _log.warning("The cached embeddings in %s cannot be read (%s); recomputing.", folder, error)
        return None
    return embeddings if embeddings.ndim == 2 and len(embeddings) == size else None


def _save_atomically(folder: Path, write: Any) -> None:
    """Write into a temporary folder, then rename it: readers never see half an index."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    except OSError as error:
        _log.warning("Cannot write the index cache in %s (%s); going on without.",
                     folder.parent, error)
        return
    try:
        write(temporary)
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a stale or unreadable copy
        os.rename(temporary, folder)
    except OSError as error:
        # Another process may have renamed its copy first: theirs is as good as ours.
        _log.debug("Index cache not saved in %s: %s", folder, error)
    finally:
        if temporary.exists():
            shutil.rmtree(temporary, ignore_errors=True)
