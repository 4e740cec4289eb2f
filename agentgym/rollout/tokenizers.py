"""Which tokenizer made a row, and the check that a model reads rows in its own tokenizer.

A row holds token ids, and ids mean text only under the tokenizer that made them: the
tiny model's id 700 is a piece of a Sokoban board, SmolLM2's is part of an English word.
Rows therefore record a fingerprint of their tokenizer (``TrajectoryRow.tokenizer``)::

    /home/me/.cache/agentgym/models/tiny-h128-l2-v1024-p4096-s0-f3@5b1c0e9f2a7d4c18

its ``name_or_path`` (so a reader can load it again) and a hash of what decides what ids
mean and how turns are rendered: the vocabulary, the added (special) tokens and the chat
template. Two tokenizers agree when their hashes do, whatever their names: ``tiny`` and
``tiny-256x4`` share one tokenizer, and a run's ``final/`` keeps its model's.

:func:`check_tokenizer` runs before a trainer reads rows and before ``agentgym view --tokens``
decodes them; :func:`check_server_tokenizer` before a run plays against a server it did not
start (the server samples ids in its tokenizer, the rows are rendered in ours).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.errors import TokenizerMismatchError, UnknownTokenizerWarning

__all__ = ["TokenizerId", "check_rollout_file", "check_server_tokenizer", "check_tokenizer", "load_tokenizer_of",
           "tokenizer_id"]

#: hex digits of the hash: 64 bits, ample to tell a handful of tokenizers apart
_DIGEST_CHARS = 16


@dataclass(frozen=True)
class TokenizerId:
    """A tokenizer's name (its ``name_or_path``: a folder or a hub id) and the hash of its vocabulary,
    added tokens and chat template. Written as ``NAME@HASH``."""

    name: str
    digest: str

    def __str__(self) -> str:
        return f"{self.name}@{self.digest}"

    @classmethod
    def parse(cls, text: str) -> TokenizerId:
        """The id written as ``text`` (a text with no ``@HASH`` is a name whose hash is unknown: "")."""
        name, at, digest = text.rpartition("@")
        if not at or len(digest) != _DIGEST_CHARS or any(char not in "0123456789abcdef" for char in digest):
            return cls(text, "")
        return cls(name, digest)


def tokenizer_id(tokenizer: Any) -> TokenizerId:
    """The fingerprint of a transformers tokenizer (about 30 ms for a 49,152-token vocabulary).

    >>> str(tokenizer_id(AutoTokenizer.from_pretrained(resolve_model("tiny"))))  # doctest: +SKIP
    '/home/me/.cache/agentgym/models/tiny-h128-l2-v1024-p4096-s0-f3@5b1c0e9f2a7d4c18'
    """
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    get_vocab = getattr(tokenizer, "get_vocab", None)  # a stand-in tokenizer of a test may have none
    content = {
        "vocab": sorted(get_vocab().items(), key=lambda item: item[1]) if get_vocab is not None else None,
        "added": sorted((index, str(getattr(token, "content", token)), bool(getattr(token, "special", False)))
                        for index, token in added.items()),
        "chat_template": getattr(tokenizer, "chat_template", None),
    }
    encoded = json.dumps(content, ensure_ascii=False, sort_keys=True, default=str).encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(encoded, digest_size=_DIGEST_CHARS // 2).hexdigest()
    return TokenizerId(str(getattr(tokenizer, "name_or_path", "") or "unnamed"), digest)


def check_tokenizer(made_by: Iterable[Any] | str | None, tokenizer: Any, source: str, *,
                    model: str | None = None) -> None:
    """Raise :class:`TokenizerMismatchError` unless ``tokenizer`` is the one that made the ids.

    ``made_by``: rows (their ``tokenizer`` values are compared), recorded fingerprints, one
    fingerprint, or None. Rows that record none (files written before rows did) cannot be
    checked: one :class:`UnknownTokenizerWarning` says so, and they are read as they are.
    ``source`` names the rows in messages (a file); ``model``, the model whose tokenizer it is
    (default: the tokenizer's name).
    """
    recorded = _recorded(made_by)
    known = [TokenizerId.parse(text) for text in recorded if text is not None]
    if len({found.digest for found in known}) > 1:
        names = ", ".join(str(found) for found in known[:3])
        raise TokenizerMismatchError(f"{source} holds rows of {len(known)} different tokenizers ({names}): "
                                     "train on the rows of one model at a time.")
    ours = tokenizer_id(tokenizer)
    if known and known[0].digest != ours.digest:
        raise TokenizerMismatchError(_mismatch(source, known[0], ours, tokenizer, model))
    if len(known) < len(recorded):
        warnings.warn(f"{source}: {'some rows record' if known else 'the rows record'} no tokenizer (written "
                      f"before rows recorded theirs), so nothing checks that {model or ours.name}'s tokenizer "
                      "made them; read as they are.", UnknownTokenizerWarning, stacklevel=2)


def check_rollout_file(path: str | Path, tokenizer: Any, *, model: str | None = None) -> None:
    """:func:`check_tokenizer` on the rows of the rollout file ``path`` (reading only that column); a
    file that is no rollout file (DPO's prompt / chosen / rejected pairs: text, tokenized as it is
    read) is left alone."""
    from agentgym.rollout.storage import recorded_tokenizers

    recorded = recorded_tokenizers(path)
    if recorded is not None:
        check_tokenizer(recorded, tokenizer, str(path), model=model)


def _recorded(made_by: Iterable[Any] | str | None) -> list[str | None]:
    """The distinct fingerprints of rows, of a list of fingerprints, or of one, in the order first met."""
    if made_by is None or isinstance(made_by, str):
        return [made_by]
    return list(dict.fromkeys(item if item is None or isinstance(item, str) else item.tokenizer
                              for item in made_by))


def _mismatch(source: str, theirs: TokenizerId, ours: TokenizerId, tokenizer: Any, model: str | None) -> str:
    vocabulary = len(tokenizer)
    return (f"{source} was tokenized by {theirs.name} (tokenizer {theirs.digest}), but {model or ours.name} has "
            f"another tokenizer ({ours.digest}, {vocabulary:,} tokens): its ids would be read as other text. "
            f"Use the model that made the rows (--model {theirs.name}), or roll out again with this one.")


def load_tokenizer_of(recorded: str) -> Any:
    """The tokenizer a row's fingerprint names, loaded from its folder or the hub cache; None when it
    does not load here or is not the one that made the rows (its hash differs)."""
    from transformers import AutoTokenizer

    wanted = TokenizerId.parse(recorded)
    try:
        tokenizer = AutoTokenizer.from_pretrained(wanted.name)
    except (OSError, ValueError):  # no such folder, not in the cache and no network, not a tokenizer
        return None
    return tokenizer if tokenizer_id(tokenizer).digest == wanted.digest else None


def check_server_tokenizer(base_url: str, tokenizer: Any, *, model_name: str, api_key: str = "EMPTY",
                           model: str | None = None) -> bool:
    """Raise :class:`TokenizerMismatchError` when the server at ``base_url`` renders a probe conversation
    into other ids than ``tokenizer`` does (it samples ids the rows would record in the wrong tokenizer).

    Asks ``POST /tokenize`` (vLLM's and the built-in server's); returns False when the server has no such
    route or does not answer (nothing checked), True when the ids agree.
    """
    from agentgym.rollout.probe import tokenize_on_server

    messages = [{"role": "system", "content": "Probe: reply with one word."},
                {"role": "user", "content": "héllo wörld  12 + 3 = 15 <answer>Up</answer>\n#P_O#"}]
    served = tokenize_on_server(base_url, messages, model_name=model_name, api_key=api_key)
    if served is None:
        return False
    ours = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                              return_dict=False))
    if served != ours:
        first = next((i for i, (a, b) in enumerate(zip(served, ours)) if a != b), min(len(served), len(ours)))
        raise TokenizerMismatchError(
            f"the server at {base_url} ({model_name}) tokenizes a conversation into other ids than "
            f"{model or tokenizer_id(tokenizer).name}'s tokenizer (they part at token {first} of "
            f"{len(ours)}): it serves another model. Serve the model being trained, or pass the served "
            "one as --model.")
    return True
